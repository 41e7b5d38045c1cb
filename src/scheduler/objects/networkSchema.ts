/**
 * Tables of the private-networking objects (the one definition; migrations
 * are generated from it): the NetworkDirectory's subnet assignments, each
 * Network's row, allocation addresses, grants and freed addresses, and each
 * Connection's row and rendezvous messages. Every row is keyed by its
 * instance name (`obj`). Spec "Networks, addresses, and grants",
 * "Coordination and path selection".
 * Must never: hold a private key, a raw endpoint or relay token (digests
 * only), or a packet.
 */
import { index, integer, primaryKey, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";

/** NetworkDirectory: each Network's /64 (subnet index, assigned sequentially from 1). */
export const networkDirectoryTable = sqliteTable(
  "network_directory",
  {
    obj: text("obj").notNull(),
    networkId: text("network_id").notNull(),
    tenant: text("tenant").notNull(),
    subnet: integer("subnet").notNull(),
    createdAtMs: integer("created_at_ms").notNull(),
  },
  (t) => [primaryKey({ columns: [t.obj, t.networkId] }), uniqueIndex("network_directory_subnet").on(t.obj, t.subnet)],
);

/** A Network (one row per instance): its owner, /64 and address counters. */
export const networkTable = sqliteTable("network", {
  obj: text("obj").primaryKey(),
  tenant: text("tenant").notNull(),
  subnet: integer("subnet").notNull(),
  /** The last allocation address index handed out (counter; never derived from an identifier). */
  lastAllocationIndex: integer("last_allocation_index").notNull(),
  /** The last client address index handed out. */
  lastClientIndex: integer("last_client_index").notNull(),
  createdAtMs: integer("created_at_ms").notNull(),
});

/** The /128 of each allocation in the Network, and the generations closed to new grants. */
export const networkAllocationTable = sqliteTable(
  "network_allocations",
  {
    obj: text("obj").notNull(),
    allocationId: text("allocation_id").notNull(),
    address: text("address").notNull(),
    /** Grants are refused for generations up to this one (set before a replacement may advance). */
    closedGeneration: integer("closed_generation").notNull(),
    /** The generation the allocation waits to see fenced (it is told when the last grant goes), or 0. */
    waitingGeneration: integer("waiting_generation").notNull(),
    /** When the allocation became terminal (its placement's cleanup completed), or null. */
    terminalAtMs: integer("terminal_at_ms"),
  },
  (t) => [
    primaryKey({ columns: [t.obj, t.allocationId] }),
    uniqueIndex("network_allocations_address").on(t.obj, t.address),
  ],
);

/** Grants issued in the Network (public facts only; the signed grant itself goes to the host's command row). */
export const networkGrantTable = sqliteTable(
  "network_grants",
  {
    obj: text("obj").notNull(),
    grantId: text("grant_id").notNull(),
    allocationId: text("allocation_id").notNull(),
    generation: integer("generation").notNull(),
    hostId: text("host_id").notNull(),
    placementId: text("placement_id").notNull(),
    clientAddress: text("client_address").notNull(),
    connectionId: text("connection_id").notNull(),
    issuedAtMs: integer("issued_at_ms").notNull(),
    expiresAtMs: integer("expires_at_ms").notNull(),
    revokedAtMs: integer("revoked_at_ms"),
    /** When the host acknowledged the revoke (the peer is gone), or null. */
    revokeObservedAtMs: integer("revoke_observed_at_ms"),
    /** When the grant was found gone from its host and its client address freed, or null. */
    goneAtMs: integer("gone_at_ms"),
  },
  (t) => [
    primaryKey({ columns: [t.obj, t.grantId] }),
    index("network_grants_allocation").on(t.obj, t.allocationId, t.generation),
  ],
);

/** Addresses free for reuse (every grant of their old holder gone and its cleanup completed), oldest first. */
export const networkFreeAddressTable = sqliteTable(
  "network_free_addresses",
  {
    obj: text("obj").notNull(),
    kind: text("kind").$type<"allocation" | "client">().notNull(),
    address: text("address").notNull(),
    freedAtMs: integer("freed_at_ms").notNull(),
  },
  (t) => [
    primaryKey({ columns: [t.obj, t.address] }),
    index("network_free_addresses_kind").on(t.obj, t.kind, t.freedAtMs),
  ],
);

/** Tables of the NetworkDirectory (retention deletes nothing of it). */
export const NETWORK_DIRECTORY_TABLES = ["network_directory"] as const;
/** Tables of a Network. */
export const NETWORK_TABLES = ["network", "network_allocations", "network_grants", "network_free_addresses"] as const;

/** A Connection (one row per instance): its grant, lifetime and the two roles' endpoint-token digests and sequence numbers. */
export const connectionTable = sqliteTable("connection", {
  obj: text("obj").primaryKey(),
  grantId: text("grant_id").notNull(),
  expiresAtMs: integer("expires_at_ms").notNull(),
  clientTokenDigest: text("client_token_digest").notNull(),
  hostTokenDigest: text("host_token_digest").notNull(),
  clientLastSeq: integer("client_last_seq").notNull(),
  hostLastSeq: integer("host_last_seq").notNull(),
  /** The host the grant names (the client's candidates go to it), or null for a Connection opened before it was recorded. */
  hostId: text("host_id"),
});

/** Rendezvous messages not yet acknowledged by the other role (at most MAX_CONNECTION_MESSAGES_PER_ROLE per role). */
export const connectionMessageTable = sqliteTable(
  "connection_messages",
  {
    obj: text("obj").notNull(),
    /** The sender's role. */
    role: text("role").$type<"client" | "host">().notNull(),
    seq: integer("seq").notNull(),
    bodyJson: text("body_json").notNull(),
  },
  (t) => [primaryKey({ columns: [t.obj, t.role, t.seq] })],
);

/** Tables of a Connection (all deleted when its grant ends). */
export const CONNECTION_TABLES = ["connection", "connection_messages"] as const;
