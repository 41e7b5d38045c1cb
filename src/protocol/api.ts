/**
 * Public API bodies (TypeBox), shared by the scheduler's routes and the CLI.
 *
 * Owns: request/response shapes and their bounds. Every object schema rejects
 * unknown fields (`additionalProperties: false`). Spec: "Allocation
 * lifecycle", "One allocation end to end", "Enrollment".
 */
import { AGENT_PROTOCOL_VERSION, SUPPORTED_ARCHITECTURE } from "./platform.ts";
import { Type, type Static, type TSchema } from "@sinclair/typebox";
import { MAX_CONSOLE_TAIL_CHARS, VM_EXIT_REASONS } from "./vmExit.ts";

/** Largest bootstrap payload accepted, in bytes (before base64). */
export const MAX_PAYLOAD_BYTES = 256 * 1024;
/** Largest request body of the bootstrap route (the base64 payload plus its envelope), in bytes; over it is 413 PAYLOAD_TOO_LARGE. */
export const MAX_REQUEST_BODY_BYTES = 512 * 1024;
/** Largest request body of every other public route with a JSON body (create, enroll, tokens, …), in bytes; over it is 413 BODY_TOO_LARGE. */
export const MAX_API_BODY_BYTES = 64 * 1024;
/** Largest body a route without one tolerates (and ignores), in bytes; over it is 413 BODY_TOO_LARGE. */
export const MAX_IGNORED_BODY_BYTES = 1024;
/** Page size bound for list and events routes. */
export const MAX_PAGE_SIZE = 200;
/** Largest integer any body field or query parameter accepts (2^53 - 1: exact in JSON numbers and SQLite). */
export const MAX_WIRE_INTEGER = Number.MAX_SAFE_INTEGER;

/** Most labels on one allocation or host. */
export const MAX_LABELS = 32;
/** Longest label key, in characters (a DNS label: RFC 1123, as Kubernetes label names). */
export const MAX_LABEL_KEY_CHARS = 63;
/** Longest label value, in characters. */
export const MAX_LABEL_VALUE_CHARS = 256;
/** A label key: lower-case letters, digits, `.`, `_`, `-`; starts and ends with a letter or digit; at most 63 characters. */
export const LABEL_KEY_PATTERN = "^[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?$";
/** A label value: printable ASCII (no control characters), at most 256 characters. */
export const LABEL_VALUE_PATTERN = "^[\\x20-\\x7e]*$";

/** An identifier field of a body: 1..`maxLength` characters of `[A-Za-z0-9._:-]`, starting with a letter or digit. */
export const Ident = (maxLength: number, description?: string) =>
  Type.String({
    minLength: 1,
    maxLength,
    pattern: "^[A-Za-z0-9][A-Za-z0-9._:-]*$",
    ...(description ? { description } : {}),
  });

/**
 * A record (JSON object used as a map) whose keys must match `keyPattern`:
 * closed, so a key outside the pattern is an error rather than an
 * unchecked extra property (TypeBox's plain Record leaves such keys
 * unvalidated), with at most `maxEntries` entries. Every record-typed field
 * of a request body is built with this.
 */
export function ClosedRecord<V extends TSchema>(keyPattern: string, value: V, maxEntries: number) {
  return Type.Record(Type.String({ pattern: keyPattern }), value, {
    maxProperties: maxEntries,
    additionalProperties: false,
  });
}

/** Labels of an allocation or a host: at most MAX_LABELS entries, keys and values per LABEL_KEY_PATTERN and LABEL_VALUE_PATTERN. */
export const Labels = ClosedRecord(
  LABEL_KEY_PATTERN,
  Type.String({ maxLength: MAX_LABEL_VALUE_CHARS, pattern: LABEL_VALUE_PATTERN }),
  MAX_LABELS,
);

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

/** An allocation's requested lifetime, seconds (10 s to 7 days; the class's maxTtlSeconds caps it). */
const TtlSeconds = (description: string) => Type.Integer({ minimum: 10, maximum: 7 * 24 * 3600, description });

