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

/** The allocation as the API shows it. */
export interface AllocationView {
  allocationId: string;
  clientRequestId: string;
  workloadClass: string;
  state: AllocationState;
  generation: number;
  hostId: string | null;
  placementId: string | null;
  /** Failure reason or condition code (e.g. NO_CAPACITY, CLEANUP_PENDING). */
  reason: string | null;
  conditions: string[];
  resources: { cpuMillis: number; memoryMiB: number; ephemeralDiskMiB: number };
  imageDigest: string;
  labels: Record<string, string>;
  createdAt: string;
  updatedAt: string;
  expiresAt: string;
  /** Exit code the guest reported for the bootstrap workload, if it exited. */
  workloadExitCode: number | null;
}

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
