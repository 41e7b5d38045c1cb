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

/** Most workload classes one manifest declares. */
export const MAX_WORKLOAD_CLASSES = 256;

const Digest = Type.String({ pattern: "^[0-9a-f]{64}$" });

/** A workload class: the resources and image one allocation of it gets. */
export const WorkloadClass = Type.Object(
  {
    cpuMillis: Type.Integer({ minimum: 100, maximum: 64_000 }),
    memoryMiB: Type.Integer({ minimum: 64, maximum: 256 * 1024 }),
    ephemeralDiskMiB: Type.Integer({ minimum: 64, maximum: 1024 * 1024 }),
    imageDigest: Type.String({ pattern: "^sha256:[0-9a-f]{64}$" }),
    maxTtlSeconds: Type.Optional(Type.Integer({ minimum: 10 })),
  },
  { additionalProperties: false },
);
/** A workload class. */
export type WorkloadClass = Static<typeof WorkloadClass>;

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
        },
        { additionalProperties: false },
      ),
      { maxItems: 1024 },
    ),
    workloadClasses: ClosedRecord("^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", WorkloadClass, MAX_WORKLOAD_CLASSES),
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
      },
      { additionalProperties: false },
    ),
    hostEnrollment: Type.Object({ autoActivate: Type.Boolean() }, { additionalProperties: false }),
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

