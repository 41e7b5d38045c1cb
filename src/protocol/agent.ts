/**
 * The scheduler–agent protocol (spec "The agent protocol"): the envelope,
 * commands, observations and the poll response, as TypeBox schemas so the
 * scheduler validates what the agent sends.
 *
 * Owns: shapes and bounds (256 KiB envelope, ≤ 16 commands per poll, 25 s
 * park), and the private-networking command and observation
 * (configure_connection, connectivity_update). Must never: carry a bootstrap payload in anything that is persisted
 * (deliveries ride only in the poll response).
 */
import { AGENT_PROTOCOL_VERSION } from "./platform.ts";
import { Type, type Static } from "@sinclair/typebox";
import { AGENT_ERROR_CODES, type ErrorCode } from "./errors.ts";
import { MAX_WIRE_INTEGER } from "./api.ts";
import { Candidate, MAX_CANDIDATES, MAX_RELAYS, SignedGrant, SignedRelayMap, SignedRelayToken } from "./connection.ts";
import { VmExit } from "./vmExit.ts";
import {
  ALLOCATION_ID_PATTERN,
  CONNECTION_ID_PATTERN,
  ENDPOINT_TOKEN_PATTERN,
  GRANT_ID_PATTERN,
  HOST_ID_PATTERN,
  RELAY_ID_PATTERN,
} from "./ids.ts";

/** Envelope size bound in bytes. */
export const MAX_ENVELOPE_BYTES = 256 * 1024;
/** Most commands returned by one poll. */
export const MAX_COMMANDS_PER_POLL = 16;
/** Longest a poll is parked by the scheduler, ms. */
export const POLL_PARK_MS = 25_000;
/** Most updates or acks in one envelope. */
export const MAX_UPDATES_PER_ENVELOPE = 256;
/** Most delivery acknowledgements in one envelope. */
export const MAX_DELIVERY_ACKS_PER_ENVELOPE = 64;
/** Most cached image digests in one health report. */
export const MAX_REPORTED_IMAGES_PER_HEARTBEAT = 64;

/** Observed placement states an agent reports. */
export const PLACEMENT_OBSERVED_STATES = [
  "unknown",
  "accepted",
  "preparing",
  "prepared",
  "starting",
  "running",
  "paused",
  "suspended",
  "stopping",
  "absent",
  "error",
] as const;
/** One observed placement state. */
export type PlacementObservedState = (typeof PLACEMENT_OBSERVED_STATES)[number];

/**
 * Command types the scheduler sends. ensure_paused stops the VM's vCPUs (its
 * memory stays); ensure_suspended saves its memory and device state to the
 * host's disk and ends its VMM (issue 21); ensure_running after either lets
 * it run again (a suspended one is restored, as the command's generation).
 */
export const COMMAND_TYPES = [
  "ensure_present",
  "ensure_running",
  "ensure_paused",
  "ensure_suspended",
  "ensure_absent",
] as const;
/** One command type. */
export type CommandType = (typeof COMMAND_TYPES)[number];

const Id = Type.String({ minLength: 1, maxLength: 160, pattern: "^[A-Za-z0-9._:-]+$" });

/**
 * Where a fork comes from (issue 21, "Fork"): the parent allocation, the
 * suspended placement and generation whose snapshot it restores, the host
 * that holds it, and whether the caller allowed the fork to take a payload
 * of its own although the parent consumed one before its snapshot
 * (`payloadAllowed`, the restored message's flag of that name).
 */
export const ForkSource = Type.Object(
  {
    allocationId: Type.String({ pattern: ALLOCATION_ID_PATTERN }),
    placementId: Id,
    generation: Type.Integer({ minimum: 1, maximum: MAX_WIRE_INTEGER }),
    hostId: Type.String({ pattern: HOST_ID_PATTERN }),
    payloadAllowed: Type.Boolean(),
  },
  { additionalProperties: false },
);
/** Where a fork comes from. */
export type ForkSource = Static<typeof ForkSource>;

