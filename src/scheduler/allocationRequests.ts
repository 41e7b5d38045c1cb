/**
 * What the front and the RunQueue object both ask of allocations, written
 * once: resolving a workload class of the manifest, the placement spec and
 * the admission limits that follow from it, creating an allocation, and
 * handing its guest a bootstrap payload through its Host (memory only).
 * Spec "Allocation lifecycle", "Admission and limits", "One allocation end
 * to end" step 5; issue 22 (a run's dispatch creates and feeds an
 * allocation exactly as a controller would).
 * Must never: persist a payload, or resolve an identity (callers pass the
 * authenticated one).
 */
import { BeachballError } from "../protocol/errors.ts";
import type { AllocationView, BootstrapBody, CreateAllocationBody } from "../protocol/api.ts";
import type { PlacementSpec } from "../protocol/agent.ts";
import { allocationIdFor } from "../domain/identifiers.ts";
import type { DeploymentManifest, WorkloadClass } from "./manifestSchema.ts";
import type { SchedulerEnv } from "./env.ts";
import type { AdmissionLimits } from "./objects/admissionObject.ts";

/** Most workload class names an UNKNOWN_WORKLOAD_CLASS detail lists (its `extra.knownClasses` has them all). */
export const KNOWN_CLASSES_IN_DETAIL = 20;
/** How long a delivery waits for the agent's acknowledgement, ms (spec: 30 s). */
export const DELIVERY_TIMEOUT_MS = 30_000;

/** The manifest's workload class `name`. Throws UNKNOWN_WORKLOAD_CLASS naming the known ones. */
export function workloadClassOf(manifest: DeploymentManifest, name: string): WorkloadClass {
  const cls = manifest.workloadClasses[name];
  if (cls) return cls;
  // The caller may see the class names (GET /v1/.well-known/beachball lists them too); the detail names the first few, extra all (at most MAX_WORKLOAD_CLASSES).
  const known = Object.keys(manifest.workloadClasses);
  const named =
    known.slice(0, KNOWN_CLASSES_IN_DETAIL).join(", ") +
    (known.length > KNOWN_CLASSES_IN_DETAIL ? ` and ${known.length - KNOWN_CLASSES_IN_DETAIL} more` : "");
  throw new BeachballError(
    "UNKNOWN_WORKLOAD_CLASS",
    `unknown workload class ${JSON.stringify(name)}; known classes: ${named || "none"}`,
    { knownClasses: known },
  );
}

/** The placement spec of a new allocation of class `cls`: its resources, image and snapshot flags. */
export function classSpec(cls: WorkloadClass): PlacementSpec {
  return {
    cpuMillis: cls.cpuMillis,
    memoryMiB: cls.memoryMiB,
    ephemeralDiskMiB: cls.ephemeralDiskMiB,
    imageDigest: cls.imageDigest,
    ...(cls.suspendable ? { suspendable: true } : {}),
    ...(cls.template ? { template: true } : {}),
  };
}

/** The admission limits of the manifest, with their defaults (docs/manifest.md). */
export function admissionLimits(manifest: DeploymentManifest): AdmissionLimits {
  const l = manifest.limits;
  return {
    perControllerConcurrent: l.maxConcurrentAllocationsPerController,
    perControllerRps: l.controllerRequestsPerSecond ?? 50,
    deploymentRps: l.deploymentRequestsPerSecond ?? 500,
    maxAllocations: l.maxAllocations ?? 10_000,
    maxRetained: l.maxRetainedAllocations ?? 100_000,
  };
}

/**
 * Creates (or replays) the allocation of `body` (of class `cls`) owned by
 * `identity`, with `spec` and the body digest `bodyDigest`; the TTL is the
 * body's (or the default) cut to the class's maxTtlSeconds. With a priced
 * class and an owner with a monthlyBudget, it reserves price × TTL of the
 * budget first. Throws what AllocationObject.create throws: QUOTA_*,
 * RATE_LIMITED, COST_LIMIT_EXCEEDED,
 * IDEMPOTENCY_CONFLICT, OBJECT_DAMAGED.
 */
export function createAllocationOf(
  env: SchedulerEnv,
  identity: string,
  body: CreateAllocationBody,
  cls: WorkloadClass,
  bodyDigest: string,
  spec: PlacementSpec,
): Promise<{ created: boolean; view: AllocationView }> {
  const allocationId = allocationIdFor(identity, body.clientRequestId);
  const ttlSeconds = Math.min(
    body.ttlSeconds ?? Math.floor(env.config.timeouts.defaultTtlMs / 1000),
    cls.maxTtlSeconds ?? Number.MAX_SAFE_INTEGER,
  );
  const budget = env.config.manifest.principals.find((p) => p.id === identity)?.monthlyBudget;
  const cost =
    budget !== undefined && cls.pricePerHour !== undefined
      ? {
          reservedMicros: Math.round((cls.pricePerHour * 1e6 * ttlSeconds) / 3600),
          budgetMicros: Math.round(budget * 1e6),
        }
      : undefined;
  // One call: the Allocation asks Admission itself (one output gate per create, not three).
  return env.Allocation.get(allocationId).create({
    allocationId,
    identity,
    body,
    bodyDigest,
    spec,
    ttlMs: ttlSeconds * 1000,
    limits: admissionLimits(env.config.manifest),
    ...(cost ? { cost } : {}),
  });
}

/**
 * Hands the payload of `body` (its decoded bytes' SHA-256 is `digest`) to
 * the guest of `identity`'s allocation `allocationId` through its Host, in
 * memory only, and resolves once the agent reports it consumed; a repeated
 * deliveryId with the same payload answers `replayed`. Throws
 * STALE_GENERATION / DELIVERY_CONFLICT (409), GUEST_NOT_CONNECTED /
 * DELIVERY_TIMEOUT (503), NOT_FOUND.
 */
export async function deliverPayload(
  env: SchedulerEnv,
  identity: string,
  allocationId: string,
  body: BootstrapBody,
  digest: string,
): Promise<{ deliveryId: string; digest: string; replayed: boolean }> {
  const target = await env.Allocation.get(allocationId).deliveryTarget(identity, body.generation);
  const host = env.Host.get(target.hostId);
  const check = await host.checkDelivery(body.deliveryId, target.placementId, body.generation);
  if (check.earlierDigest) {
    if (check.earlierDigest !== digest)
      throw new BeachballError("DELIVERY_CONFLICT", "deliveryId was used with a different payload");
    return { deliveryId: body.deliveryId, digest, replayed: true };
  }
  const outcome = await host.deliver(
    {
      deliveryId: body.deliveryId,
      allocationId: target.allocationId,
      placementId: target.placementId,
      generation: body.generation,
      contentType: body.contentType,
      payloadBase64: body.payloadBase64,
    },
    DELIVERY_TIMEOUT_MS,
  );
  if (outcome.result === "consumed") {
    if (outcome.digest !== digest)
      throw new BeachballError("DELIVERY_CONFLICT", "the guest consumed a payload with another digest");
    return { deliveryId: body.deliveryId, digest, replayed: false };
  }
  if (outcome.result === "timeout")
    throw new BeachballError("DELIVERY_TIMEOUT", "the agent did not confirm the delivery within 30 s", {
      retryAfterSeconds: 5,
    });
  if (outcome.result === "guest_not_connected")
    throw new BeachballError("GUEST_NOT_CONNECTED", "the guest is not connected", { retryAfterSeconds: 2 });
  throw new BeachballError(
    "DELIVERY_CONFLICT",
    "the guest rejected the delivery (a payload was already consumed or the content type is unsupported)",
  );
}
