/**
 * Routing never depends on the Host header (issue 18 item 20): every HTTP
 * server the project runs (the scheduler embedded and on workerd, the
 * relay's WebSocket listener and its health listener) gets the same
 * requests over raw HTTP/1.1 with Host values a client may send: short
 * ones (`x`, `abc`, `x.y`: Elysia once cut the URL at a fixed offset and
 * answered 404 on every route), ones that are no valid authority (`a/b`,
 * `@x`, an empty Host, a port past 65535: parsing `request.url` once
 * threw), and an absolute-form target naming another authority. Each must
 * answer what `Host: localhost` answers. Loopback only; workerd is ended by
 * its PID.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rawRequest } from "../support/rawHttp.ts";
import { startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import { startWorkerdScheduler, type WorkerdScheduler } from "../support/workerdScheduler.ts";
import { startRelay, type RunningRelay } from "../../src/relay/server.ts";
import { makeSigner } from "../../src/relay/testing.ts";
import { relayConfig } from "../support/relay.ts";
import { RELAY_WS_PATH } from "../../src/protocol/relay.ts";

/** Host header values that must not change the route (the first is the reference). */
const HOSTS = ["localhost", "x", "abc", "x.y", "a/b", "a?b", "@x", "", "h:99999", "%2F", "[::1]", "127.0.0.1:1"];
/** workerd itself answers an empty Host with a bare 400 before the Worker runs (RFC 9112 §3.2 allows either): not a route. */
const WORKERD_HOSTS = HOSTS.filter((h) => h !== "");

let embedded: TestScheduler;
let workerd: WorkerdScheduler;
let relay: RunningRelay;

beforeAll(async () => {
  embedded = await startTestScheduler();
  workerd = await startWorkerdScheduler();
  relay = await startRelay({
    config: relayConfig(makeSigner("k1"), null),
    insecureListen: [{ hostname: "127.0.0.1", port: 0 }],
  });
});

afterAll(async () => {
  await embedded?.stop();
  await workerd?.stop();
  await relay?.stop();
});

/** One request per Host value (plus an absolute-form target): status and body, with the Host value beside each. */
async function answers(
  port: number,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  hosts = HOSTS,
): Promise<{ host: string; status: number; body: string }[]> {
  const out: { host: string; status: number; body: string }[] = [];
  for (const host of hosts) {
    const a = await rawRequest(port, method, path, { ...headers, host }, null);
    out.push({ host, status: a.status, body: a.body.replace(/"(requestId|at|seq)":("[^"]*"|\d+)/g, "") });
  }
  const a = await rawRequest(port, method, `http://other.example${path}`, { ...headers, host: "x" }, null);
  out.push({
    host: "absolute-form",
    status: a.status,
    body: a.body.replace(/"(requestId|at|seq)":("[^"]*"|\d+)/g, ""),
  });
  return out;
}

/** Every answer equals the first (Host: localhost), and that one has `status`. */
function expectSameAsLocalhost(got: { host: string; status: number; body: string }[], status: number): void {
  expect(got[0]!.status).toBe(status);
  expect(got).toEqual(got.map((g) => ({ ...got[0]!, host: g.host })));
}

describe("routing never depends on the Host header", () => {
  for (const [name, server] of [
    ["embedded", () => ({ port: Number(new URL(embedded.url).port), token: embedded.tokens.token, hosts: HOSTS })],
    ["workerd", () => ({ port: workerd.port, token: workerd.tokens.token, hosts: WORKERD_HOSTS })],
  ] as const) {
    test(`scheduler (${name}): health, a principal's route, a refusal, an unknown route`, async () => {
      const { port, token, hosts } = server();
      const auth = { authorization: `Bearer ${token}` };
      expectSameAsLocalhost(await answers(port, "GET", "/healthz", {}, hosts), 200);
      expectSameAsLocalhost(await answers(port, "GET", "/v1/allocations?limit=1", auth, hosts), 200);
      expectSameAsLocalhost(await answers(port, "GET", "/v1/allocations?bogus=1", auth, hosts), 400);
      expectSameAsLocalhost(await answers(port, "DELETE", "/v1/allocations", auth, hosts), 405);
      expectSameAsLocalhost(await answers(port, "GET", "/v1/nothing-here", {}, hosts), 404);
    });
  }

  test("relay: the WebSocket listener and the health listener", async () => {
    const ws = Number(new URL(relay.urls[0]!).port);
    const health = Number(new URL(relay.healthUrl).port);
    expectSameAsLocalhost(await answers(ws, "GET", RELAY_WS_PATH), 426);
    expectSameAsLocalhost(await answers(ws, "GET", "/elsewhere"), 404);
    expectSameAsLocalhost(await answers(health, "GET", "/healthz"), 200);
    expectSameAsLocalhost(await answers(health, "GET", "/metrics"), 200);
  });
});
