/**
 * The rendezvous WebSocket (`GET /v1/connections/{id}/connect`,
 * src/scheduler/rendezvousSocket.ts) on a real scheduler on loopback
 * (test/support/scheduler.ts) with a scripted agent: authenticated like the
 * long-poll routes, messages both ways (the peer on the long-poll routes),
 * and its bounds: a request without an upgrade, a bad frame, an oversized
 * frame, too many frames, too many sockets, and the Connection's end.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connectionGrantsPath, type ConnectionGrantResponse, type ConnectionMessage } from "../protocol/connection.ts";
import {
  openTestConnection,
  rawPost,
  startTestScheduler,
  type TestConnection,
  type TestScheduler,
} from "../../test/support/scheduler.ts";
import {
  MAX_RENDEZVOUS_FRAME_BYTES,
  MAX_RENDEZVOUS_FRAMES_PER_WINDOW,
  MAX_RENDEZVOUS_SOCKETS_PER_ROLE,
} from "./rendezvousSocket.ts";

let s: TestScheduler;
let base: TestConnection;
let n = 0;

beforeAll(async () => {
  s = await startTestScheduler();
  const t = await s.operator.enrollmentToken("ws-host");
  const r = await rawPost(
    `${s.url}/v1/agents/enroll`,
    null,
    JSON.stringify({
      token: t.token,
      capacity: { cpuMillis: 4000, memoryMiB: 4096, ephemeralDiskMiB: 16384, maxPlacements: 8 },
      region: "local",
      architecture: "x86_64",
      agentProtocolVersion: "1.0",
      vmmDriver: "qemu-microvm",
    }),
  );
  base = await openTestConnection(s, "ws-host", String(r.body["credential"]), "ws-base");
});
afterAll(async () => {
  await s.stop();
});

/** A fresh grant (its own Connection) for the one ready allocation, with the host role's endpoint token (derived by the signer). */
async function connection(): Promise<TestConnection & { hostToken: string }> {
  const res = await fetch(`${s.url}${connectionGrantsPath(base.allocationId)}`, {
    method: "POST",
    headers: { authorization: `Bearer ${s.tokens.token}`, "content-type": "application/json" },
    body: JSON.stringify({
      clientPublicKey: Buffer.alloc(32, 40 + ++n).toString("base64"),
      transport: "tcp",
      ports: [22],
    }),
  });
  expect(res.status).toBe(201);
  const g = (await res.json()) as ConnectionGrantResponse;
  return {
    allocationId: base.allocationId,
    grantId: g.grant.payload.grantId,
    connectionId: g.connectionId,
    endpointToken: g.endpointToken,
    hostToken: s.server.worker.env.signer!.hostEndpointToken(g.connectionId),
  };
}

/** A WebSocket client of the route, recording every frame and the close. */
function open(c: TestConnection, token: string, after = 0) {
  const ws = new WebSocket(`${s.url.replace("http", "ws")}/v1/connections/${c.connectionId}/connect?after=${after}`, {
    headers: { authorization: `Bearer ${token}` },
  } as unknown as string[]);
  const frames: Record<string, unknown>[] = [];
  let closed: { code: number } | null = null;
  const opened = new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error("websocket error"));
  });
  ws.onmessage = (e) => frames.push(JSON.parse(String(e.data)) as Record<string, unknown>);
  ws.onclose = (e) => (closed = { code: e.code });
  const until = async (what: string, f: () => boolean, ms = 5_000) => {
    for (let t = 0; t < ms / 20 && !f(); t++) await Bun.sleep(20);
    if (!f()) throw new Error(`timed out waiting for ${what}; frames ${JSON.stringify(frames)}`);
  };
  return { ws, frames, opened, until, closed: () => closed };
}

const candidates = (seq: number): ConnectionMessage => ({
  type: "candidates",
  seq,
  candidates: [{ address: "198.51.100.7", port: 40_000 + seq, kind: "stun" }],
});
const call = (c: TestConnection, token: string | null, headers: Record<string, string> = {}) =>
  fetch(`${s.url}/v1/connections/${c.connectionId}/connect`, {
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers },
  });

