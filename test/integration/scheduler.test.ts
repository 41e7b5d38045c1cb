/**
 * The scheduler through its real HTTP API and SQLite objects, with a
 * scripted agent speaking the real agent protocol (test/support). Covers
 * bad input, idempotent create, enrollment, the whole lifecycle with
 * capacity released only after absence, epoch fencing, delivery rules and
 * a scheduler restart.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { BeachballError } from "../../src/protocol/errors.ts";
import { MAX_PAYLOAD_BYTES } from "../../src/protocol/api.ts";
import type { EnrollResponse } from "../../src/protocol/agent.ts";
import { rawPost, startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";

let s: TestScheduler;
const capacity = { cpuMillis: 1500, memoryMiB: 1024, ephemeralDiskMiB: 4096, maxPlacements: 2 };

async function enroll(hostId: string, cap = capacity): Promise<EnrollResponse> {
  const t = await s.operator.enrollmentToken(hostId);
  const r = await rawPost(
    `${s.url}/v1/agents/enroll`,
    null,
    JSON.stringify({
      token: t.token,
      capacity: cap,
      region: "local",
      architecture: "x86_64",
      agentProtocolVersion: "1.0",
      vmmDriver: "qemu-microvm",
    }),
  );
  expect(r.status).toBe(201);
  return r.body as unknown as EnrollResponse;
}

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? walk(join(dir, d.name)) : [join(dir, d.name)],
  );
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return "OK";
  } catch (e) {
    return e instanceof BeachballError ? e.code : String(e);
  }
}

async function waitState(id: string, state: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if ((await s.controller.get(id)).state === state) return;
    await Bun.sleep(25);
  }
  throw new Error(`allocation ${id} did not reach ${state}; it is ${(await s.controller.get(id)).state}`);
}

beforeAll(async () => {
  s = await startTestScheduler();
});
afterAll(async () => {
  await s.stop();
});

describe("bad input gets a stable code and changes nothing", () => {
  test("auth, schema, JSON, class and size errors", async () => {
    const url = `${s.url}/v1/allocations`;
    const ok = JSON.stringify({ clientRequestId: "bad-1", workloadClass: "ci-small" });
    const cases: [string | null, string, number, string][] = [
      [null, ok, 401, "UNAUTHENTICATED"],
      ["wrong-token", ok, 401, "UNAUTHENTICATED"],
      [s.tokens.token, "{not json", 400, "MALFORMED_JSON"],
      [
        s.tokens.token,
        JSON.stringify({ clientRequestId: "bad-1", workloadClass: "ci-small", sneaky: true }),
        400,
        "VALIDATION_FAILED",
      ],
      [
        s.tokens.token,
        JSON.stringify({ clientRequestId: "bad-1", workloadClass: "no-such-class" }),
        422,
        "UNKNOWN_WORKLOAD_CLASS",
      ],
      [
        s.tokens.token,
        JSON.stringify({ clientRequestId: "../../etc", workloadClass: "ci-small" }),
        400,
        "VALIDATION_FAILED",
      ],
      [s.tokens.operatorToken, ok, 403, "FORBIDDEN"],
    ];
    for (const [token, body, status, code] of cases) {
      const r = await rawPost(url, token, body);
      expect({ status: r.status, code: r.body["code"] }).toEqual({ status, code });
    }
    const big = await rawPost(
      url,
      s.tokens.token,
      JSON.stringify({ clientRequestId: "x".repeat(600_000), workloadClass: "ci-small" }),
    );
    expect([big.status, big.body["code"]]).toEqual([413, "BODY_TOO_LARGE"]);
    expect((await s.controller.list()).items).toHaveLength(0);
  });
});

describe("idempotent create", () => {
  test("same body replays, other body conflicts, 50 concurrent creates make one allocation", async () => {
    const a = await s.controller.create({ clientRequestId: "idem-1", workloadClass: "ci-small" });
    const b = await s.controller.create({ clientRequestId: "idem-1", workloadClass: "ci-small" });
    expect(a.created).toBe(true);
    expect(b.created).toBe(false);
    expect(b.view.allocationId).toBe(a.view.allocationId);
    expect(await codeOf(s.controller.create({ clientRequestId: "idem-1", workloadClass: "ci-medium" }))).toBe(
      "IDEMPOTENCY_CONFLICT",
    );
    const many = await Promise.all(
      Array.from({ length: 50 }, () => s.controller.create({ clientRequestId: "idem-50", workloadClass: "ci-small" })),
    );
    expect(new Set(many.map((m) => m.view.allocationId)).size).toBe(1);
    expect(many.filter((m) => m.created)).toHaveLength(1);
    const ids = (await s.controller.list()).items.map((v) => v.allocationId);
    expect(ids.filter((i) => i === many[0]!.view.allocationId)).toHaveLength(1);
    for (const id of new Set([a.view.allocationId, many[0]!.view.allocationId])) await s.controller.release(id);
    await waitState(a.view.allocationId, "released");
  });
});

describe("enrollment", () => {
  test("one-use token bound to a host; reuse with other config conflicts", async () => {
    const t = await s.operator.enrollmentToken("enroll-host");
    const body = {
      token: t.token,
      capacity,
      region: "local",
      architecture: "x86_64",
      agentProtocolVersion: "1.0",
      vmmDriver: "qemu-microvm",
    };
    const first = await rawPost(`${s.url}/v1/agents/enroll`, null, JSON.stringify(body));
    expect(first.status).toBe(201);
    expect(String(first.body["credential"])).toMatch(/^bbh_enroll-host\.[0-9a-f]{64}$/);
    const again = await rawPost(`${s.url}/v1/agents/enroll`, null, JSON.stringify(body));
    expect(again.body["code"]).toBe("ENROLLMENT_TOKEN_INVALID");
    const other = await rawPost(`${s.url}/v1/agents/enroll`, null, JSON.stringify({ ...body, region: "elsewhere" }));
    expect([other.status, other.body["code"]]).toEqual([409, "ENROLLMENT_CONFLICT"]);
    const unknown = await rawPost(
      `${s.url}/v1/agents/enroll`,
      null,
      JSON.stringify({ ...body, token: "bbe_nope_nope_nope" }),
    );
    expect(unknown.status).toBe(401);
    expect(await codeOf(s.controller.enrollmentToken("x"))).toBe("FORBIDDEN");
  });
});

describe("lifecycle with a scripted agent", () => {
  test("reserve → prepare → run → deliver → release; capacity returns only after absent", async () => {
    const e = await enroll("life-host");
    const agent = new ScriptedAgent(s.url, "life-host", e.credential);
    await agent.poll();
    const { view } = await s.controller.create({ clientRequestId: "life-1", workloadClass: "ci-small" });
    const present = await agent.waitCommand("ensure_present", view.allocationId);
    expect(present.commandId).toBe(`${present.placementId}:present:1`);
    expect(present.spec.cpuMillis).toBe(1000);
    const host = async () => (await s.operator.hosts()).find((h) => h.hostId === "life-host")!;
    expect((await host()).free.cpuMillis).toBe(500);

    expect(
      await codeOf(
        s.controller.deliver(view.allocationId, {
          deliveryId: "d-early",
          generation: 1,
          contentType: "text/x-shellscript",
          payloadBase64: "ZWNobyBoaQ==",
        }),
      ),
    ).toBe("GUEST_NOT_CONNECTED");
    await agent.report(present, "preparing");
    await agent.report(present, "prepared");
    const running = await agent.waitCommand("ensure_running", view.allocationId);
    expect(running.commandId).toBe(`${present.placementId}:running:1`);
    await agent.report(present, "starting");
    await agent.report(present, "running");
    await waitState(view.allocationId, "ready");

    expect(
      await codeOf(
        s.controller.deliver(view.allocationId, {
          deliveryId: "d-stale",
          generation: 2,
          contentType: "text/x-shellscript",
          payloadBase64: "ZWNobyBoaQ==",
        }),
      ),
    ).toBe("STALE_GENERATION");
    const tooBig = Buffer.alloc(MAX_PAYLOAD_BYTES + 1, 65).toString("base64");
    expect(
      await codeOf(
        s.controller.deliver(view.allocationId, {
          deliveryId: "d-big",
          generation: 1,
          contentType: "text/x-shellscript",
          payloadBase64: tooBig,
        }),
      ),
    ).toBe("PAYLOAD_TOO_LARGE");

    const payload = Buffer.from("echo hello; exit 3\n");
    const digest = `sha256:${createHash("sha256").update(payload).digest("hex")}`;
    const delivery = s.controller.deliver(view.allocationId, {
      deliveryId: "d-1",
      generation: 1,
      contentType: "text/x-shellscript",
      payloadBase64: payload.toString("base64"),
    });
    for (let i = 0; i < 20 && agent.deliveries.length === 0; i++) await agent.poll(200);
    expect(agent.deliveries[0]?.deliveryId).toBe("d-1");
    await agent.send({
      deliveryAcks: [
        { deliveryId: "d-1", placementId: present.placementId, generation: 1, result: "consumed", digest },
      ],
    });
    expect((await delivery).digest).toBe(digest);
    // No secret rests in the scheduler: the payload bytes are in no file of its data directory (WAL included).
    const marker = Buffer.from("echo hello; exit 3");
    for (const f of walk(s.dir)) expect(readFileSync(f).includes(marker), f).toBe(false);
    const replay = await s.controller.deliver(view.allocationId, {
      deliveryId: "d-1",
      generation: 1,
      contentType: "text/x-shellscript",
      payloadBase64: payload.toString("base64"),
    });
    expect(replay.replayed).toBe(true);
    expect(
      await codeOf(
        s.controller.deliver(view.allocationId, {
          deliveryId: "d-1",
          generation: 1,
          contentType: "text/x-shellscript",
          payloadBase64: "b3RoZXI=",
        }),
      ),
    ).toBe("DELIVERY_CONFLICT");

    await agent.report(present, "running", { workloadExitCode: 3 });
    await Bun.sleep(100);
    const afterExit = await s.controller.get(view.allocationId);
    expect(afterExit.state).toBe("ready");
    expect(afterExit.workloadExitCode).toBe(3);

    await s.controller.release(view.allocationId);
    await agent.waitCommand("ensure_absent", view.allocationId);
    await agent.report(present, "stopping");
    await Bun.sleep(100);
    expect((await s.controller.get(view.allocationId)).state).toBe("releasing");
    expect((await host()).free.cpuMillis).toBe(500);
    await agent.report(present, "absent");
    await waitState(view.allocationId, "released");
    expect((await host()).free).toEqual({ cpuMillis: 1500, memoryMiB: 1024, ephemeralDiskMiB: 4096, slots: 2 });
    const types = (await s.controller.events(view.allocationId)).map((x) => x.type);
    expect(types).toEqual([
      "allocation.created",
      "allocation.reserving",
      "allocation.provisioning",
      "placement.preparing",
      "placement.prepared",
      "placement.starting",
      "placement.running",
      "allocation.ready",
      "bootstrap.consumed",
      "workload.exited",
      "allocation.release_requested",
      "allocation.releasing",
      "placement.stopping",
      "placement.absent",
      "allocation.released",
    ]);
  });

  test("an older epoch is fenced with STALE_AGENT_EPOCH", async () => {
    const e = await enroll("epoch-host");
    const a = new ScriptedAgent(s.url, "epoch-host", e.credential);
    await a.poll();
    const old = a.epoch;
    const b = new ScriptedAgent(s.url, "epoch-host", e.credential);
    await b.poll();
    expect(b.epoch).not.toBe(old);
    expect(await codeOf(a.send({}, old))).toBe("STALE_AGENT_EPOCH");
    const forged = new ScriptedAgent(s.url, "epoch-host", `bbh_epoch-host.${"0".repeat(64)}`);
    expect(await codeOf(forged.poll())).toBe("UNAUTHENTICATED");
  });

  test("no capacity keeps the allocation pending and records the alert (ci-medium needs 2000m; hosts have 1500m)", async () => {
    const { view } = await s.controller.create({ clientRequestId: "huge-1", workloadClass: "ci-medium" });
    await Bun.sleep(200);
    const v = await s.controller.get(view.allocationId);
    expect(v.state).toBe("pending");
    expect((await s.controller.events(view.allocationId)).some((x) => x.type === "allocation.no_eligible_host")).toBe(
      true,
    );
    await s.controller.release(view.allocationId);
    await waitState(view.allocationId, "released");
  });

  test("a scheduler restart resumes the allocation from SQLite", async () => {
    const e = await enroll("restart-host");
    const agent = new ScriptedAgent(s.url, "restart-host", e.credential);
    await agent.poll();
    const { view } = await s.controller.create({ clientRequestId: "restart-1", workloadClass: "ci-small" });
    const present = await agent.waitCommand("ensure_present", view.allocationId);
    await s.restart();
    await agent.report(present, "prepared");
    await agent.waitCommand("ensure_running", view.allocationId);
    await agent.report(present, "running");
    await waitState(view.allocationId, "ready");
    await s.restart();
    await s.controller.release(view.allocationId);
    await agent.waitCommand("ensure_absent", view.allocationId);
    await agent.report(present, "absent");
    await waitState(view.allocationId, "released");
  });

  test("the agent protocol's bounds: a poll hands out at most 16 commands; an envelope over 256 KiB is refused", async () => {
    const e = await enroll("bounds-host", {
      cpuMillis: 64_000,
      memoryMiB: 16_384,
      ephemeralDiskMiB: 65_536,
      maxPlacements: 32,
    });
    const agent = new ScriptedAgent(s.url, "bounds-host", e.credential);
    await agent.poll();
    const ids: string[] = [];
    for (let i = 0; i < 16; i++)
      ids.push(
        (await s.controller.create({ clientRequestId: `bounds-${i}`, workloadClass: "ci-small" })).view.allocationId,
      );
    const first = await agent.poll();
    expect(first.commands).toHaveLength(16);
    await agent.report(first.commands[0]!, "prepared");
    const second = await agent.poll();
    expect(second.commands).toHaveLength(16);
    expect(second.commands.some((c) => c.type === "ensure_running")).toBe(false);
    const big = await rawPost(`${s.url}/v1/agents/poll`, e.credential, JSON.stringify({ pad: "x".repeat(300 * 1024) }));
    expect([big.status, big.body["code"]]).toEqual([413, "ENVELOPE_TOO_LARGE"]);
    for (const id of ids) await s.controller.release(id);
  });
});
