/** Cryptokey routing table (whitepaper §2): longest prefix wins, per family; parsing and formatting of addresses. */
import { describe, expect, test } from "bun:test";
import { AllowedIps, formatAddress, parseAddress, parsePrefix } from "./allowedIps.ts";

const a = (s: string) => parseAddress(s)!;

describe("AllowedIps", () => {
  test("longest prefix wins; families never mix; default routes", () => {
    const t = new AllowedIps<string>();
    t.insert("10.0.0.0/8", "wide");
    t.insert("10.1.0.0/16", "mid");
    t.insert("10.1.2.3/32", "host");
    t.insert("fd00::/8", "v6");
    t.insert("::/0", "v6-default");
    expect(t.lookup(a("10.1.2.3"))).toBe("host");
    expect(t.lookup(a("10.1.2.4"))).toBe("mid");
    expect(t.lookup(a("10.200.0.1"))).toBe("wide");
    expect(t.lookup(a("11.0.0.1"))).toBeNull();
    expect(t.lookup(a("fd12::1"))).toBe("v6");
    expect(t.lookup(a("2001:db8::1"))).toBe("v6-default");
    expect(t.lookup(new Uint8Array(5))).toBeNull();
    t.insert("10.1.0.0/16", "moved");
    expect(t.lookup(a("10.1.9.9"))).toBe("moved");
    t.removePeer("moved");
    expect(t.lookup(a("10.1.9.9"))).toBe("wide");
    expect(t.prefixesOf("host")).toEqual(["10.1.2.3/32"]);
  });

  test("prefixes are masked; malformed ones throw with the reason", () => {
    expect(formatAddress(parsePrefix("10.1.2.3/8").address)).toBe("10.0.0.0");
    expect(parsePrefix("fd00::1").bits).toBe(128);
    expect(() => parsePrefix("10.0.0.0/33")).toThrow(/prefix length/);
    expect(() => parsePrefix("nope/8")).toThrow(/not an IP address/);
  });

  test("IPv6 text round trips in RFC 5952 form", () => {
    for (const s of ["fd77::1", "::", "::1", "fd00:1::", "1:0:0:2::3", "2001:db8::1:0:0:1"])
      expect(formatAddress(a(s))).toBe(s);
    expect(formatAddress(a("::ffff:10.0.0.1"))).toBe("::ffff:a00:1");
  });
});
