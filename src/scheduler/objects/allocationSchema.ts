/**
 * Tables of the Allocation object (the one definition: migrations in
 * src/scheduler/migrations/ are generated from it): one allocation row and
 * its event log, both keyed by the instance name (`obj`, the allocation ID).
 * JSON columns hold lists and the resolved spec; every other column of the
 * allocation row is a field of the domain record of the same name and type
 * (allocationRow.ts derives the codec from this table and checks that at
 * compile time).
 */
import { integer, primaryKey, sqliteTable, text } from "drizzle-orm/sqlite-core";
import type { AllocationState } from "../../protocol/api.ts";
import type { DesiredAllocationState } from "../../domain/allocation.ts";
import type { PlacementObservedState } from "../../protocol/agent.ts";

/** The allocation row (exactly one per instance). */
export const allocationTable = sqliteTable("allocation", {
  obj: text("obj").primaryKey(),
  identity: text("identity").notNull(),
  clientRequestId: text("client_request_id").notNull(),
  bodyDigest: text("body_digest").notNull(),
  workloadClass: text("workload_class").notNull(),
  specJson: text("spec_json").notNull(),
  labelsJson: text("labels_json").notNull(),
  state: text("state").$type<AllocationState>().notNull(),
  desired: text("desired").$type<DesiredAllocationState>().notNull(),
  generation: integer("generation").notNull(),
  attempts: integer("attempts").notNull(),
  hostId: text("host_id"),
  placementId: text("placement_id"),
  reservationKey: text("reservation_key"),
  observedState: text("observed_state").$type<PlacementObservedState>(),
  reason: text("reason"),
  conditionsJson: text("conditions_json").notNull(),
  triedHostsJson: text("tried_hosts_json").notNull(),
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
  /** The latest placement outcome (PlacementOutcome JSON), or null. */
  placementJson: text("placement_json"),
  /** The allocation's Network and /128 (null without private networking). */
  networkId: text("network_id"),
  address: text("address"),
  /** The highest generation a connection grant was requested for (0: none). */
  grantGeneration: integer("grant_generation").notNull().default(0),
  /** The highest generation whose grants the Network confirmed gone. */
  connectionsFencedGeneration: integer("connections_fenced_generation").notNull().default(0),
  /** A replacement held for CONNECTIONS_NOT_FENCED (its reason), or null. */
  pendingReplacement: text("pending_replacement"),
});

/** Allocation events, numbered per allocation from 1. */
export const allocationEventTable = sqliteTable(
  "allocation_events",
  {
    obj: text("obj").notNull(),
    seq: integer("seq").notNull(),
    eventId: text("event_id").notNull(),
    type: text("type").notNull(),
    atMs: integer("at_ms").notNull(),
    generation: integer("generation").notNull(),
    placementId: text("placement_id"),
    hostId: text("host_id"),
    fromState: text("from_state").$type<AllocationState>(),
    toState: text("to_state").$type<AllocationState>(),
    reason: text("reason"),
    dataJson: text("data_json"),
  },
  (t) => [primaryKey({ columns: [t.obj, t.seq] })],
);

/**
 * The allocation's log (issue 13, src/protocol/logs.ts): where the current
 * placement's stream sits in it and how far it reaches. At most one row.
 */
export const allocationLogTable = sqliteTable("allocation_log", {
  obj: text("obj").primaryKey(),
  /** The placement whose stream is being appended. */
  placementId: text("placement_id").notNull(),
  generation: integer("generation").notNull(),
  /** Log offset of that stream's byte 0. */
  streamBase: integer("stream_base").notNull(),
  /** Log offset just past the last byte received (gaps included). */
  endOffset: integer("end_offset").notNull(),
});

/** The retained bytes of the allocation's log, as received: each chunk at its log offset, oldest dropped first. */
export const allocationLogChunkTable = sqliteTable(
  "allocation_log_chunks",
  {
    obj: text("obj").notNull(),
    /** Log offset of the chunk's first byte. */
    startOffset: integer("start_offset").notNull(),
    /** Its length in bytes (UTF-8). */
    bytes: integer("bytes").notNull(),
    text: text("text").notNull(),
  },
  (t) => [primaryKey({ columns: [t.obj, t.startOffset] })],
);

/** Tables retention deletes with the instance. */
export const ALLOCATION_TABLES = [
  "allocation",
  "allocation_events",
  "allocation_log",
  "allocation_log_chunks",
] as const;
