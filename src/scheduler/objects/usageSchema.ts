/**
 * The Usage object's table (issue 22, "Usage and cost"; the one definition,
 * migrations are generated from it): one interval per allocation
 * generation, from the scheduler observing its VM running to observing it
 * absent (or the allocation ending by fencing), with the resources it held.
 * Kept after the allocation's own record is purged, for USAGE_RETENTION_DAYS.
 */
import { index, integer, primaryKey, sqliteTable, text } from "drizzle-orm/sqlite-core";

/** One VM's time: times in ms since the epoch; `endedAtMs` null while it runs. */
export const usageIntervalTable = sqliteTable(
  "usage_intervals",
  {
    obj: text("obj").notNull(),
    allocationId: text("allocation_id").notNull(),
    generation: integer("generation").notNull(),
    tenant: text("tenant").notNull(),
    workloadClass: text("workload_class").notNull(),
    hostId: text("host_id").notNull(),
    cpuMillis: integer("cpu_millis").notNull(),
    memoryMiB: integer("memory_mib").notNull(),
    startedAtMs: integer("started_at_ms").notNull(),
    endedAtMs: integer("ended_at_ms"),
  },
  (t) => [
    primaryKey({ columns: [t.obj, t.allocationId, t.generation] }),
    index("usage_intervals_started").on(t.obj, t.startedAtMs),
  ],
);
/** One interval's row. */
export type UsageRow = typeof usageIntervalTable.$inferSelect;

/** What a live allocation holds of its owner's monthly budget: its class's price × its lifetime, micro-units; released when it ends. */
export const usageReservationTable = sqliteTable(
  "usage_reservations",
  {
    obj: text("obj").notNull(),
    allocationId: text("allocation_id").notNull(),
    tenant: text("tenant").notNull(),
    reservedMicros: integer("reserved_micros").notNull(),
    atMs: integer("at_ms").notNull(),
    /** Past this (the allocation's lifetime and an hour) the reservation no longer counts, even if its end was never heard. */
    expiresAtMs: integer("expires_at_ms").notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.obj, t.allocationId] }), index("usage_reservations_tenant").on(t.obj, t.tenant)],
);
