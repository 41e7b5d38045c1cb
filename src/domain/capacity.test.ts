import { describe, expect, test } from "bun:test";
import { fits, sub, used, type Resources } from "./capacity.ts";

const r = (cpuMillis: number, memoryMiB: number, ephemeralDiskMiB: number, slots: number): Resources => ({
  cpuMillis,
  memoryMiB,
  ephemeralDiskMiB,
  slots,
});

describe("capacity", () => {
  test("fits names the first failing dimension", () => {
    expect(fits(r(1000, 512, 1024, 1), r(1000, 512, 1024, 1))).toBeNull();
    expect(fits(r(999, 512, 1024, 1), r(1000, 512, 1024, 1))).toBe("INSUFFICIENT_CPU");
    expect(fits(r(1000, 511, 1024, 1), r(1000, 512, 1024, 1))).toBe("INSUFFICIENT_MEMORY");
    expect(fits(r(1000, 512, 1023, 1), r(1000, 512, 1024, 1))).toBe("INSUFFICIENT_DISK");
    expect(fits(r(1000, 512, 1024, 0), r(1000, 512, 1024, 1))).toBe("PLACEMENT_LIMIT_REACHED");
  });
  test("only capacity-consuming states count as used", () => {
    const one = r(1000, 256, 1024, 1);
    const u = used([
      { state: "reserved", resources: one },
      { state: "running", resources: one },
      { state: "cleanup_pending", resources: one },
      { state: "absent", resources: one },
    ]);
    expect(u).toEqual(r(3000, 768, 3072, 3));
    expect(sub(r(4000, 1024, 4096, 4), u)).toEqual(r(1000, 256, 1024, 1));
  });
});
