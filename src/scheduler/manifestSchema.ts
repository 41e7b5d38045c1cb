/**
 * The deployment manifest's schema and the token-to-identity rule (spec
 * "Authentication and identity"), apart from file handling so every host
 * (workerd has no data directory) can use them: principals by token
 * digest, workload classes, limits, region. Unknown fields are rejected.
 * Must never: hold or log a raw token (only SHA-256 digests).
 */
import { Type, type Static } from "@sinclair/typebox";
import { createHash } from "node:crypto";
import { ClosedRecord } from "../protocol/api.ts";
import {
  GrantTransport,
  MAX_GRANT_TTL_SECONDS,
  MAX_RELAY_TOKEN_TTL_SECONDS,
  MAX_RELAYS,
  RelayEntry,
} from "../protocol/connection.ts";
import { MAX_STUN_SERVERS, StunServerText } from "../protocol/stunServers.ts";

/** Most workload classes one manifest declares. */
export const MAX_WORKLOAD_CLASSES = 256;

const Digest = Type.String({ pattern: "^[0-9a-f]{64}$" });

/** Longest architecture name a workload class may give, characters. */
export const MAX_ARCHITECTURE_CHARS = 32;
const ARCHITECTURE_PATTERN = "^[a-z0-9_]{1,32}$";

/** A workload class: the resources and image one allocation of it gets. */
export const WorkloadClass = Type.Object(
  {
    cpuMillis: Type.Integer({ minimum: 100, maximum: 64_000 }),
    memoryMiB: Type.Integer({ minimum: 64, maximum: 256 * 1024 }),
    ephemeralDiskMiB: Type.Integer({ minimum: 64, maximum: 1024 * 1024 }),
    imageDigest: Type.String({ pattern: "^sha256:[0-9a-f]{64}$" }),
    maxTtlSeconds: Type.Optional(Type.Integer({ minimum: 10 })),
    /** The machine architecture its VMs need (placement asks only hosts that report it; default SUPPORTED_ARCHITECTURE). */
    architecture: Type.Optional(Type.String({ pattern: ARCHITECTURE_PATTERN, maxLength: MAX_ARCHITECTURE_CHARS })),
    /**
     * Its VMs may be suspended (issue 21): each keeps its RAM in a file on the
     * host's disk, so its disk reservation grows by memoryMiB. Default false
     * (pause works either way).
     */
    suspendable: Type.Optional(Type.Boolean()),
    /**
     * Its VMs start warm from a template (issue 21, "Templates"; ADR 0182):
     * each host snapshots the image booted to GuestReady with no payload
     * once for the class's size, keeps it beside its image cache, and
     * restores it for every create instead of booting. Not together with
     * `suspendable` in this step (a VM restored from a template keeps its
     * memory private, so it cannot be suspended again). Default false.
     */
    template: Type.Optional(Type.Boolean()),
    /** Price of one VM of this class per hour, in the deployment's currency (issue 22, "Usage and cost"); with a principal's monthlyBudget, admission reserves price × lifetime. */
    pricePerHour: Type.Optional(Type.Number({ minimum: 0, maximum: 1_000_000 })),
  },
  { additionalProperties: false },
);
/** A workload class. */
export type WorkloadClass = Static<typeof WorkloadClass>;

/** Most destination port entries one grant policy lists. */
export const MAX_POLICY_PORT_ENTRIES = 32;
/** Most connection verification keys one manifest lists (the current key and those being rotated out). */
export const MAX_VERIFICATION_KEYS = 8;

const KEY_ID_PATTERN = "^[A-Za-z0-9._:-]{1,64}$";
const WORKLOAD_CLASS_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$";

/** What grants for one workload class may open: transports and destination ports ("22" or "8000-8100"). */
export const GrantPolicySchema = Type.Object(
  {
    transports: Type.Array(GrantTransport, { minItems: 1, maxItems: 2, uniqueItems: true }),
    ports: Type.Array(Type.String({ maxLength: 11, pattern: "^[0-9]{1,5}(-[0-9]{1,5})?$" }), {
      minItems: 1,
      maxItems: MAX_POLICY_PORT_ENTRIES,
    }),
  },
  { additionalProperties: false },
);

/**
 * Private networking (spec "Networks, addresses, and grants", "Packet
 * relays"): the deployment's ULA /48, the connection-signing key by
 * reference (a file the scheduler reads when it signs; never stored), the
 * verification keys clients and hosts trust, the relays with the limits
 * their tokens carry, and the grant policy. Absent: no private networking
 * (no addresses are reserved, grant requests are FORBIDDEN).
 */
