/**
 * One step of the Allocation's reconcile pass (spec "The reconciliation
 * loop", "Placement: choosing a host", "Replacement"): apply the inbox, ask
 * the pure rules (src/domain/reconcile.ts) for the next intent, persist it,
 * then do the remote work it names (ask the directory for a host, reserve on
 * it, check on or remove its placement, fence the old generation's
 * connection grants) and persist the answer only if generation and
 * placement still match. Also the placement request a round sends to the
 * directory, built from the stored spec and the workload class.
 * Must never: apply a late answer to a record that moved on (another
 * placement or generation), or assume capacity freed before the Host
 * reported the placement absent.
 */
import { BeachballError } from "../../protocol/errors.ts";
import type { PlacementSpec } from "../../protocol/agent.ts";
import { AGENT_PROTOCOL_VERSION, SUPPORTED_ARCHITECTURE } from "../../protocol/platform.ts";
import { TERMINAL_STATES, type TimeoutPolicy } from "../../domain/allocation.ts";
import { reservationKey } from "../../domain/identifiers.ts";
import {
  afterAbsent,
  afterFenceCheck,
  afterFindHost,
  afterHostCheck,
  afterReserve,
  afterTransitionAnswer,
  applied,
  applyInput,
  merge,
  NO_CAPACITY_CONDITION,
  nextIntent,
  noChange,
  releaseOrPlace,
  replace,
  type AllocationRecord,
  type Intent,
} from "../../domain/reconcile.ts";
import { GLOBAL } from "../env.ts";
import type { WorkloadClass } from "../manifestSchema.ts";
import { commandSpecOf, reservedResources } from "./hostTypes.ts";
import type { CandidateRequest } from "./hostDirectory.ts";
import type { AllocationStore } from "./allocationStore.ts";

/** What a placement round needs beyond the stored spec: where the VM can run (from the workload class, and this release's protocol). */
export interface PlacementNeeds {
  /** The machine architecture the VM needs. */
  architecture: string;
  /** The agent protocol version the scheduler speaks (hosts of the same major qualify). */
  agentProtocolVersion: string;
}

/**
 * What a placement round needs for an allocation of class `cls`: its
 * architecture (default SUPPORTED_ARCHITECTURE; also for a class the
 * manifest no longer lists) and AGENT_PROTOCOL_VERSION.
 */
export function placementNeedsOf(cls: Pick<WorkloadClass, "architecture"> | undefined): PlacementNeeds {
  return { architecture: cls?.architecture ?? SUPPORTED_ARCHITECTURE, agentProtocolVersion: AGENT_PROTOCOL_VERSION };
}

/**
 * The directory request of one placement round for `r` (spec "Placement:
 * choosing a host"): the spec's resources and image, one slot, any region
 * and labels (a fork: only its parent's host), skipping the hosts tried this
 * round, and waiting for capacity until the pending timeout after creation.
 * Pure.
 */
export function placementRequestOf(
  r: AllocationRecord,
  spec: PlacementSpec,
  needs: PlacementNeeds,
  policy: Pick<TimeoutPolicy, "pendingTimeoutMs">,
): CandidateRequest {
  return {
    allocationId: r.allocationId,
    resources: reservedResources(spec),
    imageDigest: spec.imageDigest,
    architecture: needs.architecture,
    regions: null,
    requiredLabels: {},
    agentProtocolVersion: needs.agentProtocolVersion,
    exclude: r.triedHosts,
    ...(spec.forkOf ? { onlyHost: spec.forkOf.hostId } : {}), // a fork restores a snapshot only its parent's host holds
    waiter: { createdAtMs: r.createdAtMs, untilMs: r.createdAtMs + policy.pendingTimeoutMs },
  };
}

/** One reconcile step; returns true if it persisted progress worth another step. */
export async function reconcileStep(store: AllocationStore): Promise<boolean> {
  const r = store.rec();
  if (!r || TERMINAL_STATES.has(r.state)) return false;
  const now = store.now;
  if (applyInbox(store, r, now)) return true;
  let intent: Intent = nextIntent(r, now, store.policy);
  if (intent.type === "check_host") {
    const next = await checkHost(store, r, intent.hostId, intent.placementId, now);
    if (next === "again") return true;
    if (next === "stop") return false;
    intent = next;
  }
  // The intent acts on the record as it is now (a host check may have persisted a change).
  return act(store, store.rec()!, intent, now);
}

/** Applies and acknowledges the inbox; true if that changed the record or wrote events. */
function applyInbox(store: AllocationStore, r: AllocationRecord, now: number): boolean {
  const msgs = store.state.readInbox();
  if (msgs.length === 0) return false;
  let c = noChange();
  let cur = r;
  for (const m of msgs) {
    const ci = applyInput(cur, m.message, now, store.policy);
    c = merge(c, ci);
    cur = applied(cur, ci);
  }
  store.persist(c, msgs[msgs.length - 1]!.seq);
  return c.events.length > 0 || Object.keys(c.patch).length > 0;
}

/**
 * Asks the host about the placement and persists what that implies; a lost
 * host's placement is asked to go absent and replaced. Returns the intent to
 * carry on with, "again" (another step), or "stop" (terminal).
 */
async function checkHost(
  store: AllocationStore,
  r: AllocationRecord,
  hostId: string,
  placementId: string,
  now: number,
): Promise<Intent | "again" | "stop"> {
  const st = await store.env.Host.get(hostId).placementStatus(placementId);
  const cur = store.rec();
  if (!cur || moved(cur, r)) return "again";
  const { change, replaceNow } = afterHostCheck(cur, st, now, store.policy);
  if (replaceNow) {
    await store.env.Host.get(hostId)
      .requestAbsent(placementId, r.generation)
      .catch((e: unknown) => {
        if (e instanceof BeachballError) return false;
        throw e;
      });
    const again = store.rec();
    if (!again || moved(again, r)) return "again";
    store.persist(replace(again, "HOST_LOST", now));
    return "again";
  }
  store.persist(change);
  const next = store.rec()!;
  if (TERMINAL_STATES.has(next.state)) return "stop";
  return releaseOrPlace(next, now);
}

