/**
 * Leases (issue 22, "Leases"): an allocation held for a person or a tool,
 * until its TTL or an idle timeout after its last activity, shared with
 * named principals. docs/leases.md.
 * Owns: request/response shapes and their bounds. Pure shapes.
 */
import { Type, type Static } from "@sinclair/typebox";
import { Ident, Labels } from "./api.ts";

/** A principal ID as the manifest writes it. */
export const PRINCIPAL_ID_PATTERN = "^[a-z0-9:._-]{1,64}$";
/** Lease TTL bounds, seconds (10 s to 7 days; the class's maxTtlSeconds caps it). */
export const LEASE_TTL_SECONDS = { min: 10, max: 7 * 24 * 3600 } as const;
/** Idle timeout bounds, seconds. */
export const LEASE_IDLE_SECONDS = { min: 1, max: 7 * 24 * 3600 } as const;
/** Most principals one lease is shared with. */
export const MAX_LEASE_SHARES = 32;
/** How long before its end a lease says it is expiring soon, at most, ms (and at most a tenth of its idle timeout or TTL). */
export const LEASE_EXPIRING_SOON_MS = 5 * 60_000;

/** Lease states: active until released or expired. */
export const LEASE_STATES = ["active", "expired", "released"] as const;
/** One lease state. */
export type LeaseState = (typeof LEASE_STATES)[number];
/** What a principal the lease is shared with may do: read (see it) or use (see it, heartbeat and extend it). */
export const LEASE_ACCESS = ["read", "use"] as const;
/** One kind of access. */
export type LeaseAccess = (typeof LEASE_ACCESS)[number];

/** POST /v1/leases body; idempotent by clientRequestId. */
export const CreateLeaseBody = Type.Object(
  {
    clientRequestId: Ident(128, "idempotency key: the same key and body answer the same lease"),
    workloadClass: Ident(64, "a class from the deployment manifest"),
    ttlSeconds: Type.Integer({
      minimum: LEASE_TTL_SECONDS.min,
      maximum: LEASE_TTL_SECONDS.max,
      description: "the lease ends this long after it is made (extend moves it)",
    }),
    idleSeconds: Type.Optional(
      Type.Integer({
        minimum: LEASE_IDLE_SECONDS.min,
        maximum: LEASE_IDLE_SECONDS.max,
        description: "the lease ends this long after its last activity",
      }),
    ),
    labels: Type.Optional(Labels),
  },
  { additionalProperties: false },
);
/** POST /v1/leases body. */
export type CreateLeaseBody = Static<typeof CreateLeaseBody>;

/** POST /v1/leases/{id}/extend body: the lease now ends ttlSeconds from now (never past its VM's own lifetime). */
export const ExtendLeaseBody = Type.Object(
  { ttlSeconds: Type.Integer({ minimum: LEASE_TTL_SECONDS.min, maximum: LEASE_TTL_SECONDS.max }) },
  { additionalProperties: false },
);
/** POST /v1/leases/{id}/extend body. */
export type ExtendLeaseBody = Static<typeof ExtendLeaseBody>;

/** POST /v1/leases/{id}/shares body. */
export const ShareLeaseBody = Type.Object(
  {
    principal: Type.String({ pattern: PRINCIPAL_ID_PATTERN, description: "a principal ID of the manifest" }),
    access: Type.Union(LEASE_ACCESS.map((a) => Type.Literal(a))),
  },
  { additionalProperties: false },
);
/** POST /v1/leases/{id}/shares body. */
export type ShareLeaseBody = Static<typeof ShareLeaseBody>;

/** POST /v1/leases/{id}/unshare body. */
export const UnshareLeaseBody = Type.Object(
  { principal: Type.String({ pattern: PRINCIPAL_ID_PATTERN }) },
  { additionalProperties: false },
);
/** POST /v1/leases/{id}/unshare body. */
export type UnshareLeaseBody = Static<typeof UnshareLeaseBody>;

const At = Type.Union([Type.String({ maxLength: 40 }), Type.Null()]);

/** A lease as the API shows it. */
export const LeaseView = Type.Object(
  {
    leaseId: Type.String({ maxLength: 64 }),
    clientRequestId: Type.String({ maxLength: 128 }),
    workloadClass: Type.String({ maxLength: 64 }),
    owner: Type.String({ maxLength: 64 }),
    /** What the caller may do: owner, use or read. */
    access: Type.Union([Type.Literal("owner"), ...LEASE_ACCESS.map((a) => Type.Literal(a))]),
    state: Type.Union(LEASE_STATES.map((s) => Type.Literal(s))),
    /** Why it ended: TTL_EXPIRED, IDLE_EXPIRED, RELEASED, VM_ENDED. */
    reason: Type.Union([Type.String({ maxLength: 40 }), Type.Null()]),
    allocationId: Type.String({ maxLength: 64 }),
    labels: Type.Record(Type.String(), Type.String(), { maxProperties: 32 }),
    createdAt: Type.String({ maxLength: 40 }),
    expiresAt: Type.String({ maxLength: 40 }),
    idleSeconds: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]),
    lastActivityAt: Type.String({ maxLength: 40 }),
    /** When it ends unless there is activity first (null without an idle timeout). */
    idleExpiresAt: At,
    endedAt: At,
    shares: Type.Record(Type.String(), Type.Union(LEASE_ACCESS.map((a) => Type.Literal(a))), { maxProperties: 32 }),
  },
  { additionalProperties: false },
);
/** A lease as the API shows it. */
export type LeaseView = Static<typeof LeaseView>;

/** GET /v1/leases answer: the caller's own and shared leases, newest first. */
export const LeasePage = Type.Object(
  { items: Type.Array(LeaseView, { maxItems: 200 }) },
  { additionalProperties: false },
);
/** GET /v1/leases answer. */
export type LeasePage = Static<typeof LeasePage>;

/** One lease event: lease.created, lease.extended, lease.shared, lease.unshared, lease.expiring_soon, lease.expired, lease.released. */
export const LeaseEvent = Type.Object(
  {
    seq: Type.Integer({ minimum: 1 }),
    type: Type.String({ maxLength: 40 }),
    at: Type.String({ maxLength: 40 }),
    leaseId: Type.String({ maxLength: 64 }),
    data: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { maxProperties: 16 })),
  },
  { additionalProperties: false },
);
/** One lease event. */
export type LeaseEvent = Static<typeof LeaseEvent>;

/** GET /v1/leases/{id}/events answer. */
export const LeaseEventPage = Type.Object(
  { items: Type.Array(LeaseEvent, { maxItems: 200 }) },
  { additionalProperties: false },
);
/** GET /v1/leases/{id}/events answer. */
export type LeaseEventPage = Static<typeof LeaseEventPage>;
