/**
 * Tables of the Host object (the one definition; migrations are generated
 * from it): the host row, its placements, the agent command queue and
 * consumed-delivery digests, each keyed by the instance name (`obj`, the host ID).
 */
import { index, integer, primaryKey, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";
import type { HostPlacementState } from "../../domain/capacity.ts";
import type { DesiredPlacementState } from "../../domain/hostPlacement.ts";
import type { CommandType } from "../../protocol/agent.ts";

/** The host row (one per Host object). */
export const hostTable = sqliteTable("host", {
  obj: text("obj").primaryKey(),
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
  /** JSON of the agent's last reported facts: clockSkewMs, inventory, volumesNearlyFull, overlapUntilMs, cachedImages. */
  factsJson: text("facts_json").notNull(),
  fencedAtMs: integer("fenced_at_ms"),
});

/** Placements on this host. */
export const placementTable = sqliteTable(
  "host_placements",
  {
    obj: text("obj").notNull(),
    placementId: text("placement_id").notNull(),
    allocationId: text("allocation_id").notNull(),
    generation: integer("generation").notNull(),
    state: text("state").$type<HostPlacementState>().notNull(),
    resourcesJson: text("resources_json").notNull(),
    specJson: text("spec_json").notNull(),
    reservationKey: text("reservation_key").notNull(),
    desired: text("desired").$type<DesiredPlacementState>().notNull(),
    leaseExpiresAtMs: integer("lease_expires_at_ms").notNull(),
    /** Pauses, suspends and resumes so far (issue 21): the step of their command IDs (commandIdFor). */
    step: integer("step").notNull().default(0),
    errorCode: text("error_code"),
    createdAtMs: integer("created_at_ms").notNull(),
    updatedAtMs: integer("updated_at_ms").notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.obj, t.placementId] }),
    uniqueIndex("host_placements_key").on(t.obj, t.reservationKey),
  ],
);

/** Commands for the agent; redelivered until acknowledged or superseded. */
export const commandTable = sqliteTable(
  "host_commands",
  {
    obj: text("obj").notNull(),
    commandId: text("command_id").notNull(),
    placementId: text("placement_id").notNull(),
    type: text("type").$type<CommandType>().notNull(),
    generation: integer("generation").notNull(),
    status: text("status").$type<"pending" | "acked" | "rejected" | "superseded">().notNull(),
    createdAtMs: integer("created_at_ms").notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.obj, t.commandId] }),
    index("host_commands_pending").on(t.obj, t.status, t.createdAtMs),
  ],
);

/** Consumed deliveries: ID and digest only, never the bytes. */
export const deliveryTable = sqliteTable(
  "host_deliveries",
  {
    obj: text("obj").notNull(),
    deliveryId: text("delivery_id").notNull(),
    placementId: text("placement_id").notNull(),
    generation: integer("generation").notNull(),
    digest: text("digest").notNull(),
    consumedAtMs: integer("consumed_at_ms").notNull(),
  },
  (t) => [primaryKey({ columns: [t.obj, t.deliveryId] })],
);

/**
 * The last applied placement_update sequence number per placement in the
 * current agent session (emptied when a session opens; spec "Messages").
 */
export const updateSeqTable = sqliteTable(
  "host_update_seqs",
  {
    obj: text("obj").notNull(),
    placementId: text("placement_id").notNull(),
    lastSeq: integer("last_seq").notNull(),
  },
  (t) => [primaryKey({ columns: [t.obj, t.placementId] })],
);

/**
 * The host endpoint's public facts from its latest connectivity_update:
 * its WireGuard public key and candidates only (spec "The agent protocol";
 * never a private key).
 */
export const connectivityTable = sqliteTable("host_connectivity", {
  obj: text("obj").primaryKey(),
  publicKey: text("public_key").notNull(),
  candidatesJson: text("candidates_json").notNull(),
  /** The agent session (epoch) the update came in, and its sequence number there. */
  agentEpoch: text("agent_epoch").notNull(),
  seq: integer("seq").notNull(),
  updatedAtMs: integer("updated_at_ms").notNull(),
});

/**
 * configure_connection commands for the agent, redelivered until
 * acknowledged. An apply row holds the signed grant and relay map (public,
 * signed documents); the host's relay and endpoint tokens are minted when
 * the command is handed out and never stored.
 */
export const connectionCommandTable = sqliteTable(
  "host_connection_commands",
  {
    obj: text("obj").notNull(),
    commandId: text("command_id").notNull(),
    grantId: text("grant_id").notNull(),
    action: text("action").$type<"apply" | "revoke">().notNull(),
    networkId: text("network_id").notNull(),
    allocationId: text("allocation_id").notNull(),
    placementId: text("placement_id").notNull(),
    generation: integer("generation").notNull(),
    connectionId: text("connection_id").notNull(),
    /** apply: the signed grant (JSON), else null. */
    grantJson: text("grant_json"),
    /** apply: the signed relay map (JSON), else null. */
    relayMapJson: text("relay_map_json"),
    expiresAtMs: integer("expires_at_ms").notNull(),
    status: text("status").$type<"pending" | "acked" | "rejected" | "superseded">().notNull(),
    createdAtMs: integer("created_at_ms").notNull(),
    /** apply: the client's newest candidates from the grant's Connection (JSON), or null before it posted any. */
    clientCandidatesJson: text("client_candidates_json"),
    /** apply: how often the client's candidates changed (bounded by MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT). */
    clientCandidateUpdates: integer("client_candidate_updates").notNull().default(0),
  },
  (t) => [
    primaryKey({ columns: [t.obj, t.commandId] }),
    index("host_connection_commands_pending").on(t.obj, t.status, t.createdAtMs),
  ],
);

/** Tables retention deletes with the instance. */
export const HOST_TABLES = [
  "host",
  "host_placements",
  "host_commands",
  "host_deliveries",
  "host_update_seqs",
  "host_connectivity",
  "host_connection_commands",
] as const;
