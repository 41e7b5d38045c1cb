/** STUN server text: both families, canonical form, and clear errors for names, bad ports and long lists. */
import { expect, test } from "bun:test";
import { formatStunServer, MAX_STUN_SERVERS, parseStunServer, parseStunServers } from "./stunServers.ts";

test("IPv4:PORT and [IPv6]:PORT parse and format back", () => {
  expect(parseStunServer("192.0.2.53:3478")).toEqual({ address: "192.0.2.53", port: 3478 });
  expect(parseStunServer("[2001:db8::53]:3478")).toEqual({ address: "2001:db8::53", port: 3478 });
  for (const t of ["192.0.2.53:3478", "[2001:db8::53]:3478"]) expect(formatStunServer(parseStunServer(t))).toBe(t);
});

test("names, missing or bad ports, an unbracketed IPv6 and a bracketed IPv4 are refused, quoting the entry", () => {
  for (const bad of [
    "stun.example.org:3478",
    "192.0.2.1",
    "2001:db8::1:3478",
    "192.0.2.1:0",
    "192.0.2.1:65536",
    "[192.0.2.1]:3478",
    "999.0.2.1:3478",
    "",
  ]) {
    expect(() => parseStunServer(bad)).toThrow("is not IPv4:PORT or [IPv6]:PORT");
  }
});

test("a list: each entry checked under the field's name, at most MAX_STUN_SERVERS", () => {
  expect(parseStunServers(["192.0.2.1:3478"], "f")).toEqual([{ address: "192.0.2.1", port: 3478 }]);
  expect(() => parseStunServers(["192.0.2.1:3478", "nope"], "/connections/stunServers")).toThrow(
    '/connections/stunServers: "nope" is not',
  );
  expect(() => parseStunServers(Array(MAX_STUN_SERVERS + 1).fill("192.0.2.1:3478"), "f")).toThrow(
    `f: at most ${MAX_STUN_SERVERS}`,
  );
});

test("addresses a STUN server cannot have are refused: unspecified, multicast, broadcast, reserved, link-local, IPv4-mapped", () => {
  for (const bad of [
    "0.0.0.0:3478",
    "0.1.2.3:3478",
    "224.0.0.1:3478",
    "239.255.255.250:1900",
    "240.0.0.1:3478",
    "255.255.255.255:3478",
    "169.254.1.1:3478",
    "[::]:3478",
    "[0:0::0]:3478",
    "[ff02::1]:3478",
    "[ff0e::1]:3478",
    "[fe80::1]:3478",
    "[febf::1]:3478",
    "[::ffff:192.0.2.1]:3478",
    "[::ffff:0.0.0.0]:3478",
  ]) {
    expect(() => parseStunServer(bad)).toThrow("is not a unicast address");
  }
  // Loopback (tests, a local server) and global unicast stay accepted; so do the edges of the refused ranges.
  for (const good of [
    "127.0.0.1:3478",
    "[::1]:3478",
    "223.255.255.255:3478",
    "1.0.0.0:3478",
    "169.253.0.1:3478",
    "[fec0::1]:3478",
    "[2001:db8::1]:3478",
    "[::192.0.2.1]:3478",
  ])
    expect(() => parseStunServer(good)).not.toThrow();
});

test("a list may not name one server twice (in any spelling)", () => {
  expect(() => parseStunServers(["192.0.2.1:3478", "192.0.2.1:03478"], "f")).toThrow(
    'f: "192.0.2.1:03478" repeats 192.0.2.1:3478',
  );
  expect(() => parseStunServers(["[2001:db8::1]:3478", "[2001:DB8:0::1]:3478"], "f")).toThrow(
    "repeats [2001:db8::1]:3478",
  );
  expect(parseStunServers(["192.0.2.1:3478", "192.0.2.1:3479"], "f")).toHaveLength(2);
});
