/**
 * Tables of the singleton objects (the one definition; migrations are
 * generated from it): Admission's admitted allocations and hosts,
 * Enrollment's token digests, the AllocationIndex's entries and
 * Operations' alerts. Each row names its instance in `obj` ("global").
 */
import { index, integer, primaryKey, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";

/** Allocations Admission counts: retained while the row exists, active while `active` is 1. */
export const admissionAllocationTable = sqliteTable(
  "admission_allocations",
  {
    obj: text("obj").notNull(),
    allocationId: text("allocation_id").notNull(),
    identity: text("identity").notNull(),
    active: integer("active", { mode: "boolean" }).notNull(),
    admittedAtMs: integer("admitted_at_ms").notNull(),
  },
  (t) => [primaryKey({ columns: [t.obj, t.allocationId] })],
);

/** Registered hosts and whether each counts against the active-host cap. */
export const admissionHostTable = sqliteTable(
  "admission_hosts",
  {
    obj: text("obj").notNull(),
    hostId: text("host_id").notNull(),
    registeredAtMs: integer("registered_at_ms").notNull(),
    active: integer("active", { mode: "boolean" }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.obj, t.hostId] })],
);

/** Enrollment tokens: digest only, bound to one host, usable once. */
export const enrollmentTokenTable = sqliteTable(
  "enrollment_tokens",
  {
    obj: text("obj").notNull(),
    tokenDigest: text("token_digest").notNull(),
    hostId: text("host_id").notNull(),
    expiresAtMs: integer("expires_at_ms").notNull(),
    usedWith: text("used_with"),
    createdBy: text("created_by").notNull(),
  },
  (t) => [primaryKey({ columns: [t.obj, t.tokenDigest] })],
);

/** The allocation index: each allocation's latest view, listed per identity in allocation-ID order. */
export const allocationIndexTable = sqliteTable(
  "allocation_index",
  {
    obj: text("obj").notNull(),
    allocationId: text("allocation_id").notNull(),
    identity: text("identity").notNull(),
    state: text("state").notNull(),
    createdAtMs: integer("created_at_ms").notNull(),
    /** The latest AllocationView as JSON. */
    viewJson: text("view_json").notNull(),
    /** The stored view's version (the allocation's event sequence number when it was taken): an older view never replaces it. */
    viewVersion: integer("view_version").notNull().default(0),
  },
  (t) => [
    primaryKey({ columns: [t.obj, t.allocationId] }),
    index("allocation_index_identity").on(t.obj, t.identity, t.allocationId),
  ],
);

/** Alerts for operators, deduplicated by alert ID. */
export const alertTable = sqliteTable(
  "operations_alerts",
  {
    seq: integer("seq").primaryKey({ autoIncrement: true }),
    obj: text("obj").notNull(),
    alertId: text("alert_id").notNull(),
    type: text("type").notNull(),
    subject: text("subject").notNull(),
    reason: text("reason").notNull(),
    atMs: integer("at_ms").notNull(),
  },
  (t) => [uniqueIndex("operations_alerts_id").on(t.obj, t.alertId)],
);