/** The resolved spec a placement runs (persisted with the allocation; never changes under it). */
export const PlacementSpec = Type.Object(
  {
    cpuMillis: Type.Integer({ minimum: 1 }),
    memoryMiB: Type.Integer({ minimum: 16 }),
    ephemeralDiskMiB: Type.Integer({ minimum: 1 }),
    imageDigest: Type.String({ pattern: "^sha256:[0-9a-f]{64}$" }),
    /**
     * The workload class allows suspend (issue 21): the VM keeps its RAM in a
     * file on the host's disk, which its disk reservation covers
     * (reservedDiskMiB). Absent: false.
     */
    suspendable: Type.Optional(Type.Boolean()),
    /**
     * The VM is a fork (issue 21, "Fork"): instead of booting, its agent
     * copies the disks of the parent's suspended placement and restores the
     * parent's snapshot with this allocation's identity and address. The
     * placement runs only on the parent's host (`hostId`). Absent: a boot.
     */
    forkOf: Type.Optional(ForkSource),
    /**
     * The VM starts warm (issue 21, "Templates"; ADR 0182): its agent
     * restores the template of this image and size (making it first when it
     * has none) instead of booting, and boots cold when it cannot, saying why
     * in the running update's `start`. Absent: a boot.
     */
    template: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
/** The resolved spec a placement runs. */
export type PlacementSpec = Static<typeof PlacementSpec>;

/** Longest text of an IPv6 address a command may carry, characters (8 groups of 4 hex digits and 7 colons, RFC 4291 section 2.2). */
export const MAX_IPV6_TEXT = 39;

/**
 * The spec an ensure_* command carries: the placement's resolved spec and,
 * when the deployment has private networking, the allocation's private IPv6
 * address (spec "Networks, addresses, and grants": a /128 from its
 * Network's /64 that survives replacement, so every generation gets the
 * same one). The agent gives it to the guest as `<address>/128` on eth0
 * with `default via fe80::1` (docs/connect.md). Absent: the guest gets no
 * IPv6 address (a deployment without private networking, or a scheduler
 * older than the field). Agents check the value themselves (a canonical
 * global or unique-local unicast address) before using it.
 */
export const CommandSpec = Type.Composite(
  [
    PlacementSpec,
    Type.Object({
      ipv6Address: Type.Optional(
        Type.String({
          minLength: 2,
          maxLength: MAX_IPV6_TEXT,
          pattern: "^[0-9a-f:]+$",
          description:
            "the allocation's private IPv6 address (canonical RFC 5952 text); the guest configures it as a /128",
        }),
      ),
    }),
  ],
  { additionalProperties: false },
);
/** The spec an ensure_* command carries. */
export type CommandSpec = Static<typeof CommandSpec>;

/**
 * A command to the agent. IDs are deterministic:
 * `{placement}:{present|running|paused|suspended|absent}:{generation}`, with
 * `:{step}` after it from the placement's second pause or resume on
 * (src/domain/identifiers.ts commandIdFor).
 */
export interface AgentCommand {
  commandId: string;
  type: CommandType;
  allocationId: string;
  placementId: string;
  generation: number;
  agentEpoch: string;
  leaseExpiresAt: string;
  spec: CommandSpec;
}

/** A bootstrap delivery riding in a poll response (memory only, never persisted). */
export interface BootstrapDelivery {
  deliveryId: string;
  allocationId: string;
  placementId: string;
  generation: number;
  contentType: string;
  payloadBase64: string;
}

/** Why the scheduler did not apply one placement_update (it is acknowledged all the same, so the agent drops it). */
export type UpdateRejectionCode = Extract<
  ErrorCode,
  "UNKNOWN_PLACEMENT" | "STALE_GENERATION" | "SEQUENCE_NOT_INCREASING" | "INVALID_STATE"
>;

/** One placement_update the scheduler did not apply, with the stable reason. */
export interface UpdateRejection {
  seq: number;
  placementId: string;
  code: UpdateRejectionCode;
}

/** Poll response. */
export interface PollResponse {
  agentEpoch: string;
  commands: AgentCommand[];
  deliveries: BootstrapDelivery[];
  /** Authoritative lease expiry per placement ID (ISO time). */
  leases: Record<string, string>;
  /**
   * Updates of this envelope that were not applied, each with a stable code
   * (absent when every update applied). Sequence numbers are per placement
   * within a session (spec "Messages": strictly increasing per session), so
   * a rejected update never holds back the updates of another placement.
   */
  rejectedUpdates?: UpdateRejection[];
  /** configure_connection commands (≤ MAX_CONNECTION_COMMANDS_PER_POLL; absent when there are none). */
  connections?: ConfigureConnection[];
}

export { MAX_CONSOLE_TAIL_CHARS, VM_EXIT_REASONS, VmExit, type VmExitReason } from "./vmExit.ts";

/**
 * Why a placement of a templated class booted cold (issue 21, "Templates";
 * ADR 0182): the driver cannot snapshot or restore (TEMPLATE_UNSUPPORTED),
 * another placement is making the template right now (TEMPLATE_BUILDING),
 * making it failed (TEMPLATE_BUILD_FAILED), the stored template failed its
 * digest check or no longer fits the VM (TEMPLATE_MISMATCH), or restoring it
 * failed before the VM ran (TEMPLATE_RESTORE_FAILED).
 */
export const TEMPLATE_FALLBACK_REASONS = [
  "TEMPLATE_UNSUPPORTED",
  "TEMPLATE_BUILDING",
  "TEMPLATE_BUILD_FAILED",
  "TEMPLATE_MISMATCH",
  "TEMPLATE_RESTORE_FAILED",
] as const;
/** One reason a templated placement booted cold. */
export type TemplateFallbackReason = (typeof TEMPLATE_FALLBACK_REASONS)[number];

/**
 * How a placement of a templated class came to run (on its `running`
 * update): restored from the template (`template`; `built` when this start
 * made it first), or booted cold (`boot`) for `fallback`.
 */
export const StartOrigin = Type.Object(
  {
    from: Type.Union([Type.Literal("template"), Type.Literal("boot")]),
    built: Type.Optional(Type.Boolean()),
    fallback: Type.Optional(Type.Union(TEMPLATE_FALLBACK_REASONS.map((c) => Type.Literal(c)))),
  },
  { additionalProperties: false },
);
/** How a placement of a templated class came to run. */
export type StartOrigin = Static<typeof StartOrigin>;

/** placement_update observation. */
export const PlacementUpdate = Type.Object(
  {
    /** Strictly increasing per placement within a session; at most 2^53 - 1. */
    seq: Type.Integer({ minimum: 1, maximum: MAX_WIRE_INTEGER }),
    placementId: Id,
    allocationId: Id,
    generation: Type.Integer({ minimum: 1, maximum: MAX_WIRE_INTEGER }),
    state: Type.Union(PLACEMENT_OBSERVED_STATES.map((s) => Type.Literal(s))),
    errorCode: Type.Optional(Type.Union(AGENT_ERROR_CODES.map((c) => Type.Literal(c)))),
    workloadExitCode: Type.Optional(Type.Integer({ minimum: -1, maximum: 255 })),
    /** With errorCode VM_EXITED: why the VM ended and the last kernel lines of its console. */
    exit: Type.Optional(VmExit),
    /** On the `running` update of a templated class's placement: whether it started from the template, and if not why. */
    start: Type.Optional(StartOrigin),
    at: Type.String({ maxLength: 40 }),
  },
  { additionalProperties: false },
);
/** placement_update observation. */
export type PlacementUpdate = Static<typeof PlacementUpdate>;

/** command_ack. */
export const CommandAck = Type.Object(
  {
    commandId: Id,
    result: Type.Union([Type.Literal("accepted"), Type.Literal("rejected"), Type.Literal("duplicate")]),
    errorCode: Type.Optional(Type.Union(AGENT_ERROR_CODES.map((c) => Type.Literal(c)))),
  },
  { additionalProperties: false },
);
/** command_ack. */
export type CommandAck = Static<typeof CommandAck>;

/** Acknowledgement that a bootstrap payload was consumed by the guest (digest only). */
export const DeliveryAck = Type.Object(
  {
    deliveryId: Id,
    placementId: Id,
    generation: Type.Integer({ minimum: 1, maximum: MAX_WIRE_INTEGER }),
    result: Type.Union([Type.Literal("consumed"), Type.Literal("guest_not_connected"), Type.Literal("rejected")]),
    digest: Type.Optional(Type.String({ pattern: "^sha256:[0-9a-f]{64}$" })),
  },
  { additionalProperties: false },
);
/** Delivery acknowledgement. */
export type DeliveryAck = Static<typeof DeliveryAck>;

// ----- Private networking (spec "The agent protocol": configure_connection, connectivity_update) -----

/** Most grants one host endpoint holds applied at once (each is a WireGuard peer and a flow table). */
export const MAX_APPLIED_GRANTS = 256;
/** Most refused grants one connectivity_update reports (the most recent ones). */
export const MAX_REPORTED_GRANT_REFUSALS = 32;
/** Most configure_connection commands one poll returns. */
export const MAX_CONNECTION_COMMANDS_PER_POLL = 16;

/**
 * Codes a host endpoint refuses a grant with: the verification codes of
 * src/protocol/connectionSignature.ts; GRANT_REVOKED for a grant revoked
 * before it was applied; STALE_GENERATION / UNKNOWN_PLACEMENT when the
 * placement it names is older or absent here; RATE_LIMITED past
 * MAX_APPLIED_GRANTS; NETWORK_SETUP_FAILED when the placement's link could
 * not be configured.
 */
export const GRANT_REFUSAL_CODES = [
  "GRANT_SIGNATURE_INVALID",
  "GRANT_EXPIRED",
  "GRANT_NOT_YET_VALID",
  "GRANT_MISMATCH",
  "GRANT_REVOKED",
  "STALE_GENERATION",
  "UNKNOWN_PLACEMENT",
  "RATE_LIMITED",
  "NETWORK_SETUP_FAILED",
] as const;
/** One grant refusal code. */
export type GrantRefusalCode = (typeof GRANT_REFUSAL_CODES)[number];

/**
 * configure_connection (spec "Revocation and replacement"): apply one grant
 * on this host, or revoke it. The command ID is deterministic:
 * `{grantId}:{apply|revoke}`. The host verifies the grant itself (signature
 * with its configured verification keys, exact host ID, host public key,
 * the placement's current generation, expiry) and removes the peer at
 * `expiresAtMs` without waiting for a revoke.
 *
 * Delivered in `PollResponse.connections` (not `commands`, which carry
 * placement commands only) and redelivered on every poll until the agent
 * acknowledges the command ID in `acks`, and handed out again (same
 * command ID) when a connectivity_update shows the host lacks a live grant
 * it acknowledged (an agent restart empties the endpoint) or still holds
 * one whose revoke it acknowledged (src/domain/grantReconcile.ts; at most
 * MAX_GRANT_REDELIVERIES_PER_SESSION times per grant and session), so an
 * apply must be idempotent. The scheduler considers a grant
 * gone from the host once the revoke's ack arrives (or the grant expired):
 * acknowledge a revoke only after the peer is removed. The host's relay
 * tokens and endpoint token are minted when the command is handed out
 * (they are never stored), so a redelivery carries fresh ones.
 */
export const ConfigureConnection = Type.Object(
  {
    commandId: Id,
    type: Type.Literal("configure_connection"),
    action: Type.Union([Type.Literal("apply"), Type.Literal("revoke")]),
    grantId: Type.String({ pattern: GRANT_ID_PATTERN }),
    /** apply: the signed grant. */
    grant: Type.Optional(SignedGrant),
    /** apply: the relays the host may meet the client at, and the host role's relay token for each (by relay ID). */
    relayMap: Type.Optional(SignedRelayMap),
    relayTokens: Type.Optional(
      Type.Record(Type.String({ pattern: RELAY_ID_PATTERN }), SignedRelayToken, {
        maxProperties: MAX_RELAYS,
      }),
    ),
    /** apply: the client's candidates, when the rendezvous has them. */
    clientCandidates: Type.Optional(Type.Array(Candidate, { maxItems: MAX_CANDIDATES })),
    /** apply: the grant's Connection (rendezvous) and the host role's endpoint token for it (`POST /v1/connections/{id}/poll`). */
    connectionId: Type.Optional(Type.String({ pattern: CONNECTION_ID_PATTERN })),
    endpointToken: Type.Optional(Type.String({ pattern: ENDPOINT_TOKEN_PATTERN })),
  },
  { additionalProperties: false },
);
/** configure_connection. */
export type ConfigureConnection = Static<typeof ConfigureConnection>;

/** One grant as the host endpoint holds it. */
export const AppliedGrant = Type.Object(
  {
    grantId: Type.String({ pattern: GRANT_ID_PATTERN }),
    allocationId: Id,
    generation: Type.Integer({ minimum: 1, maximum: MAX_WIRE_INTEGER }),
    expiresAtMs: Type.Integer({ minimum: 0, maximum: MAX_WIRE_INTEGER }),
    /** The path the peer's traffic takes now. */
    path: Type.Union([Type.Literal("direct"), Type.Literal("relay"), Type.Literal("none")]),
    /** The pinned direct endpoint (`address:port`) or the relay ID, when there is one. */
    via: Type.Optional(Type.String({ maxLength: 128 })),
  },
  { additionalProperties: false },
);
/** One applied grant. */
export type AppliedGrant = Static<typeof AppliedGrant>;

/**
 * connectivity_update (spec "The agent protocol"): the host's WireGuard
 * public key (never the private key), its endpoint candidates, the grants it
 * holds with their paths, and the grants it refused. Sent when any of these
 * changes and with each candidate refresh.
 *
 * Rides in `AgentPayload.connectivity` (poll or messages). The Host object
 * stores only the public key and the candidates (the newest `seq` of the
 * session wins; an older or equal one is ignored); applied grants, refusals
 * and paths are counted in metrics, not stored. The newest update's applied
 * grants are reconciled with the grants the scheduler handed to this host
 * (see ConfigureConnection): report every grant held, every time.
 */
export const ConnectivityUpdate = Type.Object(
  {
    /** Strictly increasing within a session. */
    seq: Type.Integer({ minimum: 1, maximum: MAX_WIRE_INTEGER }),
    hostPublicKey: Type.String({ maxLength: 44, pattern: "^[A-Za-z0-9+/]{43}=$" }),
    candidates: Type.Array(Candidate, { maxItems: MAX_CANDIDATES }),
    appliedGrants: Type.Array(AppliedGrant, { maxItems: MAX_APPLIED_GRANTS }),
    refusedGrants: Type.Array(
      Type.Object(
        { grantId: Type.String({ maxLength: 64 }), code: Type.Union(GRANT_REFUSAL_CODES.map((c) => Type.Literal(c))) },
        { additionalProperties: false },
      ),
      { maxItems: MAX_REPORTED_GRANT_REFUSALS },
    ),
    at: Type.String({ maxLength: 40 }),
  },
  { additionalProperties: false },
);
/** connectivity_update. */
export type ConnectivityUpdate = Static<typeof ConnectivityUpdate>;

/** Health report: inventory and self-checks. */
export const HealthReport = Type.Object(
  {
    isolationHealthy: Type.Boolean(),
    quarantineCount: Type.Integer({ minimum: 0, maximum: MAX_WIRE_INTEGER }),
    vmmDriver: Type.String({ maxLength: 32 }),
    /** Physical inventory; below the registered capacity makes the host unschedulable. */
    inventory: Type.Optional(
      Type.Object(
        {
          cpuMillis: Type.Integer({ minimum: 0, maximum: MAX_WIRE_INTEGER }),
          memoryMiB: Type.Integer({ minimum: 0, maximum: MAX_WIRE_INTEGER }),
        },
        { additionalProperties: false },
      ),
    ),
    /** The state or image-cache volume is nearly full. */
    volumesNearlyFull: Type.Optional(Type.Boolean()),
    /** Repeated VMM start failures (or a failed VMM test boot) since the last passing self-check: the host takes no new work. */
    vmmStartFailing: Type.Optional(Type.Boolean()),
    /** Digests of verified images in the host's cache (placement scoring key 1). */
    cachedImages: Type.Optional(
      Type.Array(Type.String({ pattern: "^sha256:[0-9a-f]{64}$" }), { maxItems: MAX_REPORTED_IMAGES_PER_HEARTBEAT }),
    ),
  },
  { additionalProperties: false },
);

/** Envelope payload for both /v1/agents/poll and /v1/agents/messages. */
export const AgentPayload = Type.Object(
  {
    bootId: Type.String({ minLength: 1, maxLength: 64 }),
    /** Empty on the first poll of a process: the scheduler then opens a session with a fresh epoch. */
    updates: Type.Array(PlacementUpdate, { maxItems: MAX_UPDATES_PER_ENVELOPE }),
    acks: Type.Array(CommandAck, { maxItems: MAX_UPDATES_PER_ENVELOPE }),
    deliveryAcks: Type.Array(DeliveryAck, { maxItems: MAX_DELIVERY_ACKS_PER_ENVELOPE }),
    health: Type.Optional(HealthReport),
    /** The host endpoint's connectivity_update, when something it reports changed. */
    connectivity: Type.Optional(ConnectivityUpdate),
    /** Poll only: how long the agent is willing to wait, ms (capped at POLL_PARK_MS). */
    waitMs: Type.Optional(Type.Integer({ minimum: 0, maximum: POLL_PARK_MS })),
  },
  { additionalProperties: false },
);
/** Envelope payload. */
export type AgentPayload = Static<typeof AgentPayload>;

/** The agent envelope (spec "Messages"). */
export const Envelope = Type.Object(
  {
    protocolVersion: Type.Literal(AGENT_PROTOCOL_VERSION),
    messageId: Type.String({ minLength: 1, maxLength: 64 }),
    hostId: Id,
    agentEpoch: Type.String({ maxLength: 64 }),
    sentAt: Type.String({ maxLength: 40 }),
    type: Type.Union([Type.Literal("poll"), Type.Literal("messages")]),
    payload: AgentPayload,
  },
  { additionalProperties: false },
);
/** The agent envelope. */
export type Envelope = Static<typeof Envelope>;

/** Enrollment response. */
export interface EnrollResponse {
  hostId: string;
  /** Host credential `bbh_<hostId>.<secret>`; shown once, stored by the agent mode 0600. */
  credential: string;
  credentialVersion: number;
  adminState: "active" | "draining" | "disabled";
}
