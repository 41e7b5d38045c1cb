/**
 * SQLite schema of the Allocation object: one allocation row and its event log.
 */
import { sqliteTable, text, integer } from "drizzle-orm/sqlite-core";
import type { AllocationState } from "../../protocol/api.ts";

/** The allocation row (exactly one per object). */
export const allocationTable = sqliteTable("allocation", {
  allocationId: text("allocation_id").primaryKey(),
  identity: text("identity").notNull(),
  clientRequestId: text("client_request_id").notNull(),
  bodyDigest: text("body_digest").notNull(),
  workloadClass: text("workload_class").notNull(),
  specJson: text("spec_json").notNull(),
  labelsJson: text("labels_json").notNull(),
  state: text("state").$type<AllocationState>().notNull(),
  desired: text("desired").$type<"ready" | "released">().notNull(),
  generation: integer("generation").notNull(),
  attempts: integer("attempts").notNull(),
  hostId: text("host_id"),
  placementId: text("placement_id"),
  reservationKey: text("reservation_key"),
  observedState: text("observed_state"),
  reason: text("reason"),
  conditionsJson: text("conditions_json").notNull(),
  triedHostsJson: text("tried_hosts_json").notNull(),
  noCapacityRounds: integer("no_capacity_rounds").notNull(),
  nextAttemptAtMs: integer("next_attempt_at_ms").notNull(),
  guestReady: integer("guest_ready", { mode: "boolean" }).notNull(),
  payloadConsumed: integer("payload_consumed", { mode: "boolean" }).notNull(),
  replaceAfterAbsent: integer("replace_after_absent", { mode: "boolean" }).notNull(),
  workloadExitCode: integer("workload_exit_code"),
  createdAtMs: integer("created_at_ms").notNull(),
  updatedAtMs: integer("updated_at_ms").notNull(),
  stateEnteredAtMs: integer("state_entered_at_ms").notNull(),
  expiresAtMs: integer("expires_at_ms").notNull(),
  replacementAuthorized: integer("replacement_authorized", { mode: "boolean" }).notNull(),
  hostCheckAtMs: integer("host_check_at_ms").notNull(),
  terminalAtMs: integer("terminal_at_ms"),
});

/** Allocation events, in order. */
export const eventTable = sqliteTable("events", {
  seq: integer("seq").primaryKey({ autoIncrement: true }),
  eventId: text("event_id").notNull().unique(),
  type: text("type").notNull(),
  atMs: integer("at_ms").notNull(),
  generation: integer("generation").notNull(),
  placementId: text("placement_id"),
  hostId: text("host_id"),
  fromState: text("from_state").$type<AllocationState>(),
  toState: text("to_state").$type<AllocationState>(),
  reason: text("reason"),
  dataJson: text("data_json"),
});

/** Idempotent DDL for the tables above. */
export const ALLOCATION_DDL = `
CREATE TABLE IF NOT EXISTS allocation (allocation_id TEXT PRIMARY KEY, identity TEXT NOT NULL, client_request_id TEXT NOT NULL, body_digest TEXT NOT NULL,
  workload_class TEXT NOT NULL, spec_json TEXT NOT NULL, labels_json TEXT NOT NULL, state TEXT NOT NULL, desired TEXT NOT NULL, generation INTEGER NOT NULL,
  attempts INTEGER NOT NULL, host_id TEXT, placement_id TEXT, reservation_key TEXT, observed_state TEXT, reason TEXT, conditions_json TEXT NOT NULL,
  tried_hosts_json TEXT NOT NULL, no_capacity_rounds INTEGER NOT NULL, next_attempt_at_ms INTEGER NOT NULL, guest_ready INTEGER NOT NULL,
  payload_consumed INTEGER NOT NULL, replace_after_absent INTEGER NOT NULL, workload_exit_code INTEGER, created_at_ms INTEGER NOT NULL,
  updated_at_ms INTEGER NOT NULL, state_entered_at_ms INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL, replacement_authorized INTEGER NOT NULL,
  host_check_at_ms INTEGER NOT NULL, terminal_at_ms INTEGER);
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL, at_ms INTEGER NOT NULL,
  generation INTEGER NOT NULL, placement_id TEXT, host_id TEXT, from_state TEXT, to_state TEXT, reason TEXT, data_json TEXT);
`;
