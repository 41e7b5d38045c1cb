/**
 * The Leases object's prepared statements and the API view of a lease row
 * (issue 22, "Leases").
 * Must never: show a lease to a caller without access (the object checks).
 */
import { and, desc, eq, gt, isNull, max, sql } from "drizzle-orm";
import { placeholders, type ObjectDb } from "../runtime/drizzle.ts";
import type { CreateLeaseBody, LeaseAccess, LeaseView } from "../../protocol/leases.ts";
import { leaseEventTable as et, leaseTable as t, type LeaseRow } from "./leaseSchema.ts";

/** A create, authenticated by the front: the lease's ID, owner, body and its digest. */
export interface CreateLeaseCommand {
  leaseId: string;
  owner: string;
  body: CreateLeaseBody;
  bodyDigest: string;
}

/** Longest lifetime of a lease's VM, seconds (the create body's bound; the class's maxTtlSeconds cuts it). */
export const MAX_VM_TTL_SECONDS = 7 * 24 * 3600;

/** ms since the epoch as ISO 8601. */
export const iso = (ms: number) => new Date(ms).toISOString();

/** The API view of a lease for a caller with `access`. */
export function viewOf(r: LeaseRow, access: "owner" | LeaseAccess): LeaseView {
  return {
    leaseId: r.leaseId,
    clientRequestId: r.clientRequestId,
    workloadClass: r.workloadClass,
    owner: r.owner,
    access,
    state: r.state as LeaseView["state"],
    reason: r.reason,
    allocationId: r.allocationId,
    labels: JSON.parse(r.labelsJson) as Record<string, string>,
    createdAt: iso(r.createdAtMs),
    expiresAt: iso(r.expiresAtMs),
    idleSeconds: r.idleMs === null ? null : Math.round(r.idleMs / 1000),
    lastActivityAt: iso(r.lastActivityAtMs),
    idleExpiresAt: r.idleMs === null ? null : iso(r.lastActivityAtMs + r.idleMs),
    endedAt: r.endedAtMs === null ? null : iso(r.endedAtMs),
    shares: JSON.parse(r.sharesJson) as Record<string, LeaseAccess>,
  };
}

const obj = sql.placeholder("obj");
/** The statements over lease_records and lease_events, built once per storage. */
export function leaseQueries(db: ObjectDb) {
  return {
    open: db
      .select()
      .from(t)
      .where(and(eq(t.obj, obj), isNull(t.endedAtMs)))
      .prepare(),
    one: db
      .select()
      .from(t)
      .where(and(eq(t.obj, obj), eq(t.leaseId, sql.placeholder("leaseId"))))
      .prepare(),
    newest: db.select().from(t).where(eq(t.obj, obj)).orderBy(desc(t.createdAtMs), desc(t.leaseId)).prepare(),
    lastEvent: db
      .select({ m: max(et.seq) })
      .from(et)
      .where(and(eq(et.obj, obj), eq(et.leaseId, sql.placeholder("leaseId"))))
      .prepare(),
    events: db
      .select()
      .from(et)
      .where(and(eq(et.obj, obj), eq(et.leaseId, sql.placeholder("leaseId")), gt(et.seq, sql.placeholder("after"))))
      .orderBy(et.seq)
      .limit(sql.placeholder("limit"))
      .prepare(),
    insertEvent: db
      .insert(et)
      .values({ obj, ...placeholders("leaseId", "seq", "type", "atMs", "dataJson") })
      .prepare(),
  };
}

/** Of a patch, only the shares: all that may still change on an ended lease. */
export function pickShares(patch: Partial<LeaseRow>): Partial<LeaseRow> {
  return patch.sharesJson === undefined ? {} : { sharesJson: patch.sharesJson };
}
