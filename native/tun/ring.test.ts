import { expect, test } from "bun:test";
import { slotPackets } from "./ring.ts";

test("slotPackets splits length-prefixed packets without copying", () => {
  const ring = new Uint8Array(64);
  // slot at offset 16: packets [1,2,3] and [9]
  ring.set([3, 0, 1, 2, 3, 1, 0, 9], 16);
  const p = slotPackets(ring, 16, 2);
  expect(p.map((x) => [...x])).toEqual([[1, 2, 3], [9]]);
  expect(p[0]!.buffer).toBe(ring.buffer);
});
