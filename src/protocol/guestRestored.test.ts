/**
 * The restored message's schema (guestRestored.ts): the entropy's bounds
 * are exact to the byte although base64 groups three bytes in four
 * characters, for the shipped bounds and for every small pair.
 */
import { describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import {
  MAX_RESTORE_ENTROPY_BYTES,
  MIN_RESTORE_ENTROPY_BYTES,
  RestoredMessage,
  base64BytesPattern,
  base64Chars,
} from "./guestRestored.ts";

const withEntropy = (n: number) => ({
  type: "restored",
  allocationId: "alloc-1",
  placementId: "plc-1",
  generation: 1,
  nonce: "ab".repeat(32),
  entropyBase64: Buffer.alloc(n, 7).toString("base64"),
  wallClockMs: 1_800_000_000_000,
});

describe("restored entropy bounds", () => {
  test("MIN_RESTORE_ENTROPY_BYTES..MAX_RESTORE_ENTROPY_BYTES bytes pass, one byte fewer or more does not", () => {
    for (const n of [
      MIN_RESTORE_ENTROPY_BYTES,
      MIN_RESTORE_ENTROPY_BYTES + 1,
      MAX_RESTORE_ENTROPY_BYTES - 1,
      MAX_RESTORE_ENTROPY_BYTES,
    ])
      expect(Value.Check(RestoredMessage, withEntropy(n))).toBe(true);
    for (const n of [0, MIN_RESTORE_ENTROPY_BYTES - 1, MAX_RESTORE_ENTROPY_BYTES + 1, MAX_RESTORE_ENTROPY_BYTES + 2])
      expect(Value.Check(RestoredMessage, withEntropy(n))).toBe(false);
    expect(Value.Check(RestoredMessage, { ...withEntropy(32), entropyBase64: "*".repeat(44) })).toBe(false);
  });

  test("base64BytesPattern is exact for every bound pair 1..12", () => {
    for (let lo = 1; lo <= 12; lo++)
      for (let hi = lo; hi <= 12; hi++) {
        const re = new RegExp(base64BytesPattern(lo, hi));
        for (let n = 0; n <= 15; n++) {
          const text = Buffer.alloc(n, 1).toString("base64");
          const fits = text.length >= base64Chars(lo) && text.length <= base64Chars(hi) && re.test(text);
          expect(`${lo}..${hi} ${n}: ${fits}`).toBe(`${lo}..${hi} ${n}: ${n >= lo && n <= hi}`);
        }
      }
  });
});
