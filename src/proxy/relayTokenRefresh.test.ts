/**
 * The proxy's relay-token refresh on fake clocks (no real waits): due two
 * thirds into the earliest token's lifetime, every fresh token verified
 * before use, retried after a failure, stopped when the grant ended or
 * the tokens reach the grant's expiry.
 */
import { expect, test } from "bun:test";
import { TestGrantIssuer, testId } from "../../test/support/grantIssuer.ts";
import type { ConnectionRelayTokensResponse, RelayEntry } from "../protocol/connection.ts";
import { BeachballError } from "../protocol/errors.ts";
import { FakeClock } from "../protocol/fakeClock.ts";
import type { VerifiedGrant } from "./grant.ts";
import { RELAY_TOKEN_RETRY_MS, RelayTokenRefresh } from "./relayTokenRefresh.ts";

const issuer = new TestGrantIssuer();
const other = new TestGrantIssuer("other-key");
const T0 = 1_800_000_000_000;
const TOKEN_MS = 120_000;
const GRANT_MS = 600_000;
const relay = (relayId: string): RelayEntry => ({ relayId, url: `wss://${relayId}.example:443/v1/relay` });

function harness(o: { relays?: string[]; grantMs?: number } = {}) {
  const grantId = testId("grt");
  const w = {
    clock: new FakeClock({ wallMs: T0, monoMs: 5_000 }),
    answer: null as null | (() => Promise<ConnectionRelayTokensResponse>),
    fetches: 0,
    applied: [] as VerifiedGrant["relays"][],
    logs: [] as string[],
    settled: 0,
  };
  const grantExpires = T0 + (o.grantMs ?? GRANT_MS);
  const relays = (o.relays ?? ["relay-1", "relay-2"]).map((id) => ({
    entry: relay(id),
    token: issuer.relayToken(id, grantId, "client", T0, TOKEN_MS),
  }));
  /** What the scheduler would answer at the current time. */
  const fresh = (by = issuer, forGrant = grantId): ConnectionRelayTokensResponse => ({
    grantId,
    role: "client",
    relayTokens: Object.fromEntries(
      relays.map((r) => [
        r.entry.relayId,
        by.relayToken(
          r.entry.relayId,
          forGrant,
          "client",
          w.clock.wallMs(),
          Math.min(TOKEN_MS, grantExpires - w.clock.wallMs()),
        ),
      ]),
    ),
    expiresAtMs: grantExpires,
  });
  w.answer = async () => fresh();
  const r = new RelayTokenRefresh({
    grant: { grant: { grantId, expiresAtMs: grantExpires } as VerifiedGrant["grant"], relays },
    keys: issuer.verificationKeys(),
    fetch: () => (w.fetches++, w.answer!()),
    apply: (x) => w.applied.push(x),
    clock: w.clock,
    log: (l) => w.logs.push(l),
    onSettled: () => w.settled++,
  });
  /** Moves both clocks by `ms`, ticks, and lets a refresh it started finish. */
  const advance = async (ms: number) => {
    w.clock.advance(ms);
    r.tick();
    await r.settled();
  };
  return { w, r, advance, fresh, grantId, grantExpires };
}

