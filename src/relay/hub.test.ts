import { describe, expect, test } from "bun:test";
import type { RelayLimits, RelayRole } from "../protocol/connection.ts";
import { relayCloseCode } from "../protocol/relay.ts";
import { RELAY_HANDSHAKE_DEADLINE_MS, RELAY_PENDING_FRAMES, RELAY_PROBE_MS, RelayHub, type HubBounds } from "./hub.ts";
import { FakeClock } from "../protocol/fakeClock.ts";
import type { RelaySession } from "./session.ts";
import { grantId, makeSigner, RecordingSocket, TEST_LIMITS, tokenPayload } from "./testing.ts";
import { publicKeyObjects } from "./token.ts";

const signer = makeSigner("conn-1");
const BOUNDS: HubBounds = { maxSessions: 100, maxPendingPairs: 10, maxHandshakes: 20, maxHandshakesPerAddress: 5 };

function setup(bounds: Partial<HubBounds> = {}) {
  const clock = new FakeClock({ monoMs: 1_000, wallMs: 1_800_000_000_000 });
  const seen: Uint8Array[] = [];
  const hub = new RelayHub({
    policy: {
      relayId: "relay-a",
      keys: publicKeyObjects(new Map([[signer.keyId, signer.publicKey]])),
      caps: TEST_LIMITS,
    },
    bounds: { ...BOUNDS, ...bounds },
    clock,
    observeFrame: (f) => seen.push(f),
  });
  /** Opens a socket and presents a token for (role, grant n) with optional limits. */
  const join = (role: RelayRole, n = 1, limits: RelayLimits = TEST_LIMITS, address = "192.0.2.1") => {
    const sock = new RecordingSocket(address);
    const s = hub.open(sock);
    hub.text(s, JSON.stringify(signer.sign(tokenPayload("relay-a", role, grantId(n), clock.wallMs(), { limits }))));
    return { sock, s };
  };
  return { clock, hub, join, seen };
}

const bytes = (n: number, fill = 7) => new Uint8Array(n).fill(fill);
const closedCode = (sock: RecordingSocket) => sock.closedWith?.reason ?? null;

