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
