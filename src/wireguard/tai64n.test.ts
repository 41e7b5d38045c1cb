/** TAI64N (whitepaper §5.1): layout, whitening, and strict ordering used to refuse replayed initiations. */
import { describe, expect, test } from "bun:test";
import { isLaterTimestamp, tai64n } from "./tai64n.ts";

describe("TAI64N", () => {
  test("layout: 2^62 + 10 + seconds big-endian, then whitened nanoseconds", () => {
    const t = tai64n(Date.UTC(2024, 0, 1) + 500);
    const secs = Date.UTC(2024, 0, 1) / 1000 + 10;
    expect(Buffer.from(t.subarray(0, 8)).readBigUInt64BE()).toBe(2n ** 62n + BigInt(secs));
    const nanos = Buffer.from(t.subarray(8)).readUInt32BE();
    expect(nanos % 2 ** 24).toBe(0);
    expect(nanos).toBeLessThanOrEqual(500_000_000);
    expect(nanos).toBeGreaterThan(500_000_000 - 2 ** 24);
  });

  test("ordering: strictly later only; equal (within one whitening step) is not later", () => {
    const base = Date.UTC(2024, 5, 1);
    expect(isLaterTimestamp(tai64n(base + 1000), tai64n(base))).toBe(true);
    expect(isLaterTimestamp(tai64n(base), tai64n(base + 1000))).toBe(false);
    expect(isLaterTimestamp(tai64n(base), tai64n(base))).toBe(false);
    expect(isLaterTimestamp(tai64n(base + 1), tai64n(base))).toBe(false);
    expect(isLaterTimestamp(tai64n(base + 20), tai64n(base))).toBe(true);
    expect(isLaterTimestamp(tai64n(base), null)).toBe(true);
    expect(isLaterTimestamp(new Uint8Array(11), null)).toBe(false);
  });
});
