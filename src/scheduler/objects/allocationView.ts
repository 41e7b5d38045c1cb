/**
 * How an Allocation's stored row decodes into the domain record (with its
 * checks: a row that fails them is damaged state, never a fresh start) and
 * how the record reads through the API: the view (with CLEANUP_PENDING
 * derived while a failed placement is cleaned up) and events with the
 * spec's correlation fields. Pure.
 */
import { Type, type TSchema } from "@sinclair/typebox";
import { checkerOf } from "../runtime/check.ts";
import {
  ALLOCATION_STATES,
  PlacementOutcome,
  type AllocationEvent,
  type AllocationView,
  type PlacementExitView,
} from "../../protocol/api.ts";
import { PlacementSpec, PLACEMENT_OBSERVED_STATES } from "../../protocol/agent.ts";
import type { AllocationRecord } from "../../domain/reconcile.ts";
import { DamagedStateError } from "../runtime/faults.ts";
import type { allocationEventTable, allocationTable } from "./allocationSchema.ts";

/** A stored allocation row. */
export type AllocationRow = typeof allocationTable.$inferSelect;
type EventRow = typeof allocationEventTable.$inferSelect;

/** The decoded row: the record the rules take, plus what only the view and create need. */
export interface StoredAllocation {
  rec: AllocationRecord;
  spec: PlacementSpec;
  labels: Record<string, string>;
  bodyDigest: string;
}

const StringList = Type.Array(Type.String({ maxLength: 200 }), { maxItems: 64 });
const Labels = Type.Record(Type.String(), Type.String(), { maxProperties: 64 });
const STATES: ReadonlySet<string> = new Set(ALLOCATION_STATES);
const OBSERVED: ReadonlySet<string> = new Set(PLACEMENT_OBSERVED_STATES);

function json<T>(text: string | null, schema: TSchema, what: string, id: string): T {
  let v: unknown;
  try {
    v = JSON.parse(text ?? "null");
  } catch {
    throw new DamagedStateError(`allocation ${id}: ${what} is not JSON`);
  }
  if (!checkerOf(schema)(v)) throw new DamagedStateError(`allocation ${id}: ${what} does not match its schema`);
  return v as T;
}

/** Decodes and checks a stored row. Throws DamagedStateError naming what is wrong. */
export function decodeAllocation(r: AllocationRow): StoredAllocation {
  const id = r.obj;
  if (!STATES.has(r.state)) throw new DamagedStateError(`allocation ${id}: unknown state ${JSON.stringify(r.state)}`);
  if (r.desired !== "ready" && r.desired !== "released")
    throw new DamagedStateError(`allocation ${id}: unknown desired state`);
  if (r.observedState !== null && !OBSERVED.has(r.observedState))
    throw new DamagedStateError(`allocation ${id}: unknown observed state`);
  const rec: AllocationRecord = {
    allocationId: id,
    identity: r.identity,
    clientRequestId: r.clientRequestId,
    workloadClass: r.workloadClass,
    state: r.state,
    desired: r.desired,
    generation: r.generation,
    attempts: r.attempts,
    hostId: r.hostId,
    placementId: r.placementId,
    reservationKey: r.reservationKey,
    observedState: r.observedState as AllocationRecord["observedState"],
    reason: r.reason,
    conditions: json(r.conditionsJson, StringList, "conditions", id),
    triedHosts: json(r.triedHostsJson, StringList, "tried hosts", id),
    nextAttemptAtMs: r.nextAttemptAtMs,
    guestReady: r.guestReady,
    payloadConsumed: r.payloadConsumed,
    replaceAfterAbsent: r.replaceAfterAbsent,
    workloadExitCode: r.workloadExitCode,
    createdAtMs: r.createdAtMs,
    updatedAtMs: r.updatedAtMs,
    stateEnteredAtMs: r.stateEnteredAtMs,
    expiresAtMs: r.expiresAtMs,
    replacementAuthorized: r.replacementAuthorized,
    hostCheckAtMs: r.hostCheckAtMs,
    terminalAtMs: r.terminalAtMs,
    placement: r.placementJson === null ? null : json(r.placementJson, PlacementOutcome, "placement outcome", id),
    networkId: r.networkId,
    address: r.address,
    grantGeneration: r.grantGeneration,
    connectionsFencedGeneration: r.connectionsFencedGeneration,
    pendingReplacement: r.pendingReplacement,
  };
  return {
    rec,
    spec: json(r.specJson, PlacementSpec, "spec", id),
    labels: json(r.labelsJson, Labels, "labels", id),
    bodyDigest: r.bodyDigest,
  };
}

/** The row that stores `s` (the inverse of decodeAllocation). */
export function encodeAllocation(s: StoredAllocation): AllocationRow {
  const r = s.rec;
  return {
    obj: r.allocationId,
    identity: r.identity,
    clientRequestId: r.clientRequestId,
    bodyDigest: s.bodyDigest,
    workloadClass: r.workloadClass,
    specJson: JSON.stringify(s.spec),
    labelsJson: JSON.stringify(s.labels),
    state: r.state,
    desired: r.desired,
    generation: r.generation,
    attempts: r.attempts,
    hostId: r.hostId,
    placementId: r.placementId,
    reservationKey: r.reservationKey,
    observedState: r.observedState,
    reason: r.reason,
    conditionsJson: JSON.stringify(r.conditions),
    triedHostsJson: JSON.stringify(r.triedHosts),
    nextAttemptAtMs: r.nextAttemptAtMs,
    guestReady: r.guestReady,
    payloadConsumed: r.payloadConsumed,
    replaceAfterAbsent: r.replaceAfterAbsent,
    workloadExitCode: r.workloadExitCode,
    createdAtMs: r.createdAtMs,
    updatedAtMs: r.updatedAtMs,
    stateEnteredAtMs: r.stateEnteredAtMs,
    expiresAtMs: r.expiresAtMs,
    replacementAuthorized: r.replacementAuthorized,
    hostCheckAtMs: r.hostCheckAtMs,
    terminalAtMs: r.terminalAtMs,
    placementJson: r.placement ? JSON.stringify(r.placement) : null,
    networkId: r.networkId,
    address: r.address,
    grantGeneration: r.grantGeneration,
    connectionsFencedGeneration: r.connectionsFencedGeneration,
    pendingReplacement: r.pendingReplacement,
  };
}

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
