/**
 * Public API bodies (TypeBox), shared by the scheduler's routes and the CLI.
 *
 * Owns: request/response shapes and their bounds. Every object schema rejects
 * unknown fields (`additionalProperties: false`). Spec: "Allocation
 * lifecycle", "One allocation end to end", "Enrollment".
 */
import { Type, type Static } from "@sinclair/typebox";

/** Largest bootstrap payload accepted, in bytes (before base64). */
export const MAX_PAYLOAD_BYTES = 256 * 1024;
/** Largest JSON request body accepted by any route, in bytes. */
export const MAX_REQUEST_BODY_BYTES = 512 * 1024;
/** Page size bound for list and events routes. */
export const MAX_PAGE_SIZE = 200;

const Ident = (maxLength: number) => Type.String({ minLength: 1, maxLength, pattern: "^[A-Za-z0-9][A-Za-z0-9._:-]*$" });

/** Allocation states (spec "States"). paused/suspending/suspended exist as states; their runtime comes later. */
export const ALLOCATION_STATES = [
  "pending",
  "reserving",
  "provisioning",
  "ready",
  "paused",
  "suspending",
  "suspended",
  "releasing",
  "released",
  "failed",
] as const;
/** One allocation state. */
export type AllocationState = (typeof ALLOCATION_STATES)[number];

/** POST /v1/allocations body. */
export const CreateAllocationBody = Type.Object(
  {
    clientRequestId: Ident(128),
    workloadClass: Ident(64),
    labels: Type.Optional(Type.Record(Type.String({ pattern: "^[a-z0-9][a-z0-9._/-]{0,62}$" }), Type.String({ maxLength: 256 }), { maxProperties: 32 })),
    /** Lifetime in seconds after which the allocation is released; capped by policy. */
    ttlSeconds: Type.Optional(Type.Integer({ minimum: 10, maximum: 7 * 24 * 3600 })),
  },
  { additionalProperties: false },
);
/** POST /v1/allocations body. */
export type CreateAllocationBody = Static<typeof CreateAllocationBody>;

/**
 * The latest placement attempt of an allocation (issue "Pending is
 * unexplained"): whether a host took it and, when none did, how many hosts
 * were considered and why each was passed over, counted by stable reason.
 */
export const PlacementOutcome = Type.Object(
  {
    /** When the attempt was made (ISO 8601). */
    at: Type.String({ maxLength: 40 }),
    /** reserved: a host took it; no_eligible_host: no host passed the filters; rejected: every candidate refused the reservation. */
    result: Type.Union([Type.Literal("reserved"), Type.Literal("no_eligible_host"), Type.Literal("rejected")]),
    /** The host that took it (reserved) or refused last (rejected). */
    hostId: Type.Union([Type.String({ maxLength: 64 }), Type.Null()]),
    /** Hosts the directory knew when it looked. */
    hostsConsidered: Type.Integer({ minimum: 0 }),
    /** Schedulable hosts where the request does not fit, by reason (INSUFFICIENT_CPU, PLACEMENT_LIMIT_REACHED, LABEL_MISSING, ALREADY_TRIED, …). */
    noFit: Type.Record(Type.String({ maxLength: 64 }), Type.Integer({ minimum: 0 }), { maxProperties: 32 }),
    /** Hosts taking no reservations now, by reason (HOST_NOT_ACTIVE, HOST_NOT_HEALTHY, CLOCK_SKEW, ISOLATION_UNHEALTHY, …). */
    unschedulable: Type.Record(Type.String({ maxLength: 64 }), Type.Integer({ minimum: 0 }), { maxProperties: 32 }),
  },
  { additionalProperties: false },
);
/** The latest placement attempt of an allocation. */
export type PlacementOutcome = Static<typeof PlacementOutcome>;

