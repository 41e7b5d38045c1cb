/**
 * PathSelector's change reporting with two relays (the host endpoint posts
 * a connectivity_update and the proxy prints a line on every change): the
 * first copy to arrive alternating between two relays is not a change; a
 * relay taking over from a silent one is, and so is a direct pin. Path
 * liveness: only an ack over the path a probe went to pins or keeps a pin.
 */
import { expect, test } from "bun:test";
import { FakeClock } from "../protocol/fakeClock.ts";
import {
  DIRECT_STALE_MS,
  PathSelector,
  PIN_LOST_MS,
  PIN_LOST_PROBES,
  PIN_PROBE_INTERVAL_MS,
  relayPath,
  udpPath,
} from "./paths.ts";

test("two relays alternating count as one path; a takeover from a silent relay and a direct pin are changes", () => {
  const clock = new FakeClock();
  const s = new PathSelector({ sendUdp: () => {}, sendRelay: () => true }, clock);
  s.setRelays(["relay-1", "relay-2"]);
  s.authenticated(relayPath("relay-1"));
  expect(s.changes).toBe(1);
  for (let i = 0; i < 20; i++) {
    clock.advance(100);
    s.authenticated(relayPath(i % 2 ? "relay-1" : "relay-2"));
  }
  expect(s.changes).toBe(1);
  expect(s.state()).toMatchObject({ path: "relay", relay: "relay-1" });
  // relay-2 falls silent; relay-1 alone carries the session, then relay-2 takes over after relay-1 is silent too long.
  clock.advance(DIRECT_STALE_MS);
  s.authenticated(relayPath("relay-2"));
  expect(s.changes).toBe(2);
  const direct = udpPath("198.51.100.20", 51820);
  s.probeSent(direct, "00000000000000aa");
  s.acked(udpPath("198.51.100.20", 51820), "00000000000000aa");
  expect(s.changes).toBe(3);
  expect(s.state()).toMatchObject({ path: "direct", direct: "198.51.100.20:51820" });
});

test("a candidate no datagram should go to (unspecified, multicast, broadcast, not an IP) is dropped; loopback, private and link-local stay", () => {
  const s = new PathSelector(
    { sendUdp: () => undefined, sendRelay: () => undefined } as unknown as ConstructorParameters<
      typeof PathSelector
    >[0],
    new FakeClock(),
  );
  s.setCandidates(
    [
      "0.0.0.0",
      "255.255.255.255",
      "224.0.0.251",
      "240.1.2.3",
      "::",
      "ff02::1",
      "not-an-ip",
      "127.0.0.1",
      "10.0.0.2",
      "169.254.1.1",
      "2001:db8::1",
    ].map((address) => ({ address, port: 51820 })),
  );
  expect(s.candidateKeys()).toEqual(["127.0.0.1:51820", "10.0.0.2:51820", "169.254.1.1:51820", "[2001:db8::1]:51820"]);
  s.addCandidate("239.255.255.250", 1900);
  s.addCandidate("0.0.0.0", 51820);
  expect(s.candidateKeys()).toHaveLength(4);
});

test("one-way UDP (kind: a path kept on the peer's datagrams, not on ours getting through): authenticated datagrams from a direct source never pin it; an ack pins only the path its probe went to, and only while fresh", () => {
  const clock = new FakeClock();
  const s = new PathSelector({ sendUdp: () => {}, sendRelay: () => true }, clock);
  s.setCandidates([
    { address: "198.51.100.20", port: 51820 },
    { address: "10.2.0.2", port: 51820 },
  ]);
  for (let i = 0; i < 50; i++) {
    clock.advance(100);
    s.authenticated(udpPath("198.51.100.20", 51820));
  }
  expect(s.state()).toMatchObject({ path: "none", direct: null, pins: 0 });
  // An ack from another path than the probe's, an unknown nonce, a stale ack: none pins.
  s.probeSent(udpPath("10.2.0.2", 51820), "0000000000000001");
  expect(s.acked(udpPath("198.51.100.20", 51820), "0000000000000001")).toBe(false);
  expect(s.acked(udpPath("198.51.100.20", 51820), "00000000000000ff")).toBe(false);
  s.probeSent(udpPath("198.51.100.20", 51820), "0000000000000002");
  clock.advance(PIN_LOST_MS + 1);
  expect(s.acked(udpPath("198.51.100.20", 51820), "0000000000000002")).toBe(false);
  expect(s.isDirect()).toBe(false);
  s.probeSent(udpPath("198.51.100.20", 51820), "0000000000000003");
  expect(s.acked(udpPath("198.51.100.20", 51820), "0000000000000003")).toBe(true);
  expect(s.state()).toMatchObject({ path: "direct", direct: "198.51.100.20:51820", pins: 1 });
  // An ack is good once.
  expect(s.acked(udpPath("198.51.100.20", 51820), "0000000000000003")).toBe(false);
});

test("black hole: a pin whose probes go unanswered is lost (and reported) although the peer's datagrams still arrive over it; one lost probe is not enough", () => {
  const clock = new FakeClock();
  const s = new PathSelector({ sendUdp: () => {}, sendRelay: () => true }, clock);
  const p = () => udpPath("198.51.100.20", 51820);
  s.probeSent(p(), "0000000000000010");
  s.acked(p(), "0000000000000010");
  s.authenticated(relayPath("relay-1"));
  let n = 0x20;
  const probe = () => s.probeSent(p(), (n++).toString(16).padStart(16, "0"));
  // One probe lost in three: kept.
  for (let i = 0; i < 10; i++) {
    clock.advance(PIN_PROBE_INTERVAL_MS);
    probe();
    if (i % 3 === 2) s.acked(p(), (n - 1).toString(16).padStart(16, "0"));
  }
  expect(s.isDirect()).toBe(true);
  const changes = s.changes;
  for (let i = 0; i < PIN_LOST_PROBES; i++) {
    clock.advance(PIN_PROBE_INTERVAL_MS);
    probe();
    s.authenticated(p());
  }
  clock.advance(PIN_PROBE_INTERVAL_MS);
  s.authenticated(relayPath("relay-1"));
  expect(s.state()).toMatchObject({ path: "relay", direct: null, lost: "198.51.100.20:51820", unpins: 1 });
  expect(s.changes).toBe(changes + 1);
});
