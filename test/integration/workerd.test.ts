/**
 * The same scheduler object classes on workerd, the open-source Durable
 * Objects runtime (the real binary from the `workerd` npm package): the
 * bundle from deploy/workerd/build.ts serves an allocation from create
 * through a scripted agent's polls to `released`, with a connection grant
 * signed with the BB_CONNECTION_SIGNING_KEY binding, its Connection and
 * its revocation on the way, and workerd stopped and
 * started again in the middle (state from its SQLite-backed objects on
 * disk). Loopback only; the process is ended by its PID.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Subprocess } from "bun";
import { buildWorkerd } from "../../deploy/workerd/build.ts";
import { DEV_CONNECTION_KEY_FILE, ensureDevManifest } from "../../src/scheduler/manifest.ts";
import { connectionGrantsPath, type ConnectionGrantResponse } from "../../src/protocol/connection.ts";
import { checkSignedGrant } from "../../src/protocol/connectionSignature.ts";
import type { WellKnown } from "../../src/protocol/api.ts";
import { SchedulerClient } from "../../src/client/index.ts";
import type { EnrollResponse } from "../../src/protocol/agent.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";
import { FAKE_IMAGE_DIGEST, rawPost } from "../support/scheduler.ts";

const WORKERD = resolve("node_modules/.bin/workerd");
let dir = "";
let config = "";
let port = 0;
let proc: Subprocess | null = null;
let manifestJson = "";
/** The development manifest's connection-signing key (workerd reads it from a binding, not the key file). */
let signingSeed = "";

async function startWorkerd(): Promise<string> {
  const url = `http://127.0.0.1:${port}`;
  proc = Bun.spawn(
    [
      WORKERD,
      "serve",
      config,
      "--directory-path",
      `storage=${join(dir, "storage")}`,
      "--socket-addr",
      `http=127.0.0.1:${port}`,
    ],
    {
      env: { ...process.env, BB_MANIFEST: manifestJson, BB_PUBLIC_URL: url, BB_CONNECTION_SIGNING_KEY: signingSeed },
      stdout: "inherit",
      stderr: "inherit",
    },
  );
  for (let i = 0; i < 200; i++) {
    if (
      await fetch(`${url}/healthz`)
        .then((r) => r.ok)
        .catch(() => false)
    )
      return url;
    await Bun.sleep(50);
  }
  throw new Error("workerd did not answer /healthz");
}

async function stopWorkerd(): Promise<void> {
  if (!proc) return;
  proc.kill("SIGTERM");
  await proc.exited;
  proc = null;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "bb-workerd-"));
  mkdirSync(join(dir, "storage"));
  config = await buildWorkerd(join(dir, "build"));
  manifestJson = readFileSync(ensureDevManifest(join(dir, "manifest"), FAKE_IMAGE_DIGEST).manifestPath, "utf8");
  signingSeed = readFileSync(join(dir, "manifest", DEV_CONNECTION_KEY_FILE), "utf8").trim();
  port = 21_000 + Math.floor(Math.random() * 20_000);
});

afterAll(async () => {
  await stopWorkerd();
  rmSync(dir, { recursive: true, force: true });
});