describe("rendezvous over a WebSocket", () => {
  test("auth like the long-poll routes; a request without an upgrade is 426 UPGRADE_REQUIRED", async () => {
    const c = await connection();
    expect((await call(c, null)).status).toBe(401);
    expect((await call(c, `bbx_${"0".repeat(64)}`)).status).toBe(401);
    const plain = await call(c, c.endpointToken);
    expect([plain.status, ((await plain.json()) as { code: string }).code]).toEqual([426, "UPGRADE_REQUIRED"]);
  });

  test("the client's frames reach the host's long-poll; the host's messages are pushed to the client's socket", async () => {
    const c = await connection();
    const client = open(c, c.endpointToken);
    await client.opened;
    client.ws.send(JSON.stringify({ messages: [candidates(1)] }));
    await client.until("the acceptance", () => client.frames.some((f) => f["type"] === "accepted"));
    expect(client.frames.find((f) => f["type"] === "accepted")).toMatchObject({
      role: "client",
      lastAcceptedSeq: 1,
      closed: false,
    });
    const hostPoll = await fetch(`${s.url}/v1/connections/${c.connectionId}/poll`, {
      method: "POST",
      headers: { authorization: `Bearer ${c.hostToken}`, "content-type": "application/json" },
      body: JSON.stringify({ after: 0 }),
    });
    expect(((await hostPoll.json()) as { messages: ConnectionMessage[] }).messages).toEqual([candidates(1)]);
    const obs: ConnectionMessage = { type: "path_observation", seq: 1, path: "direct", via: "198.51.100.7:40001" };
    await fetch(`${s.url}/v1/connections/${c.connectionId}/messages`, {
      method: "POST",
      headers: { authorization: `Bearer ${c.hostToken}`, "content-type": "application/json" },
      body: JSON.stringify({ messages: [obs] }),
    });
    await client.until("the host's message on the socket", () => client.frames.some((f) => f["type"] === "messages"));
    expect(client.frames.find((f) => f["type"] === "messages")).toMatchObject({ role: "client", messages: [obs] });
    client.ws.close();
  });

  test("a frame that is not a messages body, or too large, closes the socket (1008, 1009); nothing is written", async () => {
    const c = await connection();
    const a = open(c, c.endpointToken);
    await a.opened;
    a.ws.send(JSON.stringify({ messages: [{ type: "candidates", seq: 1, candidates: "nope" }] }));
    await a.until("the close", () => a.closed() !== null);
    expect(a.frames.at(-1)).toMatchObject({ type: "error", code: "VALIDATION_FAILED" });
    expect(a.closed()!.code).toBe(1008);
    const b = open(c, c.endpointToken);
    await b.opened;
    b.ws.send("x".repeat(MAX_RENDEZVOUS_FRAME_BYTES + 1));
    await b.until("the close", () => b.closed() !== null);
    expect(b.closed()!.code).toBe(1009);
    const hostPoll = await fetch(`${s.url}/v1/connections/${c.connectionId}/poll`, {
      method: "POST",
      headers: { authorization: `Bearer ${c.hostToken}`, "content-type": "application/json" },
      body: JSON.stringify({ after: 0 }),
    });
    expect(((await hostPoll.json()) as { messages: unknown[] }).messages).toEqual([]);
  });

  test(`bounds: ${MAX_RENDEZVOUS_FRAMES_PER_WINDOW} frames per window (then RATE_LIMITED, 1008) and ${MAX_RENDEZVOUS_SOCKETS_PER_ROLE} sockets per role (then 429)`, async () => {
    const c = await connection();
    const socks = Array.from({ length: MAX_RENDEZVOUS_SOCKETS_PER_ROLE }, () => open(c, c.endpointToken));
    for (const x of socks) await x.opened;
    const refused = await call(c, c.endpointToken, {
      upgrade: "websocket",
      connection: "Upgrade",
      "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
      "sec-websocket-version": "13",
    });
    expect([refused.status, ((await refused.json()) as { code: string }).code]).toEqual([429, "RATE_LIMITED"]);
    const a = socks[0]!;
    for (let i = 1; i <= MAX_RENDEZVOUS_FRAMES_PER_WINDOW + 1; i++)
      a.ws.send(JSON.stringify({ messages: [{ type: "ack", seq: i, upTo: 0 }] }));
    await a.until("the close", () => a.closed() !== null);
    expect(a.closed()!.code).toBe(1008);
    expect(a.frames.at(-1)).toMatchObject({ type: "error", code: "RATE_LIMITED" });
    socks[1]!.ws.close();
  });

  test("revoking the grant ends the socket (1000)", async () => {
    const c = await connection();
    const a = open(c, c.endpointToken);
    await a.opened;
    await s.controller.revokeConnectionGrant(c.allocationId, c.grantId);
    await a.until("the close", () => a.closed() !== null, 10_000);
    expect(a.closed()!.code).toBe(1000);
    expect(a.frames.at(-1)).toMatchObject({ type: "error", code: "UNAUTHENTICATED" });
  });
});