/** POST /v1/allocations body. */
export const CreateAllocationBody = Type.Object(
  {
    clientRequestId: Ident(
      128,
      "idempotency key: the same key and body answer the same allocation; another body is 422 IDEMPOTENCY_CONFLICT",
    ),
    workloadClass: Ident(64, "a class from the deployment manifest (GET /v1/.well-known/beachball lists them)"),
    labels: Type.Optional(Labels),
    /** Lifetime in seconds after which the allocation is released; capped by policy. */
    ttlSeconds: Type.Optional(
      TtlSeconds("seconds until the allocation is released; capped by the class's maxTtlSeconds"),
    ),
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

/** A VM of the allocation that ended on its own, as its agent diagnosed it (from the `placement.error` event that carried it). */
export const PlacementExitView = Type.Object(
  {
    generation: Type.Integer({ minimum: 1 }),
    placementId: Type.Union([Type.String({ maxLength: 200 }), Type.Null()]),
    reason: Type.Union(VM_EXIT_REASONS.map((r) => Type.Literal(r))),
    /** The redacted kernel lines of its console. */
    consoleTail: Type.String({ maxLength: MAX_CONSOLE_TAIL_CHARS }),
    /** When the scheduler recorded it (ISO 8601). */
    at: Type.String({ maxLength: 40 }),
  },
  { additionalProperties: false },
);
/** A diagnosed VM exit as the allocation view shows it. */
export type PlacementExitView = Static<typeof PlacementExitView>;

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
    resources: Type.Object(
      { cpuMillis: Type.Integer(), memoryMiB: Type.Integer(), ephemeralDiskMiB: Type.Integer() },
      { additionalProperties: false },
    ),
    imageDigest: Type.String(),
    labels: Type.Record(Type.String(), Type.String(), { maxProperties: 32 }),
    createdAt: Type.String(),
    updatedAt: Type.String(),
    expiresAt: Type.String(),
    /** Exit code the guest reported for the bootstrap workload, if it exited. */
    workloadExitCode: Type.Union([Type.Integer(), Type.Null()]),
    /** The latest placement attempt (null before the first). */
    placement: Type.Union([PlacementOutcome, Type.Null()]),
    /** The last VM of this allocation that ended on its own (KERNEL_PANIC, GUEST_OOM, …) with its console tail; null or absent: none did. */
    placementExit: Type.Optional(Type.Union([PlacementExitView, Type.Null()])),
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

/** Most forks one fork request makes (issue 21, "Fork"). */
export const MAX_FORKS_PER_REQUEST = 8;
/** Longest clientRequestId of a fork request: a fork's own is `<it>:fork:<index>`, within the 128 of a create. */
export const MAX_FORK_REQUEST_ID_CHARS = 118;

/**
 * POST /v1/allocations/{id}/fork body (issue 21, "Fork"): `count` new
 * allocations restored from the suspended allocation's snapshot, each with
 * its own identity, private address and lifetime. Idempotent by
 * clientRequestId: fork `i` is the allocation of clientRequestId
 * `<clientRequestId>:fork:<i>`; the same key with another body is 422
 * IDEMPOTENCY_CONFLICT.
 */
export const ForkAllocationBody = Type.Object(
  {
    clientRequestId: Ident(
      MAX_FORK_REQUEST_ID_CHARS,
      "idempotency key of the fork request: fork i is the allocation of clientRequestId <it>:fork:<i>",
    ),
    count: Type.Integer({
      minimum: 1,
      maximum: MAX_FORKS_PER_REQUEST,
      description: "how many forks to make, each on the parent's host",
    }),
    allowConsumedPayload: Type.Optional(
      Type.Boolean({
        description:
          "fork although the parent consumed a bootstrap payload (every fork holds what it gave the parent; each may take a payload of its own); without it such a fork is 409 PAYLOAD_CONSUMED",
      }),
    ),
    labels: Type.Optional(Labels),
    ttlSeconds: Type.Optional(TtlSeconds("seconds until each fork is released; capped by the class's maxTtlSeconds")),
  },
  { additionalProperties: false },
);
/** POST /v1/allocations/{id}/fork body. */
export type ForkAllocationBody = Static<typeof ForkAllocationBody>;

/** POST /v1/allocations/{id}/bootstrap body. The payload is held in memory only. */
export const BootstrapBody = Type.Object(
  {
    deliveryId: Ident(128, "idempotency key of the delivery: repeating it with the same payload answers replayed"),
    generation: Type.Integer({
      minimum: 1,
      maximum: MAX_WIRE_INTEGER,
      description: "the allocation's current generation (409 STALE_GENERATION otherwise)",
    }),
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
/** POST /v1/hosts/{id}/enrollment-tokens body. */
export type EnrollmentTokenBody = Static<typeof EnrollmentTokenBody>;

/** POST /v1/allocations/{id}/replacement-authorizations body: the generation whose external authority was revoked. */
export const ReplacementAuthorizationBody = Type.Object(
  { generation: Type.Integer({ minimum: 1, maximum: MAX_WIRE_INTEGER }) },
  { additionalProperties: false },
);
/** POST /v1/allocations/{id}/replacement-authorizations body. */
export type ReplacementAuthorizationBody = Static<typeof ReplacementAuthorizationBody>;

/** POST /v1/agents/enroll body. */
export const EnrollBody = Type.Object(
  {
    token: Type.String({ minLength: 10, maxLength: 256 }),
    capacity: Capacity,
    reserve: Type.Optional(Capacity),
    region: Ident(64),
    architecture: Type.Literal(SUPPORTED_ARCHITECTURE),
    labels: Type.Optional(Labels),
    agentProtocolVersion: Type.Literal(AGENT_PROTOCOL_VERSION),
    vmmDriver: Ident(32),
  },
  { additionalProperties: false },
);
/** POST /v1/agents/enroll body. */
export type EnrollBody = Static<typeof EnrollBody>;

/** GET /v1/.well-known/beachball response. */
export interface WellKnown {
  apiVersion: "v1";
  agentProtocolVersion: typeof AGENT_PROTOCOL_VERSION;
  region: string;
  workloadClasses: string[];
  /** With private networking: key ID → base64 Ed25519 public key that grants, relay maps and relay tokens verify with. */
  connectionVerificationKeys?: Record<string, string>;
}