test("due two thirds into the tokens' lifetime; the fresh tokens are verified and handed to the tunnel; the next is due two thirds into theirs", async () => {
  const { w, r, advance } = harness();
  expect(r.dueWallMs()).toBe(T0 + 80_000);
  expect(r.deadlineMs()).toBe(5_000 + 80_000);
  await advance(79_999);
  expect(w.fetches).toBe(0);
  await advance(1);
  expect(w.fetches).toBe(1);
  expect(w.applied).toHaveLength(1);
  expect(w.applied[0]!.map((x) => [x.entry.relayId, x.token.payload.issuedAtMs, x.token.payload.expiresAtMs])).toEqual([
    ["relay-1", T0 + 80_000, T0 + 200_000],
    ["relay-2", T0 + 80_000, T0 + 200_000],
  ]);
  expect(r.dueWallMs()).toBe(T0 + 160_000);
  expect(w.logs.at(-1)).toMatch(/^relay tokens refreshed \(valid until /);
  expect(w.logs.join("\n")).not.toContain("signature");
});

test("no deadline while a request is under way (the alarm never spins on a due time that has passed); the owner is told when it ends", async () => {
  const { w, r, advance } = harness();
  let release!: () => void;
  const gate = new Promise<void>((res) => (release = res));
  const answer = w.answer!;
  w.answer = async () => (await gate, answer());
  w.clock.advance(80_000);
  r.tick();
  expect(r.deadlineMs()).toBeNull();
  r.tick();
  expect(w.fetches).toBe(1);
  release();
  await r.settled();
  expect(w.settled).toBe(1);
  expect(r.deadlineMs()).toBe(w.clock.monoMs() + 80_000);
  await advance(0);
  expect(w.fetches).toBe(1);
});

test("a token that fails its check (another key, another grant) is not used; retried after RELAY_TOKEN_RETRY_MS; a transport error and RATE_LIMITED too", async () => {
  const { w, r, advance, fresh } = harness();
  w.answer = async () => fresh(other);
  await advance(80_000);
  expect(w.applied).toEqual([]);
  expect(w.logs.at(-1)).toContain("refresh failed (RELAY_TOKEN_INVALID)");
  expect(r.dueWallMs()).toBe(w.clock.wallMs() + RELAY_TOKEN_RETRY_MS);
  w.answer = async () => fresh(issuer, testId("grt"));
  await advance(RELAY_TOKEN_RETRY_MS);
  expect(w.logs.at(-1)).toContain("refresh failed (RELAY_TOKEN_INVALID)");
  w.answer = async () => Promise.reject(new BeachballError("RATE_LIMITED", "slow down"));
  await advance(RELAY_TOKEN_RETRY_MS - 1);
  expect(w.fetches).toBe(2);
  await advance(1);
  expect(w.logs.at(-1)).toContain("refresh failed (RATE_LIMITED)");
  w.answer = async () => Promise.reject(new Error("connect ECONNREFUSED"));
  await advance(RELAY_TOKEN_RETRY_MS);
  expect(w.logs.at(-1)).toContain("refresh failed (connect ECONNREFUSED)");
  // Past the first tokens' expiry the scheduler is back: the sessions get tokens again.
  w.answer = async () => fresh();
  await advance(RELAY_TOKEN_RETRY_MS);
  expect(w.applied).toHaveLength(1);
  expect(w.fetches).toBe(5);
  expect(w.applied[0]![0]!.token.payload.issuedAtMs).toBe(w.clock.wallMs());
});

test("stops when the scheduler says the grant ended (UNAUTHENTICATED), when the tokens reach the grant's expiry, without relays, and after close()", async () => {
  const a = harness();
  a.w.answer = async () => Promise.reject(new BeachballError("UNAUTHENTICATED", "the connection has ended"));
  await a.advance(80_000);
  expect(a.r.dueWallMs()).toBeNull();
  expect(a.r.deadlineMs()).toBeNull();
  await a.advance(GRANT_MS);
  expect(a.w.fetches).toBe(1);

  // A 200 s grant: the first refresh (at 80 s) yields tokens ending with the grant; nothing more is due.
  const b = harness({ grantMs: 200_000 });
  await b.advance(80_000);
  expect(b.w.applied[0]![0]!.token.payload.expiresAtMs).toBe(b.grantExpires);
  expect(b.r.dueWallMs()).toBeNull();

  expect(harness({ relays: [] }).r.dueWallMs()).toBeNull();
  const c = harness();
  c.r.close();
  await c.advance(100_000);
  expect(c.w.fetches).toBe(0);
});

test("a relay the scheduler no longer issues tokens for keeps its old token but does not set the schedule (no refresh storm once it is due)", async () => {
  const { w, r, advance, fresh } = harness();
  w.answer = async () => {
    const all = fresh();
    return { ...all, relayTokens: { "relay-1": all.relayTokens["relay-1"]! } };
  };
  await advance(80_000);
  expect(w.fetches).toBe(1);
  expect(w.applied[0]!.map((x) => [x.entry.relayId, x.token.payload.issuedAtMs])).toEqual([
    ["relay-1", T0 + 80_000],
    ["relay-2", T0],
  ]);
  // relay-2's old token was due at T0 + 80 s: it must not make every alarm ask again.
  expect(r.dueWallMs()).toBe(T0 + 160_000);
  for (let i = 0; i < 10; i++) await advance(1_000);
  expect(w.fetches).toBe(1);
  await advance(70_000);
  expect(w.fetches).toBe(2);
});

test("a relay whose ID names an Object.prototype member (constructor) and gets no fresh token is just left out, not read from the prototype", async () => {
  const { w, advance, fresh } = harness({ relays: ["relay-1", "constructor"] });
  w.answer = async () => {
    const all = fresh();
    return { ...all, relayTokens: { "relay-1": all.relayTokens["relay-1"]! } };
  };
  await advance(80_000);
  expect(w.applied).toHaveLength(1);
  expect(w.logs.at(-1)).toMatch(/^relay tokens refreshed/);
});

test("an answer without a map of relay tokens is a failed refresh (retried), not a reason to stop refreshing", async () => {
  const { w, r, advance, grantId } = harness();
  for (const relayTokens of [null, "x", [1]]) {
    w.answer = async () =>
      ({ grantId, role: "client", relayTokens, expiresAtMs: 0 }) as unknown as ConnectionRelayTokensResponse;
    const before = w.fetches;
    await advance(r.dueWallMs()! - w.clock.wallMs());
    expect(w.fetches).toBe(before + 1);
    expect(w.logs.at(-1)).toMatch(/refresh failed \(GRANT_MISMATCH\); retrying in 15 s/);
    expect(r.dueWallMs()).toBe(w.clock.wallMs() + RELAY_TOKEN_RETRY_MS);
  }
});
