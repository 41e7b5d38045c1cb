/**
 * Connection grants through the scheduler's real HTTP API (spec "Data
 * path" step 2, "Coordination and path selection", "Revocation and
 * replacement"): the embedded scheduler on loopback with its development
 * manifest (which has private networking), a scripted agent speaking the
 * real agent protocol and reporting a host endpoint. Covers the routes'
 * codes and statuses, a grant verified with the keys the discovery
 * document publishes, configure_connection delivery, the rendezvous routes
 * under endpoint tokens, revocation and release. Nothing is stored that a
 * token or key could be read from.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { ConnectivityUpdate, EnrollResponse } from "../../src/protocol/agent.ts";
import {
  connectionGrantsPath,
  type ConnectionGrantResponse,
  type ConnectionPollResponse,
} from "../../src/protocol/connection.ts";
import { checkSignedGrant, checkSignedRelayMap } from "../../src/protocol/connectionSignature.ts";
import type { WellKnown } from "../../src/protocol/api.ts";
import { DEV_CONNECTION_KEY_FILE } from "../../src/scheduler/manifest.ts";
import { enrollTestHost, startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";

let s: TestScheduler;
const capacity = { cpuMillis: 1500, memoryMiB: 1024, ephemeralDiskMiB: 4096, maxPlacements: 2 };
const clientKey = Buffer.alloc(32, 7).toString("base64");
const hostKey = Buffer.alloc(32, 9).toString("base64");

async function enroll(hostId: string): Promise<EnrollResponse> {
  return (await enrollTestHost(s, hostId, capacity)) as unknown as EnrollResponse;
}

/** A request with a bearer token; status and parsed body (null for an empty one). */
async function call(
  method: string,
  path: string,
  token: string | null,
  body?: unknown,
): Promise<{ status: number; body: Record<string, unknown> | null }> {
  const res = await fetch(`${s.url}${path}`, {
    method,
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
    },
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : null };
}

const expectProblem = (r: { status: number; body: Record<string, unknown> | null }, status: number, code: string) =>
  expect([r.status, r.body?.["code"]]).toEqual([status, code]);

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? walk(join(dir, d.name)) : [join(dir, d.name)],
  );
}

async function waitState(id: string, state: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if ((await s.controller.get(id)).state === state) return;
    await Bun.sleep(25);
  }
  throw new Error(`allocation ${id} did not reach ${state}`);
}

beforeAll(async () => {
  s = await startTestScheduler();
});
afterAll(async () => {
  await s.stop();
});

