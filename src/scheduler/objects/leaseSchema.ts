/**
 * Tables of the Leases object (issue 22, "Leases"; the one definition,
 * migrations are generated from it): each lease with its allocation,
 * deadlines and shares, and its events.
 */
import { index, integer, primaryKey, sqliteTable, text } from "drizzle-orm/sqlite-core";

/** One lease (times in ms since the epoch). */
export const leaseTable = sqliteTable(
  "lease_records",
  {
    obj: text("obj").notNull(),
    leaseId: text("lease_id").notNull(),
    seq: integer("seq").notNull(),
    owner: text("owner").notNull(),
    clientRequestId: text("client_request_id").notNull(),
    bodyDigest: text("body_digest").notNull(),
    workloadClass: text("workload_class").notNull(),
    allocationId: text("allocation_id").notNull(),
    labelsJson: text("labels_json").notNull(),
    state: text("state").notNull(),
    reason: text("reason"),
    createdAtMs: integer("created_at_ms").notNull(),
    expiresAtMs: integer("expires_at_ms").notNull(),
    /** The VM's own end (its allocation's TTL): no extend goes past it. */
    vmExpiresAtMs: integer("vm_expires_at_ms").notNull(),
    idleMs: integer("idle_ms"),
    lastActivityAtMs: integer("last_activity_at_ms").notNull(),
    /** The deadline an expiring_soon event was written for (one per deadline). */
    warnedForMs: integer("warned_for_ms"),
    endedAtMs: integer("ended_at_ms"),
    sharesJson: text("shares_json").notNull(),
  },
  (t) => [primaryKey({ columns: [t.obj, t.leaseId] }), index("lease_records_open").on(t.obj, t.endedAtMs)],
);
/** A lease's row. */
export type LeaseRow = typeof leaseTable.$inferSelect;

/** A lease's events, numbered per lease from 1. */
export const leaseEventTable = sqliteTable(
  "lease_events",
  {
    obj: text("obj").notNull(),
    leaseId: text("lease_id").notNull(),
    seq: integer("seq").notNull(),
    type: text("type").notNull(),
    atMs: integer("at_ms").notNull(),
    dataJson: text("data_json"),
  },
  (t) => [primaryKey({ columns: [t.obj, t.leaseId, t.seq] })],
);