export const ConnectionsSection = Type.Object(
  {
    /** A random RFC 4193 prefix, `fdxx:xxxx:xxxx::/48`. */
    ulaPrefix: Type.String({ minLength: 4, maxLength: 64 }),
    /** The Ed25519 connection-signing key: its key ID and the absolute path of a file (mode 0600) holding the base64 seed. */
    signingKey: Type.Object(
      {
        keyId: Type.String({ pattern: KEY_ID_PATTERN, maxLength: 64 }),
        file: Type.String({ minLength: 2, maxLength: 4096, pattern: "^/" }),
      },
      { additionalProperties: false },
    ),
    /** Key ID → base64 Ed25519 public key: what clients and hosts verify grants, relay maps and relay tokens with. Must include the signing key's. */
    verificationKeys: ClosedRecord(
      KEY_ID_PATTERN,
      Type.String({ maxLength: 44, pattern: "^[A-Za-z0-9+/]{43}=$" }),
      MAX_VERIFICATION_KEYS,
    ),
    relays: Type.Array(RelayEntry, { maxItems: MAX_RELAYS }),
    /** Limits every relay token carries (each relay also enforces its own caps). */
    relayLimits: Type.Object(
      {
        maxBytes: Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }),
        maxBytesPerSecond: Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }),
        idleTimeoutMs: Type.Integer({ minimum: 1000, maximum: 86_400_000 }),
      },
      { additionalProperties: false },
    ),
    /**
     * STUN servers, "IPv4:PORT" or "[IPv6]:PORT" (at most MAX_STUN_SERVERS):
     * handed to every `bb proxy` in its grant response, so a client behind
     * NAT learns its public mapping without configuring anything (default none).
     */
    stunServers: Type.Optional(Type.Array(StunServerText, { maxItems: MAX_STUN_SERVERS })),
    /** Relay-token lifetime, seconds (default 120, at most 300). */
    relayTokenTtlSeconds: Type.Optional(Type.Integer({ minimum: 30, maximum: MAX_RELAY_TOKEN_TTL_SECONDS })),
    grants: Type.Object(
      {
        /** Longest grant lifetime, seconds (at most 3600). */
        maxTtlSeconds: Type.Integer({ minimum: 30, maximum: MAX_GRANT_TTL_SECONDS }),
        /** Lifetime of a grant whose request names none, seconds (default: min(600, maxTtlSeconds)). */
        defaultTtlSeconds: Type.Optional(Type.Integer({ minimum: 30, maximum: MAX_GRANT_TTL_SECONDS })),
        /** Bumped by the operator whenever the policy changes; carried in every grant. */
        policyRevision: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }),
        /** The policy of a workload class not listed in `workloadClasses` (absent: such classes get no grant). */
        default: Type.Optional(GrantPolicySchema),
        /** Per workload class policies (each replaces the default for its class). */
        workloadClasses: Type.Optional(ClosedRecord(WORKLOAD_CLASS_PATTERN, GrantPolicySchema, MAX_WORKLOAD_CLASSES)),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);
/** The manifest's private-networking section. */
export type ConnectionsSection = Static<typeof ConnectionsSection>;

/** The manifest schema. */
export const DeploymentManifest = Type.Object(
  {
    version: Type.Literal(1),
    region: Type.String({ minLength: 1, maxLength: 64 }),
    principals: Type.Array(
      Type.Object(
        {
          id: Type.String({ minLength: 1, maxLength: 64, pattern: "^[a-z0-9:._-]+$" }),
          role: Type.Union([Type.Literal("controller"), Type.Literal("operator")]),
          tokenSha256: Digest,
          /** A controller's spending limit per calendar month (UTC), in the currency of the classes' pricePerHour: a create that would pass it is 429 COST_LIMIT_EXCEEDED (issue 22). */
          monthlyBudget: Type.Optional(Type.Number({ minimum: 0, maximum: 1e12 })),
        },
        { additionalProperties: false },
      ),
      { maxItems: 1024 },
    ),
    workloadClasses: ClosedRecord(WORKLOAD_CLASS_PATTERN, WorkloadClass, MAX_WORKLOAD_CLASSES),
    limits: Type.Object(
      {
        maxConcurrentAllocationsPerController: Type.Integer({ minimum: 1 }),
        maxRegisteredHosts: Type.Integer({ minimum: 1 }),
        /** Active hosts allowed at once (default: maxRegisteredHosts). */
        maxActiveHosts: Type.Optional(Type.Integer({ minimum: 1 })),
        /** Create requests per second per controller (default 50). */
        controllerRequestsPerSecond: Type.Optional(Type.Number({ exclusiveMinimum: 0 })),
        /** Create requests per second for the whole deployment (default 500). */
        deploymentRequestsPerSecond: Type.Optional(Type.Number({ exclusiveMinimum: 0 })),
        /** Non-terminal allocations across the deployment (default 10000). */
        maxAllocations: Type.Optional(Type.Integer({ minimum: 1 })),
        /** Allocation records kept, terminal ones included, until retention deletes them (default 100000). */
        maxRetainedAllocations: Type.Optional(Type.Integer({ minimum: 1 })),
        /** Days a terminal allocation is kept (default 7). */
        retentionDays: Type.Optional(Type.Integer({ minimum: 0, maximum: 3650 })),
        /** Active leases one controller may hold (default 50; past it 409 QUOTA_ACTIVE_LEASES; issue 22). */
        maxActiveLeasesPerController: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
        /** Runs executing at once across the deployment (default 4; issue 22). */
        maxActiveRuns: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
        /** Runs one controller may have waiting in the queue (default 1000; past it 429 QUOTA_QUEUED_RUNS). */
        maxQueuedRunsPerController: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000 })),
        /** Runs waiting in the queue for the whole deployment (default 10000; past it 429 QUOTA_QUEUED_RUNS). */
        maxQueuedRuns: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000_000 })),
      },
      { additionalProperties: false },
    ),
    hostEnrollment: Type.Object({ autoActivate: Type.Boolean() }, { additionalProperties: false }),
    connections: Type.Optional(ConnectionsSection),
  },
  { additionalProperties: false },
);
/** The deployment manifest. */
export type DeploymentManifest = Static<typeof DeploymentManifest>;

/** A principal resolved from a bearer token. */
export interface Identity {
  id: string;
  role: "controller" | "operator";
}

/** Hex SHA-256 of a token. */
export function tokenDigest(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

/** Resolves a bearer token to an identity by digest comparison, or null. */
export function identify(manifest: DeploymentManifest, token: string): Identity | null {
  const d = tokenDigest(token);
  const p = manifest.principals.find((x) => x.tokenSha256 === d);
  return p ? { id: p.id, role: p.role } : null;
}