describe("pairing", () => {
  test("one client and one host of a grant are paired; datagrams cross unchanged both ways; status messages tell each side", () => {
    const { hub, join } = setup();
    const c = join("client");
    expect(c.sock.texts).toEqual([{ type: "ready", paired: false }]);
    expect(hub.counters.pairsPending).toBe(1);
    const h = join("host");
    expect(h.sock.texts).toEqual([{ type: "ready", paired: true }]);
    expect(c.sock.texts).toEqual([{ type: "ready", paired: false }, { type: "paired" }]);
    expect(hub.counters).toMatchObject({
      pairsPending: 0,
      pairsPaired: 1,
      sessions: 2,
      handshakes: 0,
      tokensAccepted: 2,
    });
    const up = Uint8Array.from([1, 2, 3, 4, 5]);
    const down = bytes(1500, 9);
    hub.binary(c.s, up);
    hub.binary(h.s, down);
    expect(h.sock.datagrams).toEqual([up]);
    expect(c.sock.datagrams).toEqual([down]);
    expect(hub.counters).toMatchObject({ framesForwarded: 2, bytesForwarded: 1505 });
  });

  test("two grants never mix", () => {
    const { hub, join } = setup();
    const c1 = join("client", 1);
    const h1 = join("host", 1);
    const c2 = join("client", 2);
    const h2 = join("host", 2);
    hub.binary(c1.s, bytes(10, 1));
    hub.binary(c2.s, bytes(10, 2));
    expect(h1.sock.datagrams).toEqual([bytes(10, 1)]);
    expect(h2.sock.datagrams).toEqual([bytes(10, 2)]);
  });

  test(`before the other side arrives the last ${RELAY_PENDING_FRAMES} datagrams are kept (older ones dropped, counted) and delivered in order on pairing`, () => {
    const { hub, join } = setup();
    const c = join("client");
    for (let i = 1; i <= RELAY_PENDING_FRAMES + 2; i++) hub.binary(c.s, bytes(20, i));
    expect(hub.counters.framesDropped.unpaired).toBe(2);
    const h = join("host");
    expect(h.sock.datagrams.map((d) => d[0])).toEqual([3, 4, 5, 6]);
  });

  test("a third party with a valid token for a held role is refused RELAY_PAIR_TAKEN when the holder answers the probe; the live pair is untouched", () => {
    const { hub, join, clock } = setup();
    const c = join("client");
    const h = join("host");
    const intruder = join("client");
    expect(c.sock.pings).toBe(1);
    expect(intruder.sock.texts).toEqual([]);
    clock.advance(10);
    hub.heard(c.s); // the holder's pong
    expect(closedCode(intruder.sock)).toBe("RELAY_PAIR_TAKEN");
    expect(intruder.sock.closedWith!.code).toBe(relayCloseCode("RELAY_PAIR_TAKEN"));
    expect(c.sock.closedWith).toBeNull();
    hub.binary(h.s, bytes(30));
    expect(c.sock.datagrams).toHaveLength(1);
    expect(intruder.sock.datagrams).toHaveLength(0);
    clock.advance(RELAY_PROBE_MS);
    hub.sweep();
    expect(c.sock.closedWith).toBeNull();
    expect(hub.counters).toMatchObject({ sessions: 2, pairsPaired: 1 });
  });

  test("a holder that keeps sending is live too: the probe fails for the newcomer even without a pong", () => {
    const { hub, join, clock } = setup();
    const c = join("client");
    join("host");
    const intruder = join("client");
    clock.advance(RELAY_PROBE_MS - 1);
    hub.binary(c.s, bytes(10));
    expect(closedCode(intruder.sock)).toBe("RELAY_PAIR_TAKEN");
    expect(c.sock.closedWith).toBeNull();
  });

  test("datagrams from a session waiting on a probe are dropped, not forwarded", () => {
    const { hub, join } = setup();
    join("client");
    const h = join("host");
    const newcomer = join("client");
    hub.binary(newcomer.s, bytes(10));
    expect(h.sock.datagrams).toHaveLength(0);
    expect(hub.counters.framesDropped.contending).toBe(1);
  });

  test("a reconnect replaces a holder that stays silent through the probe: the old one is closed RELAY_SESSION_REPLACED and traffic reaches the new one", () => {
    const { hub, join, clock } = setup();
    const old = join("client");
    const h = join("host");
    const again = join("client");
    clock.advance(RELAY_PROBE_MS - 1);
    hub.sweep();
    expect(again.sock.closedWith).toBeNull();
    clock.advance(1);
    hub.sweep();
    expect(closedCode(old.sock)).toBe("RELAY_SESSION_REPLACED");
    expect(again.sock.texts).toEqual([{ type: "ready", paired: true }]);
    hub.binary(h.s, bytes(10, 4));
    expect(again.sock.datagrams).toEqual([bytes(10, 4)]);
    expect(old.sock.datagrams).toHaveLength(0);
    expect(hub.counters).toMatchObject({ sessions: 2, pairsPaired: 1, pairsPending: 0 });
  });

  test("while one reconnect waits on a probe, another session of that role is refused at once", () => {
    const { join } = setup();
    join("client");
    join("client");
    const third = join("client");
    expect(closedCode(third.sock)).toBe("RELAY_PAIR_TAKEN");
  });

  test("when a holder's socket closes its partner is told `unpaired` and stays; a new session of that role takes the free place at once", () => {
    const { hub, join } = setup();
    const c = join("client");
    const h = join("host");
    hub.closed(c.s);
    expect(h.sock.texts.at(-1)).toEqual({ type: "unpaired" });
    expect(hub.counters).toMatchObject({ sessions: 1, pairsPending: 1, pairsPaired: 0 });
    const c2 = join("client");
    expect(c2.sock.texts).toEqual([{ type: "ready", paired: true }]);
    expect(h.sock.texts.at(-1)).toEqual({ type: "paired" });
  });

  test("a holder closing while a reconnect waits hands its place to the reconnect at once", () => {
    const { hub, join } = setup();
    const c = join("client");
    join("host");
    const again = join("client");
    hub.closed(c.s);
    expect(again.sock.texts).toEqual([{ type: "ready", paired: true }]);
  });

  test("when everyone leaves nothing is left: no pair, no session, no handshake, no pending count", () => {
    const { hub, join } = setup();
    const sessions: RelaySession[] = [];
    for (let n = 1; n <= 5; n++) sessions.push(join("client", n).s, join("host", n).s, join("client", n).s);
    sessions.push(hub.open(new RecordingSocket()));
    for (const s of sessions) hub.closed(s);
    expect(hub.pairCount).toBe(0);
    expect(hub.counters).toMatchObject({ sessions: 0, handshakes: 0, pairsPending: 0, pairsPaired: 0 });
  });
});