describe("connection grants over HTTP", () => {
  test("a grant for a ready allocation: codes before it, a verified grant, the host's command, rendezvous, revocation, release", async () => {
    const wk = (await call("GET", "/v1/.well-known/beachball", null)).body as unknown as WellKnown;
    const keys = new Map(Object.entries(wk.connectionVerificationKeys ?? {}));
    expect(keys.size).toBe(1);

    const e = await enroll("grant-host");
    const agent = new ScriptedAgent(s.url, "grant-host", e.credential);
    await agent.poll();
    const { view } = await s.controller.create({ clientRequestId: "grant-1", workloadClass: "ci-small" });
    const id = view.allocationId;
    const path = connectionGrantsPath(id);
    const body = { clientPublicKey: clientKey, transport: "tcp", ports: [22] };

    // Not ready yet.
    expectProblem(await call("POST", path, s.tokens.token, body), 409, "INVALID_STATE");
    const present = await agent.waitCommand("ensure_present", id);
    await agent.report(present, "prepared");
    await agent.waitCommand("ensure_running", id);
    await agent.report(present, "running");
    await waitState(id, "ready");

    // Ready, but the host endpoint has not reported its key and candidates.
    expectProblem(await call("POST", path, s.tokens.token, body), 503, "CONNECTIVITY_UNAVAILABLE");
    const connectivity: ConnectivityUpdate = {
      seq: 1,
      hostPublicKey: hostKey,
      candidates: [{ address: "127.0.0.1", port: 51820, kind: "local" }],
      appliedGrants: [],
      refusedGrants: [],
      at: new Date().toISOString(),
    };
    await agent.send({ connectivity });

    // Bad requests: stable codes, nothing issued.
    expectProblem(await call("POST", path, null, body), 401, "UNAUTHENTICATED");
    expectProblem(await call("POST", path, s.tokens.operatorToken, body), 403, "FORBIDDEN");
    expectProblem(await call("POST", path, s.tokens.token, "{nope"), 400, "MALFORMED_JSON");
    expectProblem(
      await call("POST", path, s.tokens.token, { ...body, clientPublicKey: "short" }),
      400,
      "VALIDATION_FAILED",
    );
    expectProblem(await call("POST", path, s.tokens.token, { ...body, ports: [] }), 400, "VALIDATION_FAILED");
    expectProblem(await call("POST", path, s.tokens.token, { ...body, extra: 1 }), 400, "VALIDATION_FAILED");
    expectProblem(await call("POST", path, s.tokens.token, { ...body, generation: 2 }), 409, "STALE_GENERATION");
    expectProblem(
      await call("POST", connectionGrantsPath(`alloc_${"0".repeat(32)}`), s.tokens.token, body),
      404,
      "NOT_FOUND",
    );
    expectProblem(
      await call("POST", path, s.tokens.token, { ...body, ports: Array.from({ length: 17 }, (_, i) => i + 1) }),
      400,
      "VALIDATION_FAILED",
    );
    expectProblem(
      await call("POST", path, s.tokens.token, JSON.stringify({ ...body, pad: "x".repeat(600_000) })),
      413,
      "BODY_TOO_LARGE",
    );
    expect((await agent.poll()).connections).toBeUndefined();

    // The grant.
    const created = await call("POST", path, s.tokens.token, body);
    expect(created.status).toBe(201);
    const g = created.body as unknown as ConnectionGrantResponse;
    const checked = checkSignedGrant(
      g.grant,
      keys,
      {
        allocationId: id,
        generation: 1,
        hostId: "grant-host",
        hostPublicKey: hostKey,
        clientPublicKey: clientKey,
        transport: "tcp",
        port: 22,
      },
      Date.now(),
    );
    expect(checked.ok).toBe(true);
    expect(checkSignedRelayMap(g.relayMap, keys, Date.now()).ok).toBe(true);
    expect(g.hostCandidates).toEqual(connectivity.candidates);

    // The host gets configure_connection apply (in `connections`, not `commands`) with its own endpoint token.
    const polled = await agent.poll();
    const apply = polled.connections?.find((c) => c.grantId === g.grant.payload.grantId && c.action === "apply");
    expect(apply?.grant).toEqual(g.grant);
    expect(polled.commands.some((c) => (c as { type: string }).type === "configure_connection")).toBe(false);
    await agent.send({ acks: [{ commandId: apply!.commandId, result: "accepted" }] });

    // Rendezvous: each side with its own token; a wrong or missing token is refused.
    const conn = (p: string) => `/v1/connections/${g.connectionId}/${p}`;
    expectProblem(await call("POST", conn("poll"), null, { after: 0 }), 401, "UNAUTHENTICATED");
    expectProblem(await call("POST", conn("poll"), `bbx_${"0".repeat(64)}`, { after: 0 }), 401, "UNAUTHENTICATED");
    expectProblem(await call("POST", conn("poll"), s.tokens.token, { after: 0 }), 401, "UNAUTHENTICATED");
    expectProblem(
      await call("POST", `/v1/connections/con_${"0".repeat(32)}/poll`, g.endpointToken, { after: 0 }),
      401,
      "UNAUTHENTICATED",
    );
    expectProblem(await call("POST", conn("messages"), g.endpointToken, { messages: [] }), 400, "VALIDATION_FAILED");
    const sent = await call("POST", conn("messages"), g.endpointToken, {
      messages: [{ type: "candidates", seq: 1, candidates: [{ address: "127.0.0.1", port: 40001, kind: "local" }] }],
    });
    expect(sent.status).toBe(200);
    expect(sent.body).toMatchObject({ role: "client", lastAcceptedSeq: 1, closed: false });
    const hostView = (await call("POST", conn("poll"), apply!.endpointToken!, { after: 0 }))
      .body as unknown as ConnectionPollResponse;
    expect(hostView.role).toBe("host");
    expect(hostView.messages).toEqual([
      { type: "candidates", seq: 1, candidates: [{ address: "127.0.0.1", port: 40001, kind: "local" }] },
    ]);

    // Nothing stored holds a token or the grant's endpoint tokens (only digests); the signing key lives only in its key file.
    const seed = readFileSync(join(s.dir, DEV_CONNECTION_KEY_FILE), "utf8").trim();
    for (const f of walk(s.dir)) {
      const bytes = readFileSync(f);
      for (const secret of [g.endpointToken, apply!.endpointToken!]) expect(bytes.includes(secret), f).toBe(false);
      if (!f.endsWith(DEV_CONNECTION_KEY_FILE)) expect(bytes.includes(seed), f).toBe(false);
    }

    // Revocation: 204, idempotent; the host gets the revoke; the Connection ends.
    const del = await call("DELETE", connectionGrantsPath(id, g.grant.payload.grantId), s.tokens.token);
    expect([del.status, del.body]).toEqual([204, null]);
    expect((await call("DELETE", connectionGrantsPath(id, g.grant.payload.grantId), s.tokens.token)).status).toBe(204);
    expectProblem(
      await call("DELETE", connectionGrantsPath(id, `grt_${"1".repeat(32)}`), s.tokens.token),
      404,
      "NOT_FOUND",
    );
    expectProblem(
      await call("DELETE", connectionGrantsPath(id, g.grant.payload.grantId), s.tokens.operatorToken),
      403,
      "FORBIDDEN",
    );
    const revoke = (await agent.poll()).connections?.find((c) => c.action === "revoke");
    expect(revoke).toEqual({
      commandId: `${g.grant.payload.grantId}:revoke`,
      type: "configure_connection",
      action: "revoke",
      grantId: g.grant.payload.grantId,
    });
    expectProblem(await call("POST", conn("poll"), g.endpointToken, { after: 0 }), 401, "UNAUTHENTICATED");

    // Release: a new grant is refused, and one issued before the release is revoked at the host.
    const second = (await call("POST", path, s.tokens.token, body)).body as unknown as ConnectionGrantResponse;
    await s.controller.release(id);
    expectProblem(await call("POST", path, s.tokens.token, body), 409, "INVALID_STATE");
    let revoked = false;
    for (let i = 0; i < 40 && !revoked; i++)
      revoked = ((await agent.poll(100)).connections ?? []).some(
        (c) => c.grantId === second.grant.payload.grantId && c.action === "revoke",
      );
    expect(revoked).toBe(true);
  });

  test("without a ready allocation of its own, a controller gets 404 for someone else's ID; the routes answer 405 for other methods", async () => {
    expectProblem(
      await call("POST", connectionGrantsPath(`alloc_${"2".repeat(32)}`), s.tokens.token, {
        clientPublicKey: clientKey,
        transport: "tcp",
        ports: [22],
      }),
      404,
      "NOT_FOUND",
    );
    const r = await call("PUT", connectionGrantsPath(`alloc_${"2".repeat(32)}`), s.tokens.token, {});
    expect(r.status).toBe(405);
  });
});
