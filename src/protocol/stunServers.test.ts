/** STUN server text: both families, canonical form, and clear errors for names, bad ports and long lists. */
import { expect, test } from "bun:test";
import { formatStunServer, MAX_STUN_SERVERS, parseStunServer, parseStunServers } from "./stunServers.ts";

test("IPv4:PORT and [IPv6]:PORT parse and format back", () => {
  expect(parseStunServer("192.0.2.53:3478")).toEqual({ address: "192.0.2.53", port: 3478 });
  expect(parseStunServer("[2001:db8::53]:3478")).toEqual({ address: "2001:db8::53", port: 3478 });
  for (const t of ["192.0.2.53:3478", "[2001:db8::53]:3478"]) expect(formatStunServer(parseStunServer(t))).toBe(t);
});

test("names, missing or bad ports, an unbracketed IPv6 and a bracketed IPv4 are refused, quoting the entry", () => {
  for (const bad of ["stun.example.org:3478", "192.0.2.1", "2001:db8::1:3478", "192.0.2.1:0", "192.0.2.1:65536", "[192.0.2.1]:3478", "999.0.2.1:3478", ""]) {
    expect(() => parseStunServer(bad)).toThrow("is not IPv4:PORT or [IPv6]:PORT");
  }
});

test("a list: each entry checked under the field's name, at most MAX_STUN_SERVERS", () => {
  expect(parseStunServers(["192.0.2.1:3478"], "f")).toEqual([{ address: "192.0.2.1", port: 3478 }]);
  expect(() => parseStunServers(["192.0.2.1:3478", "nope"], "/connections/stunServers")).toThrow('/connections/stunServers: "nope" is not');
  expect(() => parseStunServers(Array(MAX_STUN_SERVERS + 1).fill("192.0.2.1:3478"), "f")).toThrow(`f: at most ${MAX_STUN_SERVERS}`);
});