/** The allocation as the API shows it (a TypeBox schema: the allocation index stores and checks it). */
export const AllocationView = Type.Object(
  {
    allocationId: Type.String({ maxLength: 64 }),
    clientRequestId: Type.String({ maxLength: 128 }),
    workloadClass: Type.String({ maxLength: 64 }),
    state: Type.Union(ALLOCATION_STATES.map((s) => Type.Literal(s))),
    generation: Type.Integer({ minimum: 1 }),
    hostId: Type.Union([Type.String(), Type.Null()]),
    placementId: Type.Union([Type.String(), Type.Null()]),
    /** Failure reason or condition code (e.g. NO_CAPACITY, CLEANUP_PENDING). */
    reason: Type.Union([Type.String(), Type.Null()]),
    /** Conditions now in force: NO_CAPACITY (waiting for a host), replacement_blocked, CLEANUP_PENDING. */
    conditions: Type.Array(Type.String(), { maxItems: 16 }),
    resources: Type.Object({ cpuMillis: Type.Integer(), memoryMiB: Type.Integer(), ephemeralDiskMiB: Type.Integer() }, { additionalProperties: false }),
    imageDigest: Type.String(),
    labels: Type.Record(Type.String(), Type.String(), { maxProperties: 32 }),
    createdAt: Type.String(),
    updatedAt: Type.String(),
    expiresAt: Type.String(),
    /** Exit code the guest reported for the bootstrap workload, if it exited. */
    workloadExitCode: Type.Union([Type.Integer(), Type.Null()]),
    /** The latest placement attempt (null before the first). */
    placement: Type.Union([PlacementOutcome, Type.Null()]),
  },
  { additionalProperties: false },
);
/** The allocation as the API shows it. */
export type AllocationView = Static<typeof AllocationView>;

/** One allocation event (spec "Observability and retention"). */
export interface AllocationEvent {
  seq: number;
  eventId: string;
  type: string;
  at: string;
  allocationId: string;
  generation: number;
  placementId: string | null;
  hostId: string | null;
  fromState: AllocationState | null;
  toState: AllocationState | null;
  reason: string | null;
  /** The controller identity that owns the allocation (tenant and client in this release). */
  clientId: string;
  /** Correlation ID: the clientRequestId of the create call. */
  correlationId: string;
  data?: Record<string, unknown>;
}

/** POST /v1/allocations/{id}/bootstrap body. The payload is held in memory only. */
export const BootstrapBody = Type.Object(
  {
    deliveryId: Ident(128),
    generation: Type.Integer({ minimum: 1 }),
    contentType: Type.Literal("text/x-shellscript"),
    /** Base64 of at most MAX_PAYLOAD_BYTES bytes, checked after decoding (413 PAYLOAD_TOO_LARGE). */
    payloadBase64: Type.String({ maxLength: MAX_REQUEST_BODY_BYTES }),
  },
  { additionalProperties: false },
);
/** POST /v1/allocations/{id}/bootstrap body. */
export type BootstrapBody = Static<typeof BootstrapBody>;

/** Registered capacity of a host (spec "Capacity accounting"). */
export const Capacity = Type.Object(
  {
    cpuMillis: Type.Integer({ minimum: 1, maximum: 1_000_000 }),
    memoryMiB: Type.Integer({ minimum: 1, maximum: 64 * 1024 * 1024 }),
    ephemeralDiskMiB: Type.Integer({ minimum: 1, maximum: 1024 * 1024 * 1024 }),
    maxPlacements: Type.Integer({ minimum: 1, maximum: 4096 }),
  },
  { additionalProperties: false },
);
/** Registered capacity of a host. */
export type Capacity = Static<typeof Capacity>;

/** POST /v1/hosts/{id}/enrollment-tokens body. */
export const EnrollmentTokenBody = Type.Object(
  { ttlSeconds: Type.Optional(Type.Integer({ minimum: 60, maximum: 3600 })) },
  { additionalProperties: false },
);

/** POST /v1/agents/enroll body. */
export const EnrollBody = Type.Object(
  {
    token: Type.String({ minLength: 10, maxLength: 256 }),
    capacity: Capacity,
    reserve: Type.Optional(Capacity),
    region: Ident(64),
    architecture: Type.Literal("x86_64"),
    labels: Type.Optional(Type.Record(Type.String({ maxLength: 63 }), Type.String({ maxLength: 256 }), { maxProperties: 32 })),
    agentProtocolVersion: Type.Literal("1.0"),
    vmmDriver: Ident(32),
  },
  { additionalProperties: false },
);
/** POST /v1/agents/enroll body. */
export type EnrollBody = Static<typeof EnrollBody>;

/** GET /v1/.well-known/beachball response. */
export interface WellKnown {
  apiVersion: "v1";
  agentProtocolVersion: "1.0";
  region: string;
  workloadClasses: string[];
}
