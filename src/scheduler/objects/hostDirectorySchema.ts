/**
 * Tables of the HostDirectory object (the one definition; migrations are
 * generated from it): the latest advertisement per host and the allocations
 * waiting for capacity (kept so age order survives a restart).
 */
import { index, integer, primaryKey, sqliteTable, text } from "drizzle-orm/sqlite-core";

/** The latest advertisement of each host (JSON of the domain's Advertisement). */
export const directoryAdTable = sqliteTable(
  "directory_ads",
  {
    obj: text("obj").notNull(),
    hostId: text("host_id").notNull(),
    revision: integer("revision").notNull(),
    adJson: text("ad_json").notNull(),
    receivedAtMs: integer("received_at_ms").notNull(),
  },
  (t) => [primaryKey({ columns: [t.obj, t.hostId] })],
);

/** Allocations waiting for capacity, woken oldest first. */
export const directoryWaiterTable = sqliteTable(
  "directory_waiters",
  {
    obj: text("obj").notNull(),
    allocationId: text("allocation_id").notNull(),
    createdAtMs: integer("created_at_ms").notNull(),
    untilMs: integer("until_ms").notNull(),
    /** The request's shape (resources, image, architecture, regions, labels, protocol) as JSON. */
    requestJson: text("request_json").notNull(),
  },
  (t) => [primaryKey({ columns: [t.obj, t.allocationId] }), index("directory_waiters_age").on(t.obj, t.createdAtMs)],
);

/** Tables retention deletes with the instance. */
export const DIRECTORY_TABLES = ["directory_ads", "directory_waiters"] as const;
