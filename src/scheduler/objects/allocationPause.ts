/**
 * The client's pause, suspend and resume requests on an Allocation (issue
 * 21, spec "States": a paused VM gives back its CPU, a suspended one its CPU
 * and memory, and a resume restores the VM as the next generation). Each
 * checks the record, persists the wish (`desired`) with its event, then
 * runs the reconcile pass, which asks the Host (src/domain/reconcile.ts
 * pauseIntent, allocationPlacement.ts pauseStep).
 * Must never: accept a request the state cannot carry out (INVALID_STATE
 * while another is under way), or suspend a VM whose workload class did not
 * allow it (its RAM is not in a file).
 */
import { BeachballError } from "../../protocol/errors.ts";
import type { AllocationView } from "../../protocol/api.ts";
import type { ForkSource, PlacementSpec } from "../../protocol/agent.ts";
import { TERMINAL_STATES } from "../../domain/allocation.ts";
import { noChange, type AllocationRecord } from "../../domain/reconcile.ts";
import type { AllocationStore } from "./allocationStore.ts";

/** States of an allocation wanted ready that a resume leaves as they are: running, or on its way back. */
const RESUMED_OR_RESUMING: ReadonlySet<string> = new Set(["ready", "paused", "suspended", "provisioning"]);

/** The view after the pass. */
async function after(store: AllocationStore, reconcile: () => Promise<void>): Promise<AllocationView> {
  await reconcile();
  return store.view(store.load()!);
}

/**
 * Asks for the VM to be paused (its vCPUs stop, its memory stays, its CPU
 * goes back to the host once the agent confirms) or suspended (memory and
 * device state to its host's disk, its VMM ended, CPU and memory back to
 * the host, its disk held; a resume restores it there as the next
 * generation). Idempotent: an allocation already so, or on its way, is
 * returned as it is. Throws NOT_FOUND; NOT_SUSPENDABLE (a suspend of a
 * class that does not allow it); INVALID_STATE unless the allocation is
 * ready (a resume or the other request under way, not yet ready, or being
 * released).
 */
export async function requestAway(
  store: AllocationStore,
  identity: string,
  to: "paused" | "suspended",
  reconcile: () => Promise<void>,
): Promise<AllocationView> {
  const s = store.owned(identity);
  const r = s.rec;
  const what = to === "paused" ? "pause" : "suspend";
  const already = to === "paused" ? r.state === "paused" : r.state === "suspending" || r.state === "suspended";
  if (!already && !(r.state === "ready" && r.desired === to)) {
    if (to === "suspended" && !s.spec.suspendable)
      throw new BeachballError(
        "NOT_SUSPENDABLE",
        `workload class ${r.workloadClass} does not allow suspend (suspendable in the deployment manifest)`,
      );
    settledOrRefuse(r, what);
    store.persist({
      ...noChange({ desired: to, updatedAtMs: store.now }),
      events: [{ type: `allocation.${what}_requested` }],
    });
  }
  return after(store, reconcile);
}

/**
 * Asks for a paused or suspended VM to run again: the host takes its CPU
 * (and a suspended VM's memory) back first; without room the allocation
 * waits with the NO_CAPACITY condition. A paused VM is `ready` again once
 * its agent confirms; a suspended one is restored as the next generation
 * (`provisioning`, then `ready` once the guest proved its new identity).
 * Idempotent: a ready allocation, or one whose resume is under way, is
 * returned as it is. Throws NOT_FOUND, INVALID_STATE while a pause or
 * suspend is still under way or the allocation is being released.
 */
export async function requestResume(
  store: AllocationStore,
  identity: string,
  reconcile: () => Promise<void>,
): Promise<AllocationView> {
  const r = store.owned(identity).rec;
  const settledAway = (r.state === "paused" || r.state === "suspended") && r.desired === r.state;
  if (settledAway) {
    store.persist({
      ...noChange({ desired: "ready", updatedAtMs: store.now }),
      events: [{ type: "allocation.resume_requested" }],
    });
  } else if (!(r.desired === "ready" && RESUMED_OR_RESUMING.has(r.state))) {
    throw new BeachballError(
      "INVALID_STATE",
      r.desired === "released" || TERMINAL_STATES.has(r.state)
        ? `allocation is ${TERMINAL_STATES.has(r.state) ? r.state : "being released"}`
        : r.state === "ready" || r.state === "suspending"
          ? `a ${r.desired === "paused" ? "pause" : "suspend"} is under way; resume once it is ${r.desired}`
          : `allocation is ${r.state}, not paused or suspended`,
    );
  }
  return after(store, reconcile);
}

/** Throws INVALID_STATE unless `r` is ready and wanted ready (a pause or suspend may begin). */
function settledOrRefuse(r: AllocationRecord, what: "pause" | "suspend"): void {
  if (r.state === "ready" && r.desired === "ready") return;
  throw new BeachballError(
    "INVALID_STATE",
    r.desired === "released" || TERMINAL_STATES.has(r.state)
      ? `cannot ${what}: allocation is ${TERMINAL_STATES.has(r.state) ? r.state : "being released"}`
      : `cannot ${what}: allocation is ${r.state}${r.desired === "ready" ? "" : ` (${r.desired} requested)`}, not ready`,
  );
}

/** What a fork copies from its parent (forkSourceOf). */
export interface ForkParent {
  /** The parent's spec with `forkOf` naming its suspended placement: the spec of every fork. */
  spec: PlacementSpec & { forkOf: ForkSource };
  /** The parent's workload class (each fork is of the same class). */
  workloadClass: string;
}

/**
 * The source of a fork of the allocation (issue 21, "Fork"): its suspended
 * placement, generation and host, and its spec. Throws NOT_FOUND (another
 * identity's or no allocation); INVALID_STATE unless it is suspended and
 * wanted so (a fork restores the snapshot a suspend left; a resume or
 * release under way would change or remove it); PAYLOAD_CONSUMED when it
 * consumed a bootstrap payload and the caller did not pass
 * `allowConsumedPayload` (every fork then holds what that payload gave the
 * parent: the caller must say it knows).
 */
export function forkSourceOf(store: AllocationStore, identity: string, allowConsumedPayload: boolean): ForkParent {
  const s = store.owned(identity);
  const r = s.rec;
  if (r.state !== "suspended" || r.desired !== "suspended" || !r.hostId || !r.placementId)
    throw new BeachballError(
      "INVALID_STATE",
      `cannot fork: allocation is ${r.state}${r.desired === r.state ? "" : ` (${r.desired} requested)`}, not suspended`,
    );
  if (r.payloadConsumed && !allowConsumedPayload)
    throw new BeachballError(
      "PAYLOAD_CONSUMED",
      "the allocation consumed a bootstrap payload before it was suspended: every fork holds what it gave the VM; fork with allowConsumedPayload to accept that",
    );
  const { forkOf: _, ...own } = s.spec; // a fork of a fork names its own parent only
  return {
    spec: {
      ...own,
      forkOf: {
        allocationId: r.allocationId,
        placementId: r.placementId,
        generation: r.generation,
        hostId: r.hostId,
        payloadAllowed: r.payloadConsumed,
      },
    },
    workloadClass: r.workloadClass,
  };
}
