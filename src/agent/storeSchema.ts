/**
 * The tables of the agent's agent.db (./store.ts), declared once: the input
 * of drizzle-kit (drizzle.agent.config.ts), which generates the migrations
 * in src/agent/migrations/ that create and upgrade the file, and the
 * tables ./store.ts reads and writes through.
 * Must never: hold a bootstrap payload (only its digest).
 */
import { sqliteTable, text, integer } from "drizzle-orm/sqlite-core";
import type { PlacementObservedState } from "../protocol/agent.ts";

/** Local placement rows. */
export const placements = sqliteTable("placements", {
  placementId: text("placement_id").primaryKey(),
  allocationId: text("allocation_id").notNull(),
  generation: integer("generation").notNull(),
  specJson: text("spec_json").notNull(),
  dirName: text("dir_name").notNull(),
  desired: text("desired").$type<"present" | "running" | "paused" | "suspended" | "absent">().notNull(),
  observed: text("observed").$type<PlacementObservedState>().notNull(),
  errorCode: text("error_code"),
  vmPid: integer("vm_pid"),
  vmStartTime: integer("vm_start_time"),
  leaseExpiresAtMs: integer("lease_expires_at_ms").notNull(),
  workloadExitCode: integer("workload_exit_code"),
  updatedAtMs: integer("updated_at_ms").notNull(),
  /** The suspended VM's snapshot (VmSnapshot JSON, issue 21), until it is restored or the placement goes. */
  snapshotJson: text("snapshot_json"),
});

/** Processed commands. */
export const commands = sqliteTable("commands", {
  commandId: text("command_id").primaryKey(),
  placementId: text("placement_id").notNull(),
  type: text("type").notNull(),
  generation: integer("generation").notNull(),
  digest: text("digest").notNull(),
  receivedAtMs: integer("received_at_ms").notNull(),
});

/** Consumed deliveries (ID and digest only). */
export const deliveries = sqliteTable("deliveries", {
  deliveryId: text("delivery_id").primaryKey(),
  placementId: text("placement_id").notNull(),
  digest: text("digest").notNull(),
});

/** Observations not yet accepted by the scheduler, in order. */
export const outbox = sqliteTable("outbox", {
  seq: integer("seq").primaryKey({ autoIncrement: true }),
  updateJson: text("update_json").notNull(),
});
