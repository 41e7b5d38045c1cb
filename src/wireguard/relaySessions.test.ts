/**
 * The relay session table with a scripted connector (a test double for
 * src/relayclient; the real relay is exercised in
 * test/integration/proxy-netns.test.ts and relay.test.ts) and a timer port
 * that records the backoff delays instead of waiting for them.
 */
import { describe, expect, test } from "bun:test";
import { FakeClock } from "../protocol/fakeClock.ts";
import type { RelayEntry, SignedRelayToken } from "../protocol/connection.ts";
import { SeededRandom } from "./fakes.ts";
import {
  MAX_RELAY_SESSIONS,
  RELAY_RECONNECT_MAX_MS,
  RELAY_RECONNECT_MIN_MS,
  RelaySessions,
  type RelayLink,
} from "./relaySessions.ts";

const entry: RelayEntry = { relayId: "relay-1", url: "wss://relay.example/v1/relay" };
const token = (n: number) => ({ payload: { n }, keyId: "k", signature: "s" }) as unknown as SignedRelayToken;

/** A link the test ends by hand. */
function fakeLink() {
  let end!: (c: { code: string | null; closeCode: number }) => void;
  const sent: Uint8Array[] = [];
  const link: RelayLink & { sent: Uint8Array[]; end: typeof end; closedByOwner: boolean } = {
    paired: true,
    closed: new Promise((r) => (end = r)),
    send: (d) => (sent.push(d), true),
    close: () => {
      link.closedByOwner = true;
      end({ code: null, closeCode: 1000 });
    },
    sent,
    end: (c) => end(c),
    closedByOwner: false,
  };
  return link;
}

function table() {
  const attempts: Array<{
    token: SignedRelayToken;
    onDatagram: (d: Uint8Array) => void;
    resolve: (l: RelayLink) => void;
    reject: (e: unknown) => void;
  }> = [];
  const delays: number[] = [];
  const pending = new Map<number, () => void>();
  let nextTimer = 1;
  const got: Array<[string, number]> = [];
  const t = new RelaySessions({
    connect: (_e, tok, onDatagram) =>
      new Promise((resolve, reject) => attempts.push({ token: tok, onDatagram, resolve, reject })),
    onDatagram: (id, d) => got.push([id, d[0]!]),
    random: new SeededRandom(7),
    clock: new FakeClock({ monoMs: 0 }),
    timers: {
      set: (fn, ms) => {
        delays.push(ms);
        const id = nextTimer++;
        pending.set(id, fn);
        return id;
      },
      clear: (h) => void pending.delete(h as number),
    },
  });
  const fireTimers = () => {
    const fns = [...pending.values()];
    pending.clear();
    fns.forEach((f) => f());
  };
  return { t, attempts, delays, pending, got, fireTimers };
}

const tick = () => new Promise((r) => setTimeout(r, 0));

describe("relay sessions", () => {
  test("a session opens through the connector; datagrams go both ways only while it is open", async () => {
    const w = table();
    expect(w.t.open("relay-1", entry, token(1))).toBe(true);
    expect(w.t.send("relay-1", new Uint8Array([4]))).toBe(false); // not open yet: dropped, not queued
    const link = fakeLink();
    w.attempts[0]!.resolve(link);
    await tick();
    expect(w.t.list()).toEqual([
      { pathId: "relay-1", relayId: "relay-1", state: "open", paired: true, connects: 1, lastCode: null },
    ]);
    expect(w.t.send("relay-1", new Uint8Array([4, 0, 0, 0]))).toBe(true);
    expect(link.sent.length).toBe(1);
    w.attempts[0]!.onDatagram(new Uint8Array([2]));
    expect(w.got).toEqual([["relay-1", 2]]);
    expect(w.t.relayIdOf("relay-1")).toBe("relay-1");
    expect(w.t.send("other", new Uint8Array([4]))).toBe(false);
  });

  test("a dropped session reconnects with doubling backoff (with jitter) bounded by RELAY_RECONNECT_MAX_MS", async () => {
    const w = table();
    w.t.open("p", entry, token(1));
    for (let i = 0; i < 12; i++) {
      w.attempts[i]!.reject(Object.assign(new Error("unreachable"), { close: { code: null } }));
      await tick();
      expect(w.t.list()[0]!.state).toBe("backoff");
      w.fireTimers();
    }
    expect(w.attempts.length).toBe(13);
    expect(w.delays.length).toBe(12);
    for (let i = 0; i < w.delays.length; i++) {
      const base = Math.min(RELAY_RECONNECT_MAX_MS, RELAY_RECONNECT_MIN_MS * 2 ** i);
      expect(w.delays[i]!).toBeGreaterThanOrEqual(base);
      expect(w.delays[i]!).toBeLessThanOrEqual(base * 1.5);
    }
    expect(Math.max(...w.delays)).toBeLessThanOrEqual(RELAY_RECONNECT_MAX_MS * 1.5);
    // An open session that closes (the relay went away) reconnects too.
    const link = fakeLink();
    w.attempts[12]!.resolve(link);
    await tick();
    link.end({ code: "SHUTTING_DOWN", closeCode: 4503 });
    await tick();
    expect(w.t.list()[0]).toMatchObject({ state: "backoff", lastCode: "SHUTTING_DOWN" });
    w.fireTimers();
    expect(w.attempts.length).toBe(14);
  });

  test("a refusal a retry cannot fix stops the session until a fresh token comes", async () => {
    const w = table();
    w.t.open("p", entry, token(1));
    w.attempts[0]!.reject(Object.assign(new Error("refused"), { close: { code: "RELAY_TOKEN_EXPIRED" } }));
    await tick();
    expect(w.t.list()[0]).toMatchObject({ state: "stopped", lastCode: "RELAY_TOKEN_EXPIRED" });
    expect(w.pending.size).toBe(0);
    w.t.setToken("p", token(2));
    expect(w.attempts.length).toBe(2);
    expect(w.attempts[1]!.token).toEqual(token(2));
  });

  test("close ends the link and cancels a pending reconnect; a late connect result is closed; closeAll refuses new sessions", async () => {
    const w = table();
    w.t.open("a", entry, token(1));
    w.t.open("b", entry, token(1));
    w.attempts[0]!.reject(new Error("unreachable"));
    const late = fakeLink();
    await tick();
    expect(w.pending.size).toBe(1);
    w.t.close("a");
    expect(w.pending.size).toBe(0);
    w.t.close("b");
    w.attempts[1]!.resolve(late);
    await tick();
    expect(late.closedByOwner).toBe(true);
    expect(w.t.list()).toEqual([]);
    w.t.closeAll();
    expect(w.t.open("c", entry, token(1))).toBe(false);
  });

  test(`the table holds at most MAX_RELAY_SESSIONS (${MAX_RELAY_SESSIONS}) sessions`, () => {
    const w = table();
    for (let i = 0; i < MAX_RELAY_SESSIONS; i++) expect(w.t.open(`p${i}`, entry, token(1))).toBe(true);
    expect(w.t.open("one-more", entry, token(1))).toBe(false);
    // Re-tokening a known session is not a new one.
    expect(w.t.open("p0", entry, token(2))).toBe(true);
  });
});