describe("handshake", () => {
  test("no token within the deadline is RELAY_HANDSHAKE_TIMEOUT", () => {
    const { hub, clock } = setup();
    const sock = new RecordingSocket();
    hub.open(sock);
    clock.advance(RELAY_HANDSHAKE_DEADLINE_MS - 1);
    hub.sweep();
    expect(sock.closedWith).toBeNull();
    clock.advance(1);
    hub.sweep();
    expect(closedCode(sock)).toBe("RELAY_HANDSHAKE_TIMEOUT");
    expect(hub.counters.handshakes).toBe(0);
  });

  test("a binary message first is RELAY_TOKEN_INVALID; a bad token closes with its code", () => {
    const { hub, clock } = setup();
    const a = new RecordingSocket();
    hub.binary(hub.open(a), bytes(10));
    expect(closedCode(a)).toBe("RELAY_TOKEN_INVALID");
    const b = new RecordingSocket();
    hub.text(hub.open(b), JSON.stringify(signer.sign(tokenPayload("relay-b", "client", grantId(1), clock.wallMs()))));
    expect(closedCode(b)).toBe("RELAY_TOKEN_WRONG_RELAY");
    expect(b.closedWith!.code).toBe(4403);
  });

  test("text after the token, an empty datagram or one over MAX_RELAY_FRAME_BYTES is RELAY_FRAME_INVALID", () => {
    const { hub, join } = setup();
    for (const bad of ["text", new Uint8Array(0), bytes(1501)] as const) {
      const c = join("client");
      if (typeof bad === "string") hub.text(c.s, "{}");
      else hub.binary(c.s, bad);
      expect(closedCode(c.sock)).toBe("RELAY_FRAME_INVALID");
    }
  });
});

describe("bounds", () => {
  test("sockets without a token are bounded per address and in all (RELAY_BUSY); presenting a token frees the place", () => {
    const { hub, join } = setup({ maxHandshakesPerAddress: 2, maxHandshakes: 3 });
    const a1 = hub.open(new RecordingSocket("198.51.100.1"));
    hub.open(new RecordingSocket("198.51.100.1"));
    const a3 = new RecordingSocket("198.51.100.1");
    hub.open(a3);
    expect(closedCode(a3)).toBe("RELAY_BUSY");
    hub.open(new RecordingSocket("198.51.100.2"));
    const b2 = new RecordingSocket("198.51.100.3");
    hub.open(b2);
    expect(closedCode(b2)).toBe("RELAY_BUSY");
    hub.closed(a1);
    const ok = join("client", 1, TEST_LIMITS, "198.51.100.1");
    expect(ok.sock.closedWith).toBeNull();
    expect(hub.counters.handshakes).toBe(2);
  });

  test("admitted sessions and grants with one side waiting are bounded (RELAY_BUSY)", () => {
    const { join } = setup({ maxPendingPairs: 2 });
    join("client", 1);
    join("client", 2);
    expect(closedCode(join("client", 3).sock)).toBe("RELAY_BUSY");
    expect(join("host", 1).sock.closedWith).toBeNull();
    const s = setup({ maxSessions: 3 });
    s.join("client", 1);
    s.join("host", 1);
    s.join("client", 2);
    expect(closedCode(s.join("host", 2).sock)).toBe("RELAY_BUSY");
  });

  test("shutdown closes every socket with SHUTTING_DOWN and refuses new ones", () => {
    const { hub, join } = setup();
    const c = join("client");
    const pending = new RecordingSocket();
    hub.open(pending);
    hub.shutdown();
    expect([closedCode(c.sock), closedCode(pending)]).toEqual(["SHUTTING_DOWN", "SHUTTING_DOWN"]);
    const late = new RecordingSocket();
    hub.open(late);
    expect(closedCode(late)).toBe("SHUTTING_DOWN");
  });
});

