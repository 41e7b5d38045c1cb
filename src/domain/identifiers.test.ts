/**
 * Minted IDs have the shapes every check accepts (src/protocol/ids.ts):
 * the IDs this module makes and the patterns that guard them come from
 * the same declaration.
 */
import { describe, expect, test } from "bun:test";
import { ALLOCATION_ID, NETWORK_ID } from "../protocol/ids.ts";
import { allocationIdFor, defaultNetworkIdFor } from "./identifiers.ts";

describe("minted identifiers", () => {
  test("an allocation ID and a default Network ID match their declared patterns", () => {
    for (const [who, crid] of [
      ["controller:dev", "r1"],
      ["x", ""],
      ["ü", "\u0000"],
    ] as const) {
      expect(ALLOCATION_ID.test(allocationIdFor(who, crid))).toBe(true);
      expect(NETWORK_ID.test(defaultNetworkIdFor(who))).toBe(true);
    }
  });
});
