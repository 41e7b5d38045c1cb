/**
 * ID-prefix lookup for allocations (issue "CLI conventions"): a command
 * given the start of an allocation ID (`3f2a`, `alloc_3f2a`) finds the one
 * allocation of the caller's that starts with it, as Nomad and Docker do.
 * A full ID is used as is, without a lookup.
 *
 * Lower layer: shared by `bb allocation` (src/cli) and `bb proxy`
 * (src/proxy), so neither role imports the other; it sees the scheduler
 * only through the AllocationLister it is given.
 * Must never: pick one of several matches; scan more than
 * MAX_PREFIX_SCAN_ALLOCATIONS.
 */
import { MAX_PAGE_SIZE } from "../protocol/api.ts";
import { BeachballError } from "../protocol/errors.ts";
import { ALLOCATION_ID, ALLOCATION_ID_PREFIX, ID_HEX_DIGITS } from "../protocol/ids.ts";
import { UsageError } from "./run.ts";

/**
 * What the lookup needs of a scheduler client: one page of the caller's
 * allocations, newest first (`GET /v1/allocations`; src/client's
 * SchedulerClient.list has this shape).
 */
export interface AllocationLister {
  list(
    cursor: string | undefined,
    limit: number,
  ): Promise<{ items: readonly { allocationId: string }[]; nextCursor?: string | null | undefined }>;
}

/** The hex digits of a proper prefix of an allocation ID: 1 to ID_HEX_DIGITS - 1. */
const PARTIAL_HEX = new RegExp(`^[0-9a-f]{1,${ID_HEX_DIGITS - 1}}$`);
/** Most allocations read while looking for a prefix (the caller's list, page by page). */
export const MAX_PREFIX_SCAN_ALLOCATIONS = 10_000;
/** Most matching IDs named in an "ambiguous" error. */
export const MAX_MATCHES_SHOWN = 5;

/**
 * The full ID `input` names. Throws UsageError when `input` cannot start an
 * ID or matches several allocations (naming some), BeachballError
 * NOT_FOUND when it matches none.
 */
export async function resolveAllocationId(client: AllocationLister, input: string): Promise<string> {
  if (ALLOCATION_ID.test(input)) return input;
  const hex = input.startsWith(ALLOCATION_ID_PREFIX) ? input.slice(ALLOCATION_ID_PREFIX.length) : input;
  if (!PARTIAL_HEX.test(hex))
    throw new UsageError(
      `${JSON.stringify(input)} is not an allocation ID or the start of one (${ALLOCATION_ID_PREFIX} and up to ${ID_HEX_DIGITS} lower-case hex digits)`,
    );
  const prefix = `${ALLOCATION_ID_PREFIX}${hex}`;
  const matches: string[] = [];
  let cursor: string | undefined;
  let scanned = 0;
  do {
    const page = await client.list(cursor, MAX_PAGE_SIZE);
    scanned += page.items.length;
    for (const v of page.items) if (v.allocationId.startsWith(prefix)) matches.push(v.allocationId);
    cursor = page.nextCursor ?? undefined;
  } while (cursor && scanned < MAX_PREFIX_SCAN_ALLOCATIONS && matches.length <= MAX_MATCHES_SHOWN);
  if (matches.length === 1) return matches[0]!;
  if (matches.length === 0)
    throw new BeachballError(
      "NOT_FOUND",
      `no allocation of yours starts with ${input}${cursor ? ` among the ${scanned} most recent` : ""}`,
    );
  const shown = matches.slice(0, MAX_MATCHES_SHOWN);
  throw new UsageError(
    `${input} matches ${matches.length > MAX_MATCHES_SHOWN ? "more than " + MAX_MATCHES_SHOWN : matches.length} allocations (${shown.join(", ")}); give more of the ID`,
  );
}
