/**
 * SQLite schema of the Host object (drizzle tables plus idempotent DDL, since
 * a compiled binary cannot read migration folders).
 */
import { sqliteTable, text, integer } from "drizzle-orm/sqlite-core";

/** The host row (one per Host object). */
export const hostTable = sqliteTable("host", {
  hostId: text("host_id").primaryKey(),
  adminState: text("admin_state").$type<"active" | "draining" | "disabled">().notNull(),
  credentialDigest: text("credential_digest"),
  credentialVersion: integer("credential_version").notNull(),
  enrollDigest: text("enroll_digest").notNull(),
  capacityJson: text("capacity_json").notNull(),
  reserveJson: text("reserve_json").notNull(),
  region: text("region").notNull(),
  architecture: text("architecture").notNull(),
  labelsJson: text("labels_json").notNull(),
  agentProtocolVersion: text("agent_protocol_version").notNull(),
  vmmDriver: text("vmm_driver").notNull(),
  heartbeatAtMs: integer("heartbeat_at_ms"),
  agentEpoch: text("agent_epoch").notNull(),
  bootId: text("boot_id").notNull(),
  lastSeq: integer("last_seq").notNull(),
  isolationHealthy: integer("isolation_healthy", { mode: "boolean" }).notNull(),
  adRevision: integer("ad_revision").notNull(),
  adPublishedAtMs: integer("ad_published_at_ms").notNull(),
  registeredAtMs: integer("registered_at_ms").notNull(),
  /** JSON of the agent's last reported facts: clockSkewMs, inventory, volumesNearlyFull, overlapUntilMs. */
  factsJson: text("facts_json").notNull(),
  fencedAtMs: integer("fenced_at_ms"),
});

/** Placements on this host. */
export const placementTable = sqliteTable("placements", {
  placementId: text("placement_id").primaryKey(),
  allocationId: text("allocation_id").notNull(),
  generation: integer("generation").notNull(),
  state: text("state").$type<"reserved" | "preparing" | "running" | "stopping" | "cleanup_pending" | "absent">().notNull(),
  resourcesJson: text("resources_json").notNull(),
  specJson: text("spec_json").notNull(),
  reservationKey: text("reservation_key").notNull().unique(),
  desired: text("desired").$type<"present" | "running" | "absent">().notNull(),
  leaseExpiresAtMs: integer("lease_expires_at_ms").notNull(),
  errorCode: text("error_code"),
  createdAtMs: integer("created_at_ms").notNull(),
  updatedAtMs: integer("updated_at_ms").notNull(),
});

/** Commands for the agent; redelivered until acknowledged or superseded. */
export const commandTable = sqliteTable("commands", {
  commandId: text("command_id").primaryKey(),
  placementId: text("placement_id").notNull(),
  type: text("type").$type<"ensure_present" | "ensure_running" | "ensure_absent">().notNull(),
  generation: integer("generation").notNull(),
  status: text("status").$type<"pending" | "acked" | "rejected" | "superseded">().notNull(),
  createdAtMs: integer("created_at_ms").notNull(),
});

/** Consumed deliveries: ID and digest only, never the bytes. */
export const deliveryTable = sqliteTable("deliveries", {
  deliveryId: text("delivery_id").primaryKey(),
  placementId: text("placement_id").notNull(),
  generation: integer("generation").notNull(),
  digest: text("digest").notNull(),
  consumedAtMs: integer("consumed_at_ms").notNull(),
});

/**
 * Idempotent DDL for the tables above, plus `update_seqs`: the last applied
 * placement_update sequence number per placement in the current agent
 * session (emptied when a session opens; spec "Messages").
 */
export const HOST_DDL = `
CREATE TABLE IF NOT EXISTS host (host_id TEXT PRIMARY KEY, admin_state TEXT NOT NULL, credential_digest TEXT, credential_version INTEGER NOT NULL,
  enroll_digest TEXT NOT NULL, capacity_json TEXT NOT NULL, reserve_json TEXT NOT NULL, region TEXT NOT NULL, architecture TEXT NOT NULL,
  labels_json TEXT NOT NULL, agent_protocol_version TEXT NOT NULL, vmm_driver TEXT NOT NULL, heartbeat_at_ms INTEGER, agent_epoch TEXT NOT NULL,
  boot_id TEXT NOT NULL, last_seq INTEGER NOT NULL, isolation_healthy INTEGER NOT NULL, ad_revision INTEGER NOT NULL,
  ad_published_at_ms INTEGER NOT NULL, registered_at_ms INTEGER NOT NULL, facts_json TEXT NOT NULL, fenced_at_ms INTEGER);
CREATE TABLE IF NOT EXISTS placements (placement_id TEXT PRIMARY KEY, allocation_id TEXT NOT NULL, generation INTEGER NOT NULL, state TEXT NOT NULL,
  resources_json TEXT NOT NULL, spec_json TEXT NOT NULL, reservation_key TEXT NOT NULL UNIQUE, desired TEXT NOT NULL,
  lease_expires_at_ms INTEGER NOT NULL, error_code TEXT, created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS commands (command_id TEXT PRIMARY KEY, placement_id TEXT NOT NULL, type TEXT NOT NULL, generation INTEGER NOT NULL,
  status TEXT NOT NULL, created_at_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS commands_pending ON commands (status, created_at_ms);
CREATE TABLE IF NOT EXISTS deliveries (delivery_id TEXT PRIMARY KEY, placement_id TEXT NOT NULL, generation INTEGER NOT NULL, digest TEXT NOT NULL,
  consumed_at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS update_seqs (placement_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL);
`;
