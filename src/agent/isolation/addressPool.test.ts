/** Unit tests of the egress pool arithmetic and slot allocation (addressPool.ts). */
import { expect, test } from "bun:test";
import {
  cidrContains,
  formatIpv4,
  parseCidr,
  parseIpv4,
  pickSlot,
  slotAt,
  slotCount,
  slotIndexOf,
} from "./addressPool.ts";

test("IPv4 parse/format round trip and rejects junk", () => {
  expect(formatIpv4(parseIpv4("100.127.255.1"))).toBe("100.127.255.1");
  expect(parseIpv4("255.255.255.255")).toBe(0xffffffff);
  for (const bad of ["1.2.3", "1.2.3.256", "a.b.c.d", "1.2.3.4 ", ""]) expect(() => parseIpv4(bad)).toThrow();
  expect(() => parseCidr("10.0.0.1/8")).toThrow(/host bits/);
  expect(parseCidr("8.8.8.8")).toEqual({ base: parseIpv4("8.8.8.8"), prefix: 32 });
});

test("slots are /31s inside the pool, host even, placement odd", () => {
  const pool = parseCidr("100.127.0.0/16");
  expect(slotCount(pool)).toBe(32768);
  expect(slotAt(pool, 0)).toEqual({
    index: 0,
    cidr: "100.127.0.0/31",
    hostAddress: "100.127.0.0",
    placementAddress: "100.127.0.1",
  });
  expect(slotAt(pool, 32767).placementAddress).toBe("100.127.255.255");
  expect(() => slotAt(pool, 32768)).toThrow();
  expect(slotIndexOf(pool, "100.127.1.3")).toBe(129);
  expect(slotIndexOf(pool, "100.126.1.3")).toBeNull();
  // The default pool lies inside CGNAT, which guests are denied.
  expect(cidrContains(parseCidr("100.64.0.0/10"), "100.127.200.7")).toBe(true);
});

test("pickSlot is deterministic per seed, skips used slots, and reports exhaustion", () => {
  const pool = parseCidr("100.127.0.0/29"); // 4 slots
  const a = pickSlot(pool, "bb-aaaa", new Set());
  expect(pickSlot(pool, "bb-aaaa", new Set())).toEqual(a);
  const b = pickSlot(pool, "bb-aaaa", new Set([a.index]));
  expect(b.index).not.toBe(a.index);
  const seen = new Set<number>();
  for (let i = 0; i < 4; i++) seen.add(pickSlot(pool, `bb-${i}`, seen).index);
  expect(seen.size).toBe(4);
  expect(() => pickSlot(pool, "bb-x", seen)).toThrow(/exhausted/);
  expect(() => slotCount(parseCidr("1.2.3.4/32"))).toThrow();
});
