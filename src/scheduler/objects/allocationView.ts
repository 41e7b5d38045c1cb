/**
 * How an Allocation reads through the API: the view of its decoded row
 * (allocationRow.ts; with CLEANUP_PENDING derived while a failed placement
 * is cleaned up, and the last VM exit its events recorded) and its events
 * with the spec's correlation fields. Pure.
 * Must never: decode or encode a row (allocationRow.ts is the one codec).
 */
import type { AllocationEvent, AllocationView, PlacementExitView } from "../../protocol/api.ts";
import type { AllocationRecord } from "../../domain/reconcile.ts";
import { DamagedStateError } from "../runtime/faults.ts";
import type { allocationEventTable } from "./allocationSchema.ts";
import type { StoredAllocation } from "./allocationRow.ts";

type EventRow = typeof allocationEventTable.$inferSelect;

/** The API view of a stored allocation. */
export function toAllocationView(s: StoredAllocation, exit: PlacementExitView | null = null): AllocationView {
  const r = s.rec;
  const conditions = [...r.conditions];
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
    resources: { cpuMillis: s.spec.cpuMillis, memoryMiB: s.spec.memoryMiB, ephemeralDiskMiB: s.spec.ephemeralDiskMiB },
    imageDigest: s.spec.imageDigest,
    labels: s.labels,
    createdAt: new Date(r.createdAtMs).toISOString(),
    updatedAt: new Date(r.updatedAtMs).toISOString(),
    expiresAt: new Date(r.expiresAtMs).toISOString(),
    workloadExitCode: r.workloadExitCode,
    placement: r.placement,
    placementExit: exit,
  };
}

/** The diagnosed VM exit a `placement.error` event row carries (data.exitReason and data.consoleTail), or null. */
export function placementExitOf(
  e: Pick<EventRow, "generation" | "placementId" | "atMs" | "dataJson"> | undefined,
): PlacementExitView | null {
  if (!e?.dataJson) return null;
  const d = JSON.parse(e.dataJson) as { exitReason?: PlacementExitView["reason"]; consoleTail?: string };
  if (!d.exitReason) return null;
  return {
    generation: e.generation,
    placementId: e.placementId,
    reason: d.exitReason,
    consoleTail: d.consoleTail ?? "",
    at: new Date(e.atMs).toISOString(),
  };
}

/** The API view of one event row of allocation `r` (client and correlation IDs come from the allocation). */
export function toAllocationEvent(e: EventRow, r: AllocationRecord): AllocationEvent {
  let data: Record<string, unknown> | undefined;
  if (e.dataJson) {
    try {
      const v: unknown = JSON.parse(e.dataJson);
      if (v !== null && typeof v === "object" && !Array.isArray(v)) data = v as Record<string, unknown>;
    } catch {
      throw new DamagedStateError(`allocation ${r.allocationId}: event ${e.seq} data is not JSON`);
    }
  }
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
    ...(data ? { data } : {}),
  };
}
