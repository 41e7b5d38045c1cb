/**
 * ID-prefix lookup over a fake paginated list: a full ID needs no lookup,
 * one match wins, several are refused naming some, none is NOT_FOUND, and
 * the scan stops at MAX_PREFIX_SCAN_ALLOCATIONS.
 */
import { describe, expect, test } from "bun:test";
import type { AllocationView } from "../protocol/api.ts";
import { BeachballError } from "../protocol/errors.ts";
import { UsageError } from "./run.ts";
import { MAX_MATCHES_SHOWN, MAX_PREFIX_SCAN_ALLOCATIONS, resolveAllocationId } from "./allocationId.ts";

/** A list endpoint over `ids`, `pageSize` a page, counting the pages read. */
function lister(ids: string[], pageSize = 3) {
  const calls = { pages: 0 };
  const list = async (cursor?: string) => {
    calls.pages++;
    const start = cursor ? ids.indexOf(cursor) + 1 : 0;
    const items = ids.slice(start, start + pageSize).map((allocationId) => ({ allocationId }) as AllocationView);
    return { items, nextCursor: start + pageSize < ids.length ? ids[start + pageSize - 1]! : null, damaged: [] };
  };
  return { client: { list }, calls };
}

const id = (hex: string) => `alloc_${hex.padEnd(32, "0")}`;

describe("resolveAllocationId", () => {
  test("a full ID is used as is, without a lookup", async () => {
    const { client, calls } = lister([]);
    expect(await resolveAllocationId(client, id("ab"))).toBe(id("ab"));
    expect(calls.pages).toBe(0);
  });

  test("a unique prefix, with or without alloc_, across pages", async () => {
    const { client } = lister([id("11"), id("12"), id("21"), id("31"), id("3f2a")]);
    expect(await resolveAllocationId(client, "3f")).toBe(id("3f2a"));
    expect(await resolveAllocationId(client, "alloc_2")).toBe(id("21"));
  });

  test("several matches are a usage error naming them; none is NOT_FOUND; a non-hex prefix is refused before any lookup", async () => {
    const { client, calls } = lister([id("11"), id("12"), id("21")]);
    const e = await resolveAllocationId(client, "1").catch((x) => x);
    expect(e).toBeInstanceOf(UsageError);
    expect(e.message).toBe(`1 matches 2 allocations (${id("11")}, ${id("12")}); give more of the ID`);
    const none = await resolveAllocationId(client, "ff").catch((x) => x);
    expect(none).toBeInstanceOf(BeachballError);
    expect([none.code, none.message]).toEqual(["NOT_FOUND", "no allocation of yours starts with ff"]);
    const pages = calls.pages;
    expect(await resolveAllocationId(client, "XYZ").catch((x) => x)).toBeInstanceOf(UsageError);
    expect(calls.pages).toBe(pages);
  });

  test("many matches: stops reading once more than MAX_MATCHES_SHOWN match", async () => {
    const ids = Array.from({ length: 50 }, (_, i) => id(`7${i.toString(16).padStart(2, "0")}`));
    const { client, calls } = lister(ids, 2);
    const e = await resolveAllocationId(client, "7").catch((x) => x);
    expect(e.message).toStartWith(`7 matches more than ${MAX_MATCHES_SHOWN} allocations`);
    expect(calls.pages).toBe(Math.ceil((MAX_MATCHES_SHOWN + 1) / 2));
  });

  test("the scan stops at MAX_PREFIX_SCAN_ALLOCATIONS and says how many it read", async () => {
    const ids = Array.from({ length: MAX_PREFIX_SCAN_ALLOCATIONS + 500 }, (_, i) =>
      id(`a${i.toString(16).padStart(5, "0")}`),
    );
    const { client, calls } = lister(ids, 500);
    const e = await resolveAllocationId(client, "b").catch((x) => x);
    expect(e.message).toBe(`no allocation of yours starts with b among the ${MAX_PREFIX_SCAN_ALLOCATIONS} most recent`);
    expect(calls.pages).toBe(MAX_PREFIX_SCAN_ALLOCATIONS / 500);
  });
});
