/**
 * Creating an allocation (spec "Allocation lifecycle", "Admission and
 * limits", "Idempotency"): a repeated create with the same body returns the
 * existing allocation (not admitted again), another body under the same
 * clientRequestId is IDEMPOTENCY_CONFLICT; otherwise Admission is asked,
 * the private address reserved in the owner's Network (with private
 * networking) before any host is chosen, and the new record (src/domain/
 * reconcile.ts, newAllocationRecord), its first event and its index view
 * written in one transaction.
 * Must never: start fresh for an allocation that admission and the index
 * both know but whose row is missing (that is damaged state), or admit a
 * replay again.
 */
import { BeachballError } from "../../protocol/errors.ts";
import type { AllocationView, CreateAllocationBody } from "../../protocol/api.ts";
import type { PlacementSpec } from "../../protocol/agent.ts";
import { defaultNetworkIdFor } from "../../domain/identifiers.ts";
import { newAllocationRecord, noChange } from "../../domain/reconcile.ts";
import { DamagedStateError } from "../runtime/faults.ts";
import { GLOBAL } from "../env.ts";
import type { AdmissionLimits } from "./admissionObject.ts";
import type { StoredAllocation } from "./allocationRow.ts";
import type { AllocationStore } from "./allocationStore.ts";

/** A create command, already authenticated and resolved against the workload class, with the admission limits that apply. */
export interface CreateCommand {
  allocationId: string;
  identity: string;
  body: CreateAllocationBody;
  bodyDigest: string;
  spec: PlacementSpec;
  ttlMs: number;
  limits: AdmissionLimits;
  /** With a priced class and an owner with a monthly budget: what this allocation reserves of it, micro-units (issue 22). */
  cost?: { reservedMicros: number; budgetMicros: number };
}

/** What create answers: whether this call created the allocation, and its view. */
export interface CreateResult {
  created: boolean;
  view: AllocationView;
}

/**
 * Admits and writes the allocation of `cmd`, or returns the existing one
 * for an identical body (see the module header); after a creation, runs
 * the first reconcile pass (`reconcile`) before it answers. Throws IDEMPOTENCY_CONFLICT,
 * OBJECT_DAMAGED (DamagedStateError), and RATE_LIMITED and QUOTA_* from
 * admission.
 */
export async function createAllocation(
  store: AllocationStore,
  cmd: CreateCommand,
  reconcile: () => Promise<void>,
): Promise<CreateResult> {
  const replay = replayOf(store, cmd);
  if (replay) return replay;
  // The budget first (issue 22): a create that would pass it is refused before admission counts it.
  const usage = store.env.Usage.get(GLOBAL);
  if (cmd.cost)
    await usage.reserve(cmd.identity, cmd.allocationId, cmd.cost.reservedMicros, cmd.cost.budgetMicros, cmd.ttlMs);
  try {
    return await admitAndWrite(store, cmd, reconcile);
  } catch (e) {
    // Refused or failed after the reservation: it is given back (a row that exists keeps it; its end releases it).
    if (cmd.cost && !store.load()) await usage.unreserve(cmd.allocationId);
    throw e;
  }
}

/** Admission, the address and the write of a create whose budget (if any) is reserved. */
async function admitAndWrite(
  store: AllocationStore,
  cmd: CreateCommand,
  reconcile: () => Promise<void>,
): Promise<CreateResult> {
  const { admittedBefore } = await store.env.Admission.get(GLOBAL).admit(cmd.identity, cmd.allocationId, cmd.limits);
  // A concurrent create of the same allocation may have written the row while admission answered.
  const raced = replayOf(store, cmd);
  if (raced) return raced;
  // Admitted before but no row: a create that never committed (carry on), or state that was lost (the index knows it).
  if (
    admittedBefore &&
    (await store.env.AllocationIndex.get(GLOBAL).has(cmd.identity, cmd.allocationId)) &&
    !store.load()
  ) {
    throw new DamagedStateError(`allocation ${cmd.allocationId} is listed by the index but its state is missing`);
  }
  const again = replayOf(store, cmd);
  if (again) return again;
  // The private address is reserved before any host is chosen (spec "Networks, addresses, and grants"); idempotent per allocation.
  let network: { networkId: string; address: string } | null = null;
  if (store.env.config.connections) {
    network = await store.env.Network.get(defaultNetworkIdFor(cmd.identity)).reserveAllocationAddress(
      cmd.allocationId,
      cmd.identity,
    );
    const late = replayOf(store, cmd);
    if (late) return late;
  }
  if (!admittedBefore)
    store.env.metrics.inc("bb_allocations_admitted_total", "Allocations admitted", {
      workload_class: cmd.body.workloadClass,
    });
  write(store, cmd, network);
  await reconcile();
  return { created: true, view: store.view(store.load()!) };
}

/** Writes the new allocation (row, allocation.created event, index view) and logs its first state. */
function write(store: AllocationStore, cmd: CreateCommand, network: { networkId: string; address: string } | null) {
  const rec = newAllocationRecord(
    {
      allocationId: cmd.allocationId,
      identity: cmd.identity,
      clientRequestId: cmd.body.clientRequestId,
      workloadClass: cmd.body.workloadClass,
      ttlMs: cmd.ttlMs,
      network,
    },
    store.now,
    store.policy,
  );
  const s: StoredAllocation = { rec, spec: cmd.spec, labels: cmd.body.labels ?? {}, bodyDigest: cmd.bodyDigest };
  store.insert(s, {
    ...noChange(),
    events: [
      {
        type: "allocation.created",
        toState: "pending",
        data: {
          workloadClass: cmd.body.workloadClass,
          imageDigest: cmd.spec.imageDigest,
          ...(cmd.spec.forkOf
            ? { forkOf: cmd.spec.forkOf.allocationId, forkGeneration: cmd.spec.forkOf.generation }
            : {}),
        },
      },
    ],
  });
  store.env.log.info("allocation state", {
    allocationId: cmd.allocationId,
    from: null,
    to: "pending",
    reason: null,
    generation: 1,
    hostId: null,
    workloadClass: cmd.body.workloadClass,
    by: cmd.identity,
  });
}

/** The existing allocation for a repeated create (IDEMPOTENCY_CONFLICT for another body), or null. */
function replayOf(store: AllocationStore, cmd: CreateCommand): { created: false; view: AllocationView } | null {
  const existing = store.load();
  if (!existing) return null;
  if (existing.bodyDigest !== cmd.bodyDigest)
    throw new BeachballError("IDEMPOTENCY_CONFLICT", "clientRequestId was used with a different request body");
  return { created: false, view: store.view(existing) };
}
