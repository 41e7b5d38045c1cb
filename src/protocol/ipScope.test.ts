/** ipScope: each range's edges, both families, and what is not an IP literal. */
import { expect, test } from "bun:test";
import { ipScope, isPeerAddress } from "./ipScope.ts";

test("each scope, at its edges", () => {
  const cases: Record<string, string> = {
    "0.0.0.0": "unspecified",
    "0.255.255.255": "unspecified",
    "1.0.0.0": "unicast",
    "127.0.0.1": "loopback",
    "126.255.255.255": "unicast",
    "223.255.255.255": "unicast",
    "224.0.0.0": "multicast",
    "239.255.255.255": "multicast",
    "240.0.0.0": "reserved",
    "255.255.255.255": "reserved",
    "169.254.0.1": "link-local",
    "169.253.255.255": "unicast",
    "169.255.0.0": "unicast",
    "10.0.0.1": "unicast",
    "::": "unspecified",
    "0:0:0:0:0:0:0:0": "unspecified",
    "::1": "loopback",
    "::2": "unicast",
    "ff00::": "multicast",
    "feff::1": "unicast",
    "fe80::1": "link-local",
    "febf::1": "link-local",
    "fec0::1": "unicast",
    "::ffff:192.0.2.1": "mapped",
    "::ffff:c000:201": "mapped",
    "::ffff:1:192.0.2.1": "unicast",
    "2001:db8::1": "unicast",
    "2001:DB8::1": "unicast",
    "example.org": "invalid",
    "": "invalid",
    "1.2.3": "invalid",
    "fe80::1%eth0": "link-local",
  };
  for (const [a, want] of Object.entries(cases)) expect(`${a} ${ipScope(a)}`).toBe(`${a} ${want}`);
});

test("a peer address: anything one host can answer at", () => {
  for (const a of ["127.0.0.1", "::1", "10.0.0.1", "169.254.1.1", "fe80::1", "::ffff:192.0.2.1", "2001:db8::1"])
    expect(isPeerAddress(a)).toBe(true);
  for (const a of ["0.0.0.0", "::", "224.0.0.1", "255.255.255.255", "ff02::1", "x"])
    expect(isPeerAddress(a)).toBe(false);
});
