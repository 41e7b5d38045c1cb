import { describe, expect, test } from "bun:test";
import { overlapMs, usageTotals, type UsageInterval } from "./usage.ts";

const vm = (v: Partial<UsageInterval>): UsageInterval => ({
  tenant: "t1",
  workloadClass: "small",
  hostId: "h1",
  cpuMillis: 500,
  memoryMiB: 256,
  startedAtMs: 0,
  endedAtMs: 1000,
  ...v,
});

describe("usage", () => {
  test("overlap is the part inside the window; an open interval counts to now", () => {
    expect(overlapMs(100, 900, 0, 1000, 5000)).toBe(800);
    expect(overlapMs(100, 900, 500, 700, 5000)).toBe(200);
    expect(overlapMs(100, 900, 900, 1000, 5000)).toBe(0);
    expect(overlapMs(100, null, 0, 10_000, 600)).toBe(500);
  });

  test("totals per group are exact integers, largest first, with seconds beside them", () => {
    const r = usageTotals(
      [vm({}), vm({ tenant: "t2", startedAtMs: 0, endedAtMs: 3000, cpuMillis: 2000 }), vm({ endedAtMs: null })],
      "tenant",
      0,
      10_000,
      2500,
    );
    expect(r.items.map((i) => [i.key, i.vms, i.vmMs])).toEqual(
      [
        ["t2", 1, 3000],
        ["t1", 2, 3500],
      ].sort((a, b) => (b[2] as number) - (a[2] as number)),
    );
    expect(r.total.vmMs).toBe(6500);
    expect(r.total.cpuMillicoreMs).toBe(3500 * 500 + 3000 * 2000);
    expect(r.total.vcpuSeconds).toBe((3500 * 500 + 3000 * 2000) / 1_000_000);
    expect(usageTotals([vm({})], "class", 2000, 3000, 5000).items).toEqual([]);
  });
});