/** Carries out `intent` (decided from `r`); true if it made progress worth another step. */
async function act(store: AllocationStore, r: AllocationRecord, intent: Intent, now: number): Promise<boolean> {
  switch (intent.type) {
    case "none":
    case "check_host":
      return false;
    case "persist": {
      store.persist(intent.change);
      // A waiter that stops waiting (released or failed while pending) gives up its place in the queue.
      const after = store.rec()!;
      if (r.conditions.includes(NO_CAPACITY_CONDITION) && after.state !== "pending")
        await store.env.HostDirectory.get(GLOBAL).cancelWait(r.allocationId);
      return true;
    }
    case "request_absent": {
      const absent = await store.env.Host.get(intent.hostId).requestAbsent(intent.placementId, r.generation);
      const cur = store.rec();
      if (!absent || !cur || moved(cur, r)) return false;
      store.persist(afterAbsent(cur, now, store.policy));
      return true;
    }
    case "find_host":
      return findHost(store, r, now);
    case "fence_connections": {
      const answer = await store.env.Network.get(intent.networkId).fenceGeneration(r.allocationId, intent.generation);
      const cur = store.rec();
      if (cur && !moved(cur, r) && cur.state === "suspended" && cur.pendingReplacement === null) {
        // A resume from suspend waits for the old generation's grants to be gone (it comes back as the next one).
        if (answer.fenced) store.persist(noChange({ connectionsFencedGeneration: cur.generation, updatedAtMs: now }));
        return answer.fenced;
      }
      if (!cur || moved(cur, r) || cur.pendingReplacement === null) return true;
      // The injected bug (src/scheduler/env.ts InjectedBugs): the old generation counts as fenced at once.
      const fenced = answer.fenced || store.env.config.debug.connectionsNotFenced === true;
      store.persist(afterFenceCheck(cur, fenced, now));
      return fenced;
    }
    case "reserve":
      return reserve(store, r, intent, now);
    case "request_pause":
    case "request_suspend":
    case "request_resume":
      return pauseStep(store, r, intent, now);
  }
}

/** Asks the host for a pause, suspend or resume (issue 21) and records its answer, if the record has not moved on. */
async function pauseStep(
  store: AllocationStore,
  r: AllocationRecord,
  intent: Extract<Intent, { type: "request_pause" | "request_suspend" | "request_resume" }>,
  now: number,
): Promise<boolean> {
  const host = store.env.Host.get(intent.hostId);
  const kind = intent.type === "request_pause" ? "pause" : intent.type === "request_suspend" ? "suspend" : "resume";
  const call =
    intent.type === "request_resume"
      ? host.requestResume(intent.placementId, r.generation, intent.nextGeneration)
      : intent.type === "request_pause"
        ? host.requestPause(intent.placementId, r.generation)
        : host.requestSuspend(intent.placementId, r.generation);
  const answer = await Promise.resolve(call).catch((e: unknown) => {
    if (e instanceof BeachballError) return { refused: e.code };
    throw e;
  });
  const cur = store.rec();
  if (!cur || moved(cur, r) || cur.state !== r.state || cur.desired !== r.desired) return false;
  const change = afterTransitionAnswer(cur, kind, answer, now);
  store.persist(change);
  return change.transition !== null;
}

/** One placement round: ask the directory for a host and record its answer (a placement ID and reservation key for a host). */
async function findHost(store: AllocationStore, r: AllocationRecord, now: number): Promise<boolean> {
  const needs = placementNeedsOf(store.env.config.manifest.workloadClasses[r.workloadClass]);
  const request = placementRequestOf(r, store.load()!.spec, needs, store.policy);
  const answer = await store.env.HostDirectory.get(GLOBAL).candidates(request);
  const cur = store.rec();
  if (!cur || cur.state !== "pending" || cur.generation !== r.generation || cur.desired === "released") return true;
  const placementId = answer.hostId === null ? "" : store.env.random.id("plc");
  const key = answer.hostId === null ? "" : reservationKey(cur.allocationId, cur.generation, answer.hostId);
  store.persist(afterFindHost(cur, answer, placementId, key, now));
  return answer.hostId !== null;
}

/** Asks the chosen host to reserve the placement (a refusal is an answer, with its code) and records the outcome. */
async function reserve(
  store: AllocationStore,
  r: AllocationRecord,
  intent: Extract<Intent, { type: "reserve" }>,
  now: number,
): Promise<boolean> {
  const result = await store.env.Host.get(intent.hostId)
    .reserve({
      key: intent.reservationKey,
      allocationId: r.allocationId,
      generation: r.generation,
      placementId: intent.placementId,
      spec: commandSpecOf(store.load()!.spec, r.address),
    })
    .catch((e: unknown) => {
      if (e instanceof BeachballError) return { accepted: false as const, code: e.code };
      throw e;
    });
  const cur = store.rec();
  if (!cur || cur.state !== "reserving" || moved(cur, r)) return false;
  store.persist(afterReserve(cur, result, now));
  return true;
}

/** True if the placement or generation changed since `before` (a late answer must not be applied). */
function moved(cur: AllocationRecord, before: AllocationRecord): boolean {
  return cur.placementId !== before.placementId || cur.generation !== before.generation;
}
