/**
 * How an Allocation object's stored rows read through the API: the
 * allocation view (with the CLEANUP_PENDING condition derived while a
 * failed placement is being cleaned up) and events with the spec's
 * correlation fields. Pure.
 */
import type { AllocationEvent, AllocationView } from "../../protocol/api.ts";
import type { PlacementSpec } from "../../protocol/agent.ts";
import type { allocationTable, eventTable } from "./allocationSchema.ts";

type Row = typeof allocationTable.$inferSelect;
type EventRow = typeof eventTable.$inferSelect;

/** The API view of an allocation row. */
export function toAllocationView(r: Row): AllocationView {
  const spec = JSON.parse(r.specJson) as PlacementSpec;
  const conditions = JSON.parse(r.conditionsJson) as string[];
  if (r.state === "releasing" && r.observedState === "error") conditions.push("CLEANUP_PENDING");
  return {
    allocationId: r.allocationId,
    clientRequestId: r.clientRequestId,
    workloadClass: r.workloadClass,
    state: r.state,
    generation: r.generation,
    hostId: r.hostId,
    placementId: r.placementId,
    reason: r.reason,
    conditions,
    resources: { cpuMillis: spec.cpuMillis, memoryMiB: spec.memoryMiB, ephemeralDiskMiB: spec.ephemeralDiskMiB },
    imageDigest: spec.imageDigest,
    labels: JSON.parse(r.labelsJson) as Record<string, string>,
    createdAt: new Date(r.createdAtMs).toISOString(),
    updatedAt: new Date(r.updatedAtMs).toISOString(),
    expiresAt: new Date(r.expiresAtMs).toISOString(),
    workloadExitCode: r.workloadExitCode,
  };
}

/** The API view of one event row of allocation `r` (client and correlation IDs come from the allocation). */
export function toAllocationEvent(e: EventRow, r: Row): AllocationEvent {
  return {
    seq: e.seq,
    eventId: e.eventId,
    type: e.type,
    at: new Date(e.atMs).toISOString(),
    allocationId: r.allocationId,
    generation: e.generation,
    placementId: e.placementId,
    hostId: e.hostId,
    fromState: e.fromState,
    toState: e.toState,
    reason: e.reason,
    clientId: r.identity,
    correlationId: r.clientRequestId,
    ...(e.dataJson ? { data: JSON.parse(e.dataJson) as Record<string, unknown> } : {}),
  };
}