describe("the scheduler on workerd", () => {
  test("create → scripted agent → ready → workerd restart → release → released", async () => {
    let url = await startWorkerd();
    // The same HTTP surface as the embedded host: 405 with Allow, the OpenAPI document, request IDs.
    const wrong = await fetch(`${url}/v1/allocations`, { method: "DELETE", headers: { "x-request-id": "wd-trace-1" } });
    expect([
      wrong.status,
      wrong.headers.get("allow"),
      wrong.headers.get("content-type"),
      wrong.headers.get("x-request-id"),
    ]).toEqual([405, "GET, HEAD, POST", "application/problem+json", "wd-trace-1"]);
    expect(((await wrong.json()) as { code: string }).code).toBe("METHOD_NOT_ALLOWED");
    expect(((await (await fetch(`${url}/openapi.json`)).json()) as { openapi: string }).openapi).toBe("3.1.0");
    const tokens = JSON.parse(readFileSync(join(dir, "manifest", "client.json"), "utf8")) as {
      token: string;
      operatorToken: string;
    };
    const operator = new SchedulerClient(url, tokens.operatorToken);
    // Bad input is refused as on the embedded host (test/integration/bad-input.test.ts walks every route there).
    const refusal = async (path: string, init: RequestInit) => {
      const r = await fetch(`${url}${path}`, {
        ...init,
        headers: { authorization: `Bearer ${tokens.token}`, ...(init.headers as Record<string, string>) },
      });
      const p = (await r.json()) as { code: string; detail: string };
      return [r.status, p.code, p.detail];
    };
    expect(
      await refusal("/v1/allocations", { method: "POST", headers: { "content-type": "text/plain" }, body: "{}" }),
    ).toEqual([415, "UNSUPPORTED_MEDIA_TYPE", "this route takes Content-Type: application/json (got text/plain)"]);
    expect(
      await refusal("/v1/allocations", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: '{"clientRequestId":"wd-x","workloadClass":"ci-small","bogus":1}',
      }),
    ).toEqual([
      400,
      "VALIDATION_FAILED",
      "/bogus: unknown field; allowed fields here: clientRequestId, workloadClass, labels, ttlSeconds",
    ]);
    expect(await refusal("/v1/allocations/alloc_xyz", { method: "GET" })).toEqual([
      400,
      "VALIDATION_FAILED",
      "path parameter id (allocation ID) must match ^alloc_[0-9a-f]{32}$",
    ]);
    expect(
      await refusal(`/v1/allocations/alloc_${"0".repeat(32)}/connection-grants/grt_${"0".repeat(32)}`, {
        method: "DELETE",
      }),
    ).toEqual([404, "NOT_FOUND", "no such allocation"]);
    const t = await operator.enrollmentToken("wd-host");
    const enrolled = await rawPost(
      `${url}/v1/agents/enroll`,
      null,
      JSON.stringify({
        token: t.token,
        capacity: { cpuMillis: 2000, memoryMiB: 1024, ephemeralDiskMiB: 4096, maxPlacements: 2 },
        region: "local",
        architecture: "x86_64",
        agentProtocolVersion: "1.0",
        vmmDriver: "qemu-microvm",
      }),
    );
    expect(enrolled.status).toBe(201);
    const e = enrolled.body as unknown as EnrollResponse;
    const agent = new ScriptedAgent(url, "wd-host", e.credential);
    await agent.poll();
    let controller = new SchedulerClient(url, tokens.token);
    const { view } = await controller.create({ clientRequestId: "wd-1", workloadClass: "ci-small" });
    expect(["pending", "provisioning"]).toContain(view.state);
    const present = await agent.waitCommand("ensure_present", view.allocationId);
    await agent.report(present, "prepared");
    await agent.waitCommand("ensure_running", view.allocationId);
    await agent.report(present, "running");
    for (let i = 0; i < 100 && (await controller.get(view.allocationId)).state !== "ready"; i++) await Bun.sleep(50);
    expect((await controller.get(view.allocationId)).state).toBe("ready");
    // Workload output (issue 13): the placement's host pushes a chunk; the owner reads it, after the restart too.
    const chunk = {
      allocationId: view.allocationId,
      placementId: present.placementId,
      generation: present.generation,
      offset: 0,
      text: "wd-line-1\n",
    };
    expect((await agent.client.push([chunk])).results).toEqual([{ placementId: present.placementId, streamEnd: 10 }]);

    // A connection grant: the host endpoint reports its key, the grant is signed with the binding's key and verifies.
    const hostKey = Buffer.alloc(32, 9).toString("base64");
    await agent.send({
      connectivity: {
        seq: 1,
        hostPublicKey: hostKey,
        candidates: [{ address: "127.0.0.1", port: 51820, kind: "local" }],
        appliedGrants: [],
        refusedGrants: [],
        at: new Date().toISOString(),
      },
    });
    const grantReq = {
      method: "POST",
      headers: { authorization: `Bearer ${tokens.token}`, "content-type": "application/json" },
      body: JSON.stringify({ clientPublicKey: Buffer.alloc(32, 7).toString("base64"), transport: "tcp", ports: [22] }),
    };
    const granted = await fetch(`${url}${connectionGrantsPath(view.allocationId)}`, grantReq);
    expect(granted.status).toBe(201);
    const g = (await granted.json()) as ConnectionGrantResponse;
    const wk = (await (await fetch(`${url}/v1/.well-known/beachball`)).json()) as WellKnown;
    const keys = new Map(Object.entries(wk.connectionVerificationKeys ?? {}));
    expect(
      checkSignedGrant(
        g.grant,
        keys,
        { allocationId: view.allocationId, generation: 1, hostId: "wd-host", hostPublicKey: hostKey },
        Date.now(),
      ).ok,
    ).toBe(true);
    expect((await agent.poll()).connections?.map((c) => c.action)).toEqual(["apply"]);

    await stopWorkerd();
    url = await startWorkerd();
    controller = new SchedulerClient(url, tokens.token);
    // The agent keeps its session (epoch, sequence numbers) across the restart: the Host object's state is on disk.
    const after = await controller.get(view.allocationId);
    expect([after.state, after.hostId, after.placementId]).toEqual(["ready", "wd-host", present.placementId]);
    expect(await controller.logs(view.allocationId, 0)).toEqual({
      offset: 0,
      nextOffset: 10,
      droppedBytes: 0,
      text: "wd-line-1\n",
      complete: false,
    });
    const following = controller.logs(view.allocationId, 10, true);
    await agent.client.push([{ ...chunk, offset: 10, text: "wd-line-2\n" }]);
    expect((await following).text).toBe("wd-line-2\n");
    await expect(new SchedulerClient(url, tokens.operatorToken).logs(view.allocationId)).rejects.toMatchObject({
      code: "NOT_FOUND",
    });

    // The Connection survived the restart; a revoke ends it and reaches the host.
    const connPoll = () =>
      fetch(`${url}/v1/connections/${g.connectionId}/poll`, {
        method: "POST",
        headers: { authorization: `Bearer ${g.endpointToken}`, "content-type": "application/json" },
        body: JSON.stringify({ after: 0 }),
      });
    expect((await connPoll()).status).toBe(200);
    expect(
      (
        await fetch(`${url}${connectionGrantsPath(view.allocationId, g.grant.payload.grantId)}`, {
          method: "DELETE",
          headers: { authorization: `Bearer ${tokens.token}` },
        })
      ).status,
    ).toBe(204);
    expect((await connPoll()).status).toBe(401);
    expect((await agent.poll()).connections?.map((c) => `${c.grantId} ${c.action}`)).toContain(
      `${g.grant.payload.grantId} revoke`,
    );

    await controller.release(view.allocationId);
    await agent.waitCommand("ensure_absent", view.allocationId);
    await agent.report(present, "absent");
    for (let i = 0; i < 100 && (await controller.get(view.allocationId)).state !== "released"; i++) await Bun.sleep(50);
    expect((await controller.get(view.allocationId)).state).toBe("released");
    const types = (await controller.events(view.allocationId)).map((x) => x.type);
    expect(types).toContain("allocation.ready");
    expect(types.slice(-2)).toEqual(["placement.absent", "allocation.released"]);
    expect((await controller.list()).items.map((v) => v.allocationId)).toContain(view.allocationId);
  }, 120_000);
});
