/**
 * The scheduler–agent protocol (spec "The agent protocol"): the envelope,
 * commands, observations and the poll response, as TypeBox schemas so the
 * scheduler validates what the agent sends.
 *
 * Owns: shapes and bounds (256 KiB envelope, ≤ 16 commands per poll, 25 s
 * park). Must never: carry a bootstrap payload in anything that is persisted
 * (deliveries ride only in the poll response).
 */
import { Type, type Static } from "@sinclair/typebox";
import { AGENT_ERROR_CODES, type ErrorCode } from "./errors.ts";
import { MAX_WIRE_INTEGER } from "./api.ts";
import { VmExit } from "./vmExit.ts";

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
  "stopping",
  "absent",
  "error",
] as const;
/** One observed placement state. */
export type PlacementObservedState = (typeof PLACEMENT_OBSERVED_STATES)[number];

/** Command types the scheduler sends. */
export const COMMAND_TYPES = ["ensure_present", "ensure_running", "ensure_absent"] as const;
/** One command type. */
export type CommandType = (typeof COMMAND_TYPES)[number];

/** The resolved spec a placement runs (persisted with the allocation; never changes under it). */
export const PlacementSpec = Type.Object(
  {
    cpuMillis: Type.Integer({ minimum: 1 }),
    memoryMiB: Type.Integer({ minimum: 16 }),
    ephemeralDiskMiB: Type.Integer({ minimum: 1 }),
    imageDigest: Type.String({ pattern: "^sha256:[0-9a-f]{64}$" }),
  },
  { additionalProperties: false },
);
/** The resolved spec a placement runs. */
export type PlacementSpec = Static<typeof PlacementSpec>;

/** A command to the agent. IDs are deterministic: `{placement}:{present|running|absent}:{generation}`. */
export interface AgentCommand {
  commandId: string;
  type: CommandType;
  allocationId: string;
  placementId: string;
  generation: number;
  agentEpoch: string;
  leaseExpiresAt: string;
  spec: PlacementSpec;
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
export type UpdateRejectionCode = Extract<ErrorCode, "UNKNOWN_PLACEMENT" | "STALE_GENERATION" | "SEQUENCE_NOT_INCREASING" | "INVALID_STATE">;

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
}

const Id = Type.String({ minLength: 1, maxLength: 160, pattern: "^[A-Za-z0-9._:-]+$" });

export { MAX_CONSOLE_TAIL_CHARS, VM_EXIT_REASONS, VmExit, type VmExitReason } from "./vmExit.ts";

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

/** Health report: inventory and self-checks. */
export const HealthReport = Type.Object(
  {
    isolationHealthy: Type.Boolean(),
    quarantineCount: Type.Integer({ minimum: 0, maximum: MAX_WIRE_INTEGER }),
    vmmDriver: Type.String({ maxLength: 32 }),
    /** Physical inventory; below the registered capacity makes the host unschedulable. */
    inventory: Type.Optional(Type.Object({ cpuMillis: Type.Integer({ minimum: 0, maximum: MAX_WIRE_INTEGER }), memoryMiB: Type.Integer({ minimum: 0, maximum: MAX_WIRE_INTEGER }) }, { additionalProperties: false })),
    /** The state or image-cache volume is nearly full. */
    volumesNearlyFull: Type.Optional(Type.Boolean()),
    /** Repeated VMM start failures (or a failed VMM test boot) since the last passing self-check: the host takes no new work. */
    vmmStartFailing: Type.Optional(Type.Boolean()),
    /** Digests of verified images in the host's cache (placement scoring key 1). */
    cachedImages: Type.Optional(Type.Array(Type.String({ pattern: "^sha256:[0-9a-f]{64}$" }), { maxItems: MAX_REPORTED_IMAGES_PER_HEARTBEAT })),
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
    protocolVersion: Type.Literal("1.0"),
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