describe("limits", () => {
  test("maxBytes counts both directions together; the frame that would pass it closes both sides with RELAY_BYTES_EXHAUSTED", () => {
    const { hub, join } = setup();
    const limits = { ...TEST_LIMITS, maxBytes: 2500 };
    const c = join("client", 1, limits);
    const h = join("host", 1, limits);
    hub.binary(c.s, bytes(1000));
    hub.binary(h.s, bytes(1000));
    hub.binary(c.s, bytes(500));
    expect(c.sock.closedWith).toBeNull();
    hub.binary(h.s, bytes(1));
    expect([closedCode(c.sock), closedCode(h.sock)]).toEqual(["RELAY_BYTES_EXHAUSTED", "RELAY_BYTES_EXHAUSTED"]);
    expect(c.sock.datagrams.length + h.sock.datagrams.length).toBe(3);
    expect(hub.pairCount).toBe(0);
  });

  test("maxBytesPerSecond per direction: a token bucket with one second of burst drops what it cannot pay for and refills with time", () => {
    const { hub, join, clock } = setup();
    const limits = { ...TEST_LIMITS, maxBytesPerSecond: 3000 };
    const c = join("client", 1, limits);
    const h = join("host", 1, limits);
    for (let i = 0; i < 4; i++) hub.binary(c.s, bytes(1000));
    expect(h.sock.datagrams).toHaveLength(3);
    expect(hub.counters.framesDropped.rate).toBe(1);
    hub.binary(h.s, bytes(1000)); // the other direction has its own bucket
    expect(c.sock.datagrams).toHaveLength(1);
    clock.advance(500);
    hub.binary(c.s, bytes(1000));
    hub.binary(c.s, bytes(1000));
    expect(h.sock.datagrams).toHaveLength(4);
    expect(c.sock.closedWith).toBeNull();
  });

  test("the pair obeys the tighter of its two tokens", () => {
    const { hub, join } = setup();
    const c = join("client", 1, { ...TEST_LIMITS, maxBytesPerSecond: 5000 });
    const h = join("host", 1, { ...TEST_LIMITS, maxBytesPerSecond: 2000 });
    for (let i = 0; i < 3; i++) hub.binary(c.s, bytes(1000));
    expect(h.sock.datagrams).toHaveLength(2);
  });

  test("idleTimeoutMs without a datagram from or to a session closes it with RELAY_IDLE_TIMEOUT; traffic either way keeps it", () => {
    const { hub, join, clock } = setup();
    const limits = { ...TEST_LIMITS, idleTimeoutMs: 10_000 };
    const c = join("client", 1, limits);
    const h = join("host", 1, limits);
    clock.advance(9_000);
    hub.binary(h.s, bytes(10)); // reaches c: both active
    clock.advance(9_000);
    hub.sweep();
    expect([c.sock.closedWith, h.sock.closedWith]).toEqual([null, null]);
    clock.advance(1_000);
    hub.sweep();
    expect([closedCode(c.sock), closedCode(h.sock)]).toEqual(["RELAY_IDLE_TIMEOUT", "RELAY_IDLE_TIMEOUT"]);
    const lone = join("client", 2, limits);
    clock.advance(10_000);
    hub.sweep();
    expect(closedCode(lone.sock)).toBe("RELAY_IDLE_TIMEOUT");
  });

  test("a datagram the receiving transport drops (its send buffer is full) is counted, not queued", () => {
    const { hub, join } = setup();
    const c = join("client");
    const h = join("host");
    h.sock.accepting = false;
    hub.binary(c.s, bytes(100));
    expect(hub.counters.framesDropped.backpressure).toBe(1);
    expect(hub.counters.framesForwarded).toBe(0);
  });

  test("the observe hook sees every datagram received from an admitted session, unchanged", () => {
    const { hub, join, seen } = setup();
    const c = join("client");
    join("host");
    const f = Uint8Array.from([4, 0, 0, 0, 1, 2, 3]);
    hub.binary(c.s, f);
    expect(seen).toEqual([f]);
  });
});
