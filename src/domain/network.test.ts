import { describe, expect, test } from "bun:test";
import {
  MAX_ADDRESS_INDEX,
  MAX_NETWORKS,
  networkAddress,
  networkPrefix,
  parseUlaPrefix,
  subnetOf,
  type UlaPrefix,
} from "./network.ts";

const ula = parseUlaPrefix("fd3c:91a2:7e10::/48") as UlaPrefix;

describe("the deployment's ULA /48", () => {
  test("a random fd00::/8 /48 parses to its canonical text", () => {
    expect(ula.text).toBe("fd3c:91a2:7e10::/48");
    expect((parseUlaPrefix("FD3C:91A2:7E10:0:0:0:0:0/48") as UlaPrefix).text).toBe("fd3c:91a2:7e10::/48");
  });
  test("refused: another length, outside fd00::/8, bits past the 48th, a global ID that is not random, not a prefix", () => {
    expect(parseUlaPrefix("fd3c:91a2:7e10::/56")).toContain("must be a /48");
    expect(parseUlaPrefix("fc3c:91a2:7e10::/48")).toContain("fd00::/8");
    expect(parseUlaPrefix("2001:db8:1::/48")).toContain("fd00::/8");
    expect(parseUlaPrefix("fd3c:91a2:7e10:1::/48")).toContain("beyond its 48th");
    expect(parseUlaPrefix("fd00::/48")).toContain("random");
    expect(parseUlaPrefix("fd11:1111:1111::/48")).toContain("random");
    expect(parseUlaPrefix("fd3c:91a2:7e10::")).toContain("ADDRESS/48");
    expect(parseUlaPrefix("fd3c::91a2::1/48")).toContain("not an IPv6 address");
  });
});

describe("Network /64s and /128s", () => {
  test("a Network's /64 carries its subnet index; subnet 0 is never assigned", () => {
    expect(networkPrefix(ula, 1)).toBe("fd3c:91a2:7e10:1::/64");
    expect(networkPrefix(ula, 0x0abc)).toBe("fd3c:91a2:7e10:abc::/64");
    expect(networkPrefix(ula, MAX_NETWORKS)).toBe("fd3c:91a2:7e10:ffff::/64");
    expect(() => networkPrefix(ula, 0)).toThrow(RangeError);
    expect(() => networkPrefix(ula, MAX_NETWORKS + 1)).toThrow(RangeError);
  });
  test("allocation and client addresses come from two disjoint counters inside the /64", () => {
    expect(networkAddress(ula, 1, "allocation", 1)).toBe("fd3c:91a2:7e10:1:1::1");
    expect(networkAddress(ula, 1, "client", 1)).toBe("fd3c:91a2:7e10:1:2::1");
    expect(networkAddress(ula, 2, "allocation", 0x1_0000)).toBe("fd3c:91a2:7e10:2:1:0:1:0");
    expect(networkAddress(ula, 1, "allocation", MAX_ADDRESS_INDEX)).toBe("fd3c:91a2:7e10:1:1:ffff:ffff:ffff");
    expect(() => networkAddress(ula, 1, "client", 0)).toThrow(RangeError);
    const seen = new Set<string>();
    for (let i = 1; i <= 500; i++)
      for (const k of ["allocation", "client"] as const) seen.add(networkAddress(ula, 7, k, i));
    expect(seen.size).toBe(1000);
  });
  test("subnetOf finds the Network of an address inside the /48 only", () => {
    expect(subnetOf(ula, networkAddress(ula, 42, "client", 9))).toBe(42);
    expect(subnetOf(ula, "fd3c:91a2:7e11:1::1")).toBeNull();
    expect(subnetOf(ula, "fd3c:91a2:7e10::1")).toBeNull();
    expect(subnetOf(ula, "not an address")).toBeNull();
  });
});
