/**
 * The scheduler's log as an operator gets it: `bb scheduler serve
 * --log-format json` as a real process, one whole allocation run through it
 * (create, a host enrolled with a one-use token, a bootstrap payload
 * delivered, release), then its captured stderr is checked: every line is a
 * JSON object, requests carry the X-Request-Id the caller sees, state
 * changes are logged, and no planted secret (principal tokens, a bogus
 * bearer token, the enrollment token, the host credential, the payload in
 * text or base64) appears anywhere, nor in the output of the real
 * `bb agent join` that enrolls the host. The host's polls then come from
 * the scripted agent (test/support/scriptedAgent.ts): `bb agent run` needs
 * a VM host; its lines go through the same redacting logger
 * (src/command/log.ts, unit-tested there).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureDevManifest } from "../../src/scheduler/manifest.ts";
import { SchedulerClient } from "../../src/client/index.ts";
import { FAKE_IMAGE_DIGEST } from "../support/scheduler.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";
import { runRoleExit, startRole, stopRole, tail, type Role } from "../support/processes.ts";
import { loadAgentFiles } from "../../src/agent/config.ts";

let dir: string;
let role: Role;
let url: string;
let tokens: { token: string; operatorToken: string };

function logLines(): Record<string, unknown>[] {
  return readFileSync(role.log, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => {
      try {
        return JSON.parse(l) as Record<string, unknown>;
      } catch {
        return { unparsed: l };
      }
    });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "bb-logs-"));
  const dev = ensureDevManifest(join(dir, "m"), FAKE_IMAGE_DIGEST);
  tokens = JSON.parse(readFileSync(dev.clientConfigPath, "utf8"));
  role = startRole(
    [
      "scheduler",
      "serve",
      "--data-dir",
      join(dir, "data"),
      "--manifest",
      dev.manifestPath,
      "--listen",
      "127.0.0.1:0",
      "--log-format",
      "json",
    ],
    join(dir, "scheduler.log"),
    { BB_LOG_LEVEL: "4" },
  );
  for (let i = 0; i < 200 && !url; i++) {
    const l = logLines().find((x) => x["msg"] === "scheduler listening");
    if (l) url = String(l["url"]);
    else await Bun.sleep(50);
  }
  if (!url) throw new Error(`the scheduler did not start:\n${tail(role.log)}`);
});

afterAll(async () => {
  if (role) await stopRole(role);
  rmSync(dir, { recursive: true, force: true });
});

describe("scheduler logs", () => {
  test("JSON lines with request IDs and state changes, no planted secret; the same run in the metrics", async () => {
    const controller = new SchedulerClient(url, tokens.token);
    const operator = new SchedulerClient(url, tokens.operatorToken);

    // Request IDs: echoed when well-formed, made fresh otherwise.
    const echoed = await fetch(`${url}/healthz`, { headers: { "x-request-id": "trace-abc.123" } });
    expect(echoed.headers.get("x-request-id")).toBe("trace-abc.123");
    const bogusBearer = "bbt_planted_bogus_token_0123456789abcdef";
    const refused = await fetch(`${url}/v1/allocations`, {
      headers: { authorization: `Bearer ${bogusBearer}`, "x-request-id": "bad id with spaces" },
    });
    expect(refused.status).toBe(401);
    const freshId = refused.headers.get("x-request-id")!;
    expect(freshId).toMatch(/^[0-9a-f]{24}$/);
    const wrongMethod = await fetch(`${url}/v1/allocations`, { method: "DELETE" });
    expect([wrongMethod.status, wrongMethod.headers.get("content-type"), wrongMethod.headers.get("allow")]).toEqual([
      405,
      "application/problem+json",
      "GET, HEAD, POST",
    ]);

    // A whole allocation with an enrolled host and a delivered payload.
    const enrollment = await operator.enrollmentToken("logs-host");
    // The real `bb agent join` enrolls (its output is checked for secrets too); the scripted agent then speaks for the host.
    const agentDir = join(dir, "agent");
    const joined = await runRoleExit(
      [
        "agent",
        "join",
        "--scheduler",
        url,
        "--token",
        enrollment.token,
        "--data-dir",
        agentDir,
        "--max-placements",
        "2",
      ],
      { BB_LOG_LEVEL: "4" },
    );
    expect(joined.code, joined.out).toBe(0);
    const e = { credential: loadAgentFiles(agentDir).credential };
    const agent = new ScriptedAgent(url, "logs-host", e.credential);
    await agent.poll();
    const { view } = await controller.create({ clientRequestId: "logs-1", workloadClass: "ci-small" });
    const present = await agent.waitCommand("ensure_present", view.allocationId);
    await agent.report(present, "prepared");
    await agent.waitCommand("ensure_running", view.allocationId);
    await agent.report(present, "running");
    await controller.waitFor(view.allocationId, (v) => v.state === "ready", { timeoutMs: 10_000 });
    const secretPayload = `echo planted-payload-${crypto.randomUUID()}`;
    const b64 = Buffer.from(secretPayload).toString("base64");
    const delivery = controller.deliver(view.allocationId, {
      deliveryId: "logs-d1",
      generation: 1,
      contentType: "text/x-shellscript",
      payloadBase64: b64,
    });
    for (let i = 0; i < 20 && agent.deliveries.length === 0; i++) await agent.poll(200);
    const digest = `sha256:${createHash("sha256").update(secretPayload).digest("hex")}`;
    await agent.send({
      deliveryAcks: [
        { deliveryId: "logs-d1", placementId: present.placementId, generation: 1, result: "consumed", digest },
      ],
    });
    expect((await delivery).digest).toBe(digest);
    // A poll parked before the release is woken by it (the wake-up latency histogram).
    await agent.send({ acks: agent.commands.map((c) => ({ commandId: c.commandId, result: "accepted" as const })) });
    const parked = agent.poll(10_000);
    await Bun.sleep(200);
    await controller.release(view.allocationId);
    expect((await parked).commands.map((c) => c.type)).toContain("ensure_absent");
    await agent.waitCommand("ensure_absent", view.allocationId);
    await agent.report(present, "absent");
    await controller.waitFor(view.allocationId, (v) => v.state === "released", { timeoutMs: 10_000 });

    // The same run in the metrics: latency histograms and process metrics.
    const metrics = await operator.metrics();
    for (const h of ["bb_allocation_create_to_reserved_seconds", "bb_allocation_create_to_ready_seconds"])
      expect(metrics).toContain(`${h}_count{workload_class="ci-small"} 1`);
    expect(metrics).toMatch(/bb_agent_poll_wakeup_seconds_count [1-9]/);
    for (const name of ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"])
      expect(metrics).toContain(`# TYPE ${name} `);
    expect(metrics).not.toContain(view.allocationId);
    expect(metrics).not.toContain("nodejs_eventloop_lag");
    expect(Number(/^process_cpu_seconds_total (\S+)$/m.exec(metrics)?.[1])).toBeGreaterThan(0);
    await stopRole(role);

    const text = `${readFileSync(role.log, "utf8")}\n${joined.out}`;
    const lines = logLines();
    expect(lines.filter((l) => "unparsed" in l)).toEqual([]);
    for (const l of lines)
      expect(
        typeof l["time"] === "string" && typeof l["level"] === "string" && typeof l["msg"] === "string",
        JSON.stringify(l),
      ).toBe(true);
    const requests = lines.filter((l) => l["msg"] === "http request");
    expect(requests.find((l) => l["requestId"] === "trace-abc.123")).toMatchObject({
      method: "GET",
      path: "/healthz",
      status: 200,
    });
    expect(requests.find((l) => l["requestId"] === freshId)).toMatchObject({
      path: "/v1/allocations",
      status: 401,
      code: "UNAUTHENTICATED",
    });
    expect(requests.find((l) => l["status"] === 405)).toMatchObject({ method: "DELETE", code: "METHOD_NOT_ALLOWED" });
    expect(requests.some((l) => l["path"] === "/v1/agents/poll" && l["level"] === "debug")).toBe(true);
    const states = lines
      .filter((l) => l["msg"] === "allocation state" && l["allocationId"] === view.allocationId)
      .map((l) => l["to"]);
    expect(states[0]).toBe("pending");
    expect(states).toContain("ready");
    expect(states[states.length - 1]).toBe("released");
    expect(lines.some((l) => l["msg"] === "host enrolled" && l["hostId"] === "logs-host")).toBe(true);
    expect(lines.some((l) => l["msg"] === "scheduler stopped")).toBe(true);

    const credentialSecret = e.credential.split(".")[1]!;
    const planted = {
      controllerToken: tokens.token,
      operatorToken: tokens.operatorToken,
      bogusBearer,
      enrollmentToken: enrollment.token,
      credentialSecret,
      payload: secretPayload,
      payloadBase64: b64,
    };
    for (const [name, secret] of Object.entries(planted))
      expect(text.includes(secret), `${name} is in the log`).toBe(false);
    // The check can fail: the same grep finds a planted value in a line that carries it.
    expect(`${text}\n${JSON.stringify({ msg: tokens.token })}`.includes(tokens.token)).toBe(true);
  });
});
