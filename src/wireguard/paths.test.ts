/**
 * PathSelector's change reporting with two relays (the host endpoint posts
 * a connectivity_update and the proxy prints a line on every change): the
 * first copy to arrive alternating between two relays is not a change; a
 * relay taking over from a silent one is, and so is a direct pin.
 */
import { expect, test } from "bun:test";
import { FakeClock } from "./fakes.ts";
import { DIRECT_STALE_MS, PathSelector, relayPath, udpPath } from "./paths.ts";

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
  s.authenticated(udpPath("198.51.100.20", 51820));
  expect(s.changes).toBe(3);
  expect(s.state()).toMatchObject({ path: "direct", direct: "198.51.100.20:51820" });
});

test("a candidate no datagram should go to (unspecified, multicast, broadcast, not an IP) is dropped; loopback, private and link-local stay", () => {
  const s = new PathSelector({ sendUdp: () => undefined, sendRelay: () => undefined } as unknown as ConstructorParameters<typeof PathSelector>[0], new FakeClock());
  s.setCandidates(["0.0.0.0", "255.255.255.255", "224.0.0.251", "240.1.2.3", "::", "ff02::1", "not-an-ip", "127.0.0.1", "10.0.0.2", "169.254.1.1", "2001:db8::1"].map((address) => ({ address, port: 51820 })));
  expect(s.candidateKeys()).toEqual(["127.0.0.1:51820", "10.0.0.2:51820", "169.254.1.1:51820", "[2001:db8::1]:51820"]);
  s.addCandidate("239.255.255.250", 1900);
  s.addCandidate("0.0.0.0", 51820);
  expect(s.candidateKeys()).toHaveLength(4);
});
