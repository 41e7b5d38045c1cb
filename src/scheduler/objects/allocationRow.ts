/**
 * The one codec of the Allocation's row (issue 19, "one typed way to store
 * rows"): how a stored `allocation` row decodes into the domain record (with
 * its checks: a row that fails them is damaged state, never a fresh start),
 * how the record encodes back, and which columns a write changes. The codec
 * is derived from the drizzle table (allocationSchema.ts): every column but
 * the seven below is copied to the record field of the same name, and a
 * compile-time check fails if the table and `AllocationRecord` disagree on
 * such a field's name or type. Pure.
 * Must never: name a plain column by hand (add it to the table and the
 * record; the codec follows), or accept a row whose JSON fails its schema.
 */
import { Type, type TSchema } from "@sinclair/typebox";
import { getTableColumns } from "drizzle-orm";
import { checkerOf } from "../runtime/check.ts";
import { ALLOCATION_STATES, PlacementOutcome } from "../../protocol/api.ts";
import { PlacementSpec, PLACEMENT_OBSERVED_STATES } from "../../protocol/agent.ts";
import type { AllocationRecord } from "../../domain/reconcile.ts";
import { DamagedStateError } from "../runtime/faults.ts";
import { allocationTable } from "./allocationSchema.ts";

/** A stored allocation row, as drizzle reads and writes it. */
export type AllocationRow = typeof allocationTable.$inferSelect;

/** The decoded row: the record the rules take, plus what only the view and create need. */
export interface StoredAllocation {
  rec: AllocationRecord;
  spec: PlacementSpec;
  labels: Record<string, string>;
  bodyDigest: string;
}

/** Columns that are not a record field of the same name: the key, what only the view and create need, and JSON. */
type SpecialColumn =
  | "obj"
  | "bodyDigest"
  | "specJson"
  | "labelsJson"
  | "conditionsJson"
  | "triedHostsJson"
  | "placementJson";
/** Record fields the special columns hold (`obj` holds `allocationId`). */
type SpecialField = "allocationId" | "conditions" | "triedHosts" | "placement";
/** Columns copied verbatim to the record field of the same name. */
type PlainColumn = Exclude<keyof AllocationRow, SpecialColumn>;

/** Exactly equal types (true), else false. */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
/** Compile-time check: the plain columns are exactly the record's other fields, with the same types. */
const PLAIN_COLUMNS_MATCH_RECORD: Same<Pick<AllocationRow, PlainColumn>, Omit<AllocationRecord, SpecialField>> = true;
void PLAIN_COLUMNS_MATCH_RECORD;

const SPECIAL: ReadonlySet<string> = new Set<SpecialColumn>([
  "obj",
  "bodyDigest",
  "specJson",
  "labelsJson",
  "conditionsJson",
  "triedHostsJson",
  "placementJson",
]);
/** Every column's property name, in table order. */
const COLUMN_KEYS = Object.keys(getTableColumns(allocationTable)) as (keyof AllocationRow)[];
/** The plain columns, from the table. */
const PLAIN_COLUMNS = COLUMN_KEYS.filter((k) => !SPECIAL.has(k)) as PlainColumn[];

/** Most entries a stored list column may hold (conditions, tried hosts). */
const MAX_STORED_LIST_ITEMS = 64;
const StringList = Type.Array(Type.String({ maxLength: 200 }), { maxItems: MAX_STORED_LIST_ITEMS });
const Labels = Type.Record(Type.String(), Type.String(), { maxProperties: 64 });
const STATES: ReadonlySet<string> = new Set(ALLOCATION_STATES);
const OBSERVED: ReadonlySet<string> = new Set(PLACEMENT_OBSERVED_STATES);
const DESIRED: ReadonlySet<string> = new Set(["ready", "paused", "suspended", "released"]);

function json<T>(text: string | null, schema: TSchema, what: string, id: string): T {
  let v: unknown;
  try {
    v = JSON.parse(text ?? "null");
  } catch {
    throw new DamagedStateError(`allocation ${id}: ${what} is not JSON`);
  }
  if (!checkerOf(schema)(v)) throw new DamagedStateError(`allocation ${id}: ${what} does not match its schema`);
  return v as T;
}

/** Decodes and checks a stored row. Throws DamagedStateError naming what is wrong. */
export function decodeAllocation(r: AllocationRow): StoredAllocation {
  const id = r.obj;
  if (!STATES.has(r.state)) throw new DamagedStateError(`allocation ${id}: unknown state ${JSON.stringify(r.state)}`);
  if (!DESIRED.has(r.desired)) throw new DamagedStateError(`allocation ${id}: unknown desired state`);
  if (r.observedState !== null && !OBSERVED.has(r.observedState))
    throw new DamagedStateError(`allocation ${id}: unknown observed state`);
  const plain: Record<string, unknown> = {};
  for (const k of PLAIN_COLUMNS) plain[k] = r[k];
  const rec: AllocationRecord = {
    ...(plain as Pick<AllocationRow, PlainColumn>),
    allocationId: id,
    conditions: json(r.conditionsJson, StringList, "conditions", id),
    triedHosts: json(r.triedHostsJson, StringList, "tried hosts", id),
    placement: r.placementJson === null ? null : json(r.placementJson, PlacementOutcome, "placement outcome", id),
  };
  return {
    rec,
    spec: json(r.specJson, PlacementSpec, "spec", id),
    labels: json(r.labelsJson, Labels, "labels", id),
    bodyDigest: r.bodyDigest,
  };
}

/** The row that stores `s` (the inverse of decodeAllocation). */
export function encodeAllocation(s: StoredAllocation): AllocationRow {
  const r = s.rec;
  const plain: Record<string, unknown> = {};
  for (const k of PLAIN_COLUMNS) plain[k] = r[k];
  return {
    ...(plain as Pick<AllocationRow, PlainColumn>),
    obj: r.allocationId,
    bodyDigest: s.bodyDigest,
    specJson: JSON.stringify(s.spec),
    labelsJson: JSON.stringify(s.labels),
    conditionsJson: JSON.stringify(r.conditions),
    triedHostsJson: JSON.stringify(r.triedHosts),
    placementJson: r.placement ? JSON.stringify(r.placement) : null,
  };
}

/** The columns of `after` that differ from `before` (never the key), for an UPDATE of only those; empty if none. */
export function changedColumns(before: AllocationRow, after: AllocationRow): Partial<AllocationRow> {
  const out: Record<string, unknown> = {};
  for (const k of COLUMN_KEYS) if (k !== "obj" && after[k] !== before[k]) out[k] = after[k];
  return out as Partial<AllocationRow>;
}
