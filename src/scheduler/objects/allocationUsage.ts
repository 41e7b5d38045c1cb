/**
 * What a change of an allocation tells the objects that follow it by
 * message (issue 22): Usage (its VM's running time) and, for a lease's
 * allocation, the Leases object (activity, its end). Posted inside the
 * change's transaction, so they are never ahead of the allocation's events.
 */
import type { ObjectState } from "../runtime/api.ts";
import type { Change } from "../../domain/reconcile.ts";
import { leaseOfAllocation } from "../../domain/identifiers.ts";
import { GLOBAL, type SchedulerEnv } from "../env.ts";
import type { StoredAllocation } from "./allocationRow.ts";
import type { AllocationMessage } from "./messages.ts";

/**
 * Usage's intervals (issue 22): a generation's VM counts from the event
 * that records it observed running to the one that records it observed
 * absent or suspended, or to the allocation ending (fenced). Each message is
 * deduplicated by its ID; Usage keeps the first start and the first end.
 */
export function postUsage(
  state: ObjectState<AllocationMessage>,
  env: SchedulerEnv,
  s: StoredAllocation,
  c: Change,
  now: number,
  lastSeq: number,
): void {
  const r = s.rec;
  const key = `use:${r.allocationId}:${r.generation}`;
  for (const e of c.events) {
    if (e.type === "placement.running" && r.hostId)
      state.post(env.Usage, GLOBAL, `${key}:start`, {
        kind: "vm_started",
        allocationId: r.allocationId,
        generation: r.generation,
        tenant: r.identity,
        workloadClass: r.workloadClass,
        hostId: r.hostId,
        cpuMillis: s.spec.cpuMillis,
        memoryMiB: s.spec.memoryMiB,
        atMs: now,
      });
    // Absent, or suspended (its memory and state went to disk; a resume starts the next generation's interval).
    if (e.type === "placement.absent" || e.type === "placement.suspended")
      state.post(env.Usage, GLOBAL, `${key}:end:${lastSeq}`, {
        kind: "vm_ended",
        allocationId: r.allocationId,
        generation: r.generation,
        atMs: now,
      });
  }
  if (c.terminal)
    state.post(env.Usage, GLOBAL, `${key}:terminal`, {
      kind: "vm_ended",
      allocationId: r.allocationId,
      generation: r.generation,
      atMs: now,
      terminal: true,
    });
}

/** A lease's VM (issue 22): a connection grant issued for it is activity; its end ends the lease. */
export function postLease(
  state: ObjectState<AllocationMessage>,
  env: SchedulerEnv,
  s: StoredAllocation,
  c: Change,
  now: number,
  lastSeq: number,
): void {
  const r = s.rec;
  if (leaseOfAllocation(r.clientRequestId) === null) return;
  if (c.events.some((e) => e.type === "connection.granted"))
    state.post(env.Leases, GLOBAL, `lease:${r.allocationId}:activity:${lastSeq}`, {
      kind: "activity",
      allocationId: r.allocationId,
      atMs: now,
    });
  if (c.terminal)
    state.post(env.Leases, GLOBAL, `lease:${r.allocationId}:ended`, {
      kind: "allocation_ended",
      allocationId: r.allocationId,
      atMs: now,
    });
}
