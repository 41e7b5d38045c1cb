/**
 * The allocation's reconcile decisions (spec "The reconciliation loop",
 * "Replacement", "Placement: choosing a host", "No capacity"), as pure
 * functions: given the stored record, the time and the policy, what is the
 * next intent; given the answer of a remote call, what changes. The
 * Allocation object only reads the record, persists each `Change` (row,
 * events, messages) in one transaction before the remote work it implies,
 * and makes the calls.
 * Must never: free or assume freed capacity before absence was observed,
 * replace a placement after readiness without fencing or an authorization,
 * start a new generation while a connection grant for the old one may
 * still be applied on its host (CONNECTIONS_NOT_FENCED, spec "Revocation and
 * replacement"), or allow a transition `canTransition` refuses.
 */
import type { AllocationState, PlacementOutcome } from "../protocol/api.ts";
import type { PlacementObservedState, StartOrigin, VmExit } from "../protocol/agent.ts";
import {
  canTransition,
  MAX_ALARM_DELAY_MS,
  mayReplaceAutomatically,
  ORDINARY_END_REASONS,
  TERMINAL_STATES,
  type DesiredAllocationState,
  type TimeoutPolicy,
} from "./allocation.ts";
import type { HostHealth } from "./health.ts";

/** Condition shown while an allocation waits for capacity. */
export const NO_CAPACITY_CONDITION = "NO_CAPACITY";
/** Condition shown while a replacement after host loss waits for fencing or an authorization. */
export const REPLACEMENT_BLOCKED = "replacement_blocked";
/** Condition shown while a replacement waits for the old generation's connection grants to be gone from its host. */
export const CONNECTIONS_NOT_FENCED = "CONNECTIONS_NOT_FENCED";
/** When a pass that died mid-way is retried, ms. */
export const RECONCILE_RETRY_MS = 5_000;
/** Soonest a re-armed alarm fires, ms. */
export const MIN_ALARM_DELAY_MS = 50;
/** While releasing or reserving, how often the alarm looks again, ms. */
export const BUSY_RECHECK_MS = 5_000;

/** States in which the allocation has a placement on a host that may hold a VM (its loss is PLACEMENT_LOST). */
const LIVE_STATES: ReadonlySet<AllocationState> = new Set([
  "provisioning",
  "ready",
  "paused",
  "suspending",
  "suspended",
]);

/** The allocation as stored (decoded): everything a decision needs. */
export interface AllocationRecord {
  allocationId: string;
  identity: string;
  clientRequestId: string;
  workloadClass: string;
  state: AllocationState;
  /** ready, paused or suspended as the client last asked (issue 21), or released. */
  desired: DesiredAllocationState;
  generation: number;
  attempts: number;
  hostId: string | null;
  placementId: string | null;
  reservationKey: string | null;
  observedState: PlacementObservedState | null;
  reason: string | null;
  conditions: string[];
  /** Hosts already asked in this round (reset when a round finds no candidate). */
  triedHosts: string[];
  /** When placement may be attempted again, ms (a capacity wake-up brings it forward). */
  nextAttemptAtMs: number;
  guestReady: boolean;
  payloadConsumed: boolean;
  replaceAfterAbsent: boolean;
  workloadExitCode: number | null;
  createdAtMs: number;
  updatedAtMs: number;
  stateEnteredAtMs: number;
  expiresAtMs: number;
  replacementAuthorized: boolean;
  hostCheckAtMs: number;
  terminalAtMs: number | null;
  /** The latest placement attempt (shown in the view). */
  placement: PlacementOutcome | null;
  /** The allocation's Network, or null when the deployment had no private networking at creation. */
  networkId: string | null;
  /** The allocation's /128 in its Network (reserved at creation; survives replacement), or null. */
  address: string | null;
  /** The highest generation a connection grant was requested for (0: none). */
  grantGeneration: number;
  /** The highest generation whose grants the Network confirmed gone from their host. */
  connectionsFencedGeneration: number;
  /**
   * A replacement that was decided once the placement was gone, waiting for
   * the old generation's grants to be fenced (its reason), or null.
   */
  pendingReplacement: string | null;
}

/** What a create fixes about a new allocation (the caller resolved and admitted it). */
export interface NewAllocation {
  allocationId: string;
  identity: string;
  clientRequestId: string;
  workloadClass: string;
  /** Lifetime from creation, ms. */
  ttlMs: number;
  /** The allocation's Network and /128 when the deployment has private networking, else null. */
  network: { networkId: string; address: string } | null;
}

/**
 * The record of an allocation created at `nowMs` (spec "Allocation
 * lifecycle"): pending toward ready, generation 1 on its first attempt, to
 * be placed at once, its first host check one interval out, expiring
 * `ttlMs` after creation.
 */
export function newAllocationRecord(a: NewAllocation, nowMs: number, policy: TimeoutPolicy): AllocationRecord {
  return {
    allocationId: a.allocationId,
    identity: a.identity,
    clientRequestId: a.clientRequestId,
    workloadClass: a.workloadClass,
    state: "pending",
    desired: "ready",
    generation: 1,
    attempts: 1,
    hostId: null,
    placementId: null,
    reservationKey: null,
    observedState: null,
    reason: null,
    conditions: [],
    triedHosts: [],
    nextAttemptAtMs: nowMs,
    guestReady: false,
    payloadConsumed: false,
    replaceAfterAbsent: false,
    workloadExitCode: null,
    createdAtMs: nowMs,
    updatedAtMs: nowMs,
    stateEnteredAtMs: nowMs,
    expiresAtMs: nowMs + a.ttlMs,
    replacementAuthorized: false,
    hostCheckAtMs: nowMs + policy.hostCheckIntervalMs,
    terminalAtMs: null,
    placement: null,
    networkId: a.network?.networkId ?? null,
    address: a.network?.address ?? null,
    grantGeneration: 0,
    connectionsFencedGeneration: 0,
    pendingReplacement: null,
  };
}

/** An event to append (the object adds ID, time, generation, placement and host). */
export interface EventDraft {
  type: string;
  fromState?: AllocationState;
  toState?: AllocationState;
  reason?: string | null;
  data?: Record<string, unknown>;
}

/** What one step persists atomically: a patch of the record, events, and what to tell other objects. */
export interface Change {
  patch: Partial<AllocationRecord>;
  events: EventDraft[];
  /** The allocation reached a terminal state: admission stops counting it. */
  terminal: boolean;
  /** Alerts for operators (type, reason). */
  alerts: { type: string; reason: string }[];
  /** A state transition happened (metrics count it). */
  transition: { to: AllocationState; reason: string | null } | null;
}

/** A change with nothing in it. */
export function noChange(patch: Partial<AllocationRecord> = {}): Change {
  return { patch, events: [], terminal: false, alerts: [], transition: null };
}

/** Applies a change's patch to a record (what the object's row becomes). */
export function applied(r: AllocationRecord, c: Change): AllocationRecord {
  return { ...r, ...c.patch };
}

/**
 * A state transition `r.state → to` with `patch`, its event and, for a
 * terminal state, the terminal mark. Throws Error for a transition the state
 * machine forbids (a bug: the object answers INTERNAL).
 */
export function transition(
  r: AllocationRecord,
  to: AllocationState,
  patch: Partial<AllocationRecord>,
  reason: string | null,
  nowMs: number,
  data?: Record<string, unknown>,
): Change {
  if (!canTransition(r.state, to)) throw new Error(`forbidden transition ${r.state} -> ${to}`);
  const terminal = TERMINAL_STATES.has(to);
  return {
    patch: {
      ...patch,
      state: to,
      stateEnteredAtMs: nowMs,
      updatedAtMs: nowMs,
      ...(terminal ? { terminalAtMs: nowMs } : {}),
    },
    events: [{ type: `allocation.${to}`, fromState: r.state, toState: to, reason, ...(data ? { data } : {}) }],
    terminal,
    alerts: [],
    transition: { to, reason },
  };
}

/** Merges two changes made one after the other (the second sees the first's patch). */
export function merge(a: Change, b: Change): Change {
  return {
    patch: { ...a.patch, ...b.patch },
    events: [...a.events, ...b.events],
    terminal: a.terminal || b.terminal,
    alerts: [...a.alerts, ...b.alerts],
    transition: b.transition ?? a.transition,
  };
}

/** What the reconcile loop does next. */
export type Intent =
  | { type: "none" }
  /** Persist a change and take another step (no remote work). */
  | { type: "persist"; change: Change }
  /** Ask the host where the placement stands (host-loss check). */
  | { type: "check_host"; hostId: string; placementId: string }
  /** Ask the host to make the placement absent; on absence, `afterAbsent`. */
  | { type: "request_absent"; hostId: string; placementId: string }
  /** Ask the directory for candidates (registering as a waiter when there are none). */
  | { type: "find_host" }
  /** Ask the chosen host to reserve. */
  | { type: "reserve"; hostId: string; placementId: string; reservationKey: string }
  /** Ask the Network whether every grant of `generation` is gone from its host (closing the generation to new grants). */
  | { type: "fence_connections"; networkId: string; generation: number }
  /** Ask the host to pause or suspend the placement (issue 21); on `done`, `afterTransitionAnswer`. */
  | { type: "request_pause" | "request_suspend"; hostId: string; placementId: string }
  /** Ask the host to take capacity back and run the placement again, as `nextGeneration` (a suspended VM is restored as the next one). */
  | { type: "request_resume"; hostId: string; placementId: string; nextGeneration: number };

/** Messages an allocation receives (decoded from its inbox). */
export type AllocationInput =
  | {
      kind: "observation";
      hostId: string;
      placementId: string;
      generation: number;
      state: PlacementObservedState;
      errorCode: string | null;
      workloadExitCode: number | null;
      exit?: VmExit;
      /** How a templated class's placement came to run (issue 21, "Templates"): goes into the event's data. */
      start?: StartOrigin;
      at: string;
    }
  | { kind: "delivery_consumed"; deliveryId: string; generation: number; digest: string }
  | { kind: "capacity_available"; hostId: string }
  | { kind: "connections_fenced"; generation: number };

/** Applies one inbox message. Returns the change (possibly empty). Stale messages (other generation or placement) change nothing. */
export function applyInput(r: AllocationRecord, m: AllocationInput, nowMs: number, policy: TimeoutPolicy): Change {
  if (m.kind === "delivery_consumed") {
    if (m.generation !== r.generation || r.payloadConsumed) return noChange();
    return {
      ...noChange({ payloadConsumed: true, updatedAtMs: nowMs }),
      events: [{ type: "bootstrap.consumed", data: { deliveryId: m.deliveryId, digest: m.digest } }],
    };
  }
  // The Network saw the last grant of a closed generation go: the pass that follows asks it again.
  if (m.kind === "connections_fenced") return noChange();
  if (m.kind === "capacity_available") {
    if (r.state !== "pending" || r.desired === "released" || r.nextAttemptAtMs <= nowMs) return noChange();
    return noChange({ nextAttemptAtMs: nowMs });
  }
  return applyObservation(r, m, nowMs, policy);
}

function applyObservation(
  r: AllocationRecord,
  o: Extract<AllocationInput, { kind: "observation" }>,
  nowMs: number,
  policy: TimeoutPolicy,
): Change {
  if (o.placementId !== r.placementId || o.generation !== r.generation) return noChange();
  let c = noChange();
  if (o.workloadExitCode !== null && r.workloadExitCode === null) {
    c = merge(c, {
      ...noChange({ workloadExitCode: o.workloadExitCode, updatedAtMs: nowMs }),
      events: [{ type: "workload.exited", data: { exitCode: o.workloadExitCode } }],
    });
  }
  if (o.state !== r.observedState) {
    // A VM that ended on its own carries the agent's diagnosis: the reason and the redacted kernel tail of its console.
    const exit = o.exit ? { exitReason: o.exit.reason, consoleTail: o.exit.consoleTail } : {};
    // A templated class's start says whether it came from the template and, when it booted cold, why (ADR 0182).
    const start = o.start
      ? {
          startedFrom: o.start.from,
          ...(o.start.built ? { templateBuilt: true } : {}),
          ...(o.start.fallback ? { templateFallback: o.start.fallback } : {}),
        }
      : {};
    c = merge(c, {
      ...noChange({ observedState: o.state, updatedAtMs: nowMs }),
      events: [{ type: `placement.${o.state}`, reason: o.errorCode, data: { hostId: o.hostId, ...exit, ...start } }],
    });
  }
  const cur = applied(r, c);
  if (o.state === "running" && cur.state === "provisioning")
    return merge(c, transition(cur, "ready", { guestReady: true }, null, nowMs));
  const settled = afterPauseObservation(cur, o.state, o.errorCode, nowMs);
  if (settled) return merge(c, settled);
  if (o.state === "error" && cur.desired !== "released" && cur.state !== "releasing") {
    const replace = mayReplaceAutomatically(cur, policy);
    return merge(
      c,
      transition(
        cur,
        "releasing",
        {
          replaceAfterAbsent: replace,
          reason: replace ? null : (o.errorCode ?? "PLACEMENT_FAILED"),
          desired: replace ? "ready" : "released",
        },
        o.errorCode ?? "PLACEMENT_FAILED",
        nowMs,
      ),
    );
  }
  if (o.state === "absent") {
    if (cur.state === "releasing") return merge(c, afterAbsent(cur, nowMs, policy));
    if (LIVE_STATES.has(cur.state)) {
      // A fenced host's VM can no longer act for the workload: fencing unblocks replacement (spec "Replacement").
      const replace =
        o.errorCode === "HOST_FENCED" || mayReplaceAutomatically(cur, policy) || cur.replacementAuthorized;
      const toReleasing = transition(
        cur,
        "releasing",
        {
          replaceAfterAbsent: replace,
          reason: replace ? null : "PLACEMENT_LOST",
          desired: replace ? "ready" : "released",
        },
        "PLACEMENT_LOST",
        nowMs,
      );
      const c2 = merge(c, toReleasing);
      return merge(c2, afterAbsent(applied(cur, toReleasing), nowMs, policy));
    }
  }
  return c;
}

/**
 * What an observation of a pause, suspend or resume means (issue 21): the
 * agent confirmed a pause (ready → paused), a suspend (suspending →
 * suspended) or a resume (paused → ready); or it could not pause or suspend
 * (the state the VM stayed in, with an error code): the allocation is then
 * wanted ready again, with an event naming the code. Null for any other
 * observation.
 */
function afterPauseObservation(
  r: AllocationRecord,
  state: PlacementObservedState,
  errorCode: string | null,
  nowMs: number,
): Change | null {
  if (r.desired === "released") return null;
  if (state === "paused" && r.state === "ready" && r.desired === "paused")
    return transition(r, "paused", {}, null, nowMs);
  if (state === "suspended" && r.state === "suspending") return transition(r, "suspended", {}, null, nowMs);
  if (state === "running" && r.state === "paused" && r.desired === "ready")
    return transition(r, "ready", {}, null, nowMs);
  if (state !== "running" || !errorCode) return null;
  if (r.state === "ready" && r.desired === "paused") return refusal(r, "pause", errorCode, nowMs);
  if (r.state === "suspending") return refusal(r, "suspend", errorCode, nowMs);
  return null;
}

/** A pause or suspend that will not happen (`code` says why): the allocation is wanted ready again (a suspending one is ready again), with an event. */
function refusal(r: AllocationRecord, kind: "pause" | "suspend", code: string, nowMs: number): Change {
  const event = { type: `allocation.${kind}_refused`, reason: code };
  if (kind === "pause") return { ...noChange({ desired: "ready", updatedAtMs: nowMs }), events: [event] };
  const back = transition(r, "ready", { desired: "ready" }, code, nowMs);
  return { ...back, events: [...back.events, event] };
}

/**
 * After a host answered a pause, suspend or resume request (issue 21).
 * Pause: `done` moves ready → paused. Suspend: `done` moves suspending →
 * suspended. Resume: the host took the capacity back (done or not): a paused
 * VM is ready once `done` (else the agent's report moves it); a suspended
 * one becomes provisioning as the next generation, since its restore is a
 * new start. A refusal for capacity (INSUFFICIENT_*) keeps it waiting with
 * the NO_CAPACITY condition (the alarm asks again); a pause or suspend
 * refused by the host (the VM is not in a state to) puts the wish back to
 * ready with an event.
 */
export function afterTransitionAnswer(
  r: AllocationRecord,
  kind: "pause" | "suspend" | "resume",
  answer: { done: boolean } | { refused: string },
  nowMs: number,
): Change {
  if ("refused" in answer) {
    if (kind === "resume") {
      if (!answer.refused.startsWith("INSUFFICIENT_") || r.conditions.includes(NO_CAPACITY_CONDITION))
        return noChange();
      return {
        ...noChange({ conditions: [...r.conditions, NO_CAPACITY_CONDITION], updatedAtMs: nowMs }),
        events: [{ type: "allocation.resume_waiting", reason: answer.refused }],
      };
    }
    return refusal(r, kind, answer.refused, nowMs);
  }
  const waiting = { conditions: r.conditions.filter((c) => c !== NO_CAPACITY_CONDITION) };
  if (kind === "pause")
    return answer.done && r.state === "ready" ? transition(r, "paused", {}, null, nowMs) : noChange();
  if (kind === "suspend")
    return answer.done && r.state === "suspending" ? transition(r, "suspended", {}, null, nowMs) : noChange();
  if (r.state === "suspended")
    return transition(
      r,
      "provisioning",
      { ...waiting, generation: r.generation + 1, observedState: null },
      "RESUME",
      nowMs,
    );
  if (r.state === "paused" && answer.done) return transition(r, "ready", waiting, null, nowMs);
  return waiting.conditions.length !== r.conditions.length ? noChange({ ...waiting, updatedAtMs: nowMs }) : noChange();
}

/** The placement was confirmed absent: replace it, or end in released or failed. */
export function afterAbsent(r: AllocationRecord, nowMs: number, policy: TimeoutPolicy): Change {
  void policy;
  if (r.replaceAfterAbsent && r.desired !== "released") return replace(r, "REPLACEMENT", nowMs);
  return transition(r, r.reason && !ORDINARY_END_REASONS.has(r.reason) ? "failed" : "released", {}, r.reason, nowMs);
}

/** True while a grant may exist for the current generation that the Network has not confirmed gone. */
export function connectionsUnfenced(r: AllocationRecord): boolean {
  return r.grantGeneration >= r.generation && r.connectionsFencedGeneration < r.generation;
}

/**
 * Starts the next generation; the old placement keeps its capacity until
 * its host reports it absent or is fenced. While a connection grant of the
 * current generation may still be applied (`connectionsUnfenced`), the
 * replacement is held instead: the allocation stays (or goes) `releasing`
 * with the CONNECTIONS_NOT_FENCED condition and `pendingReplacement` set,
 * and the loop asks the Network until the grants are gone (revoke
 * acknowledged by the host, or expired).
 */
export function replace(r: AllocationRecord, reason: string, nowMs: number): Change {
  if (connectionsUnfenced(r)) return holdReplacement(r, reason, nowMs);
  return transition(
    r,
    "pending",
    {
      // A replacement is a new VM: a pause or suspend wished for the old one does not carry over.
      desired: "ready",
      generation: r.generation + 1,
      attempts: r.attempts + 1,
      hostId: null,
      placementId: null,
      reservationKey: null,
      observedState: null,
      replaceAfterAbsent: false,
      replacementAuthorized: false,
      guestReady: false,
      pendingReplacement: null,
      conditions: r.conditions.filter((c) => c !== REPLACEMENT_BLOCKED && c !== CONNECTIONS_NOT_FENCED),
      triedHosts: r.hostId ? [r.hostId] : [],
      nextAttemptAtMs: nowMs,
    },
    reason,
    nowMs,
  );
}

function holdReplacement(r: AllocationRecord, reason: string, nowMs: number): Change {
  if (r.pendingReplacement !== null) return noChange();
  const patch: Partial<AllocationRecord> = {
    pendingReplacement: reason,
    replaceAfterAbsent: true,
    desired: "ready",
    updatedAtMs: nowMs,
    conditions: [
      ...r.conditions.filter((c) => c !== REPLACEMENT_BLOCKED && c !== CONNECTIONS_NOT_FENCED),
      CONNECTIONS_NOT_FENCED,
    ],
  };
  const held: Change = {
    ...noChange(),
    events: [
      {
        type: "allocation.connections_not_fenced",
        reason: CONNECTIONS_NOT_FENCED,
        data: { generation: r.generation, replacement: reason },
      },
    ],
  };
  if (r.state === "releasing") return merge(noChange(patch), held);
  return merge(transition(r, "releasing", patch, reason, nowMs), held);
}

/**
 * After asking the Network about the current generation's grants: fenced
 * lets the held replacement go ahead; otherwise nothing changes (the
 * releasing alarm asks again, and the Network nudges the allocation when
 * the last grant goes).
 */
export function afterFenceCheck(r: AllocationRecord, fenced: boolean, nowMs: number): Change {
  if (!fenced || r.pendingReplacement === null) return noChange();
  const reason = r.pendingReplacement;
  const marked = noChange({ connectionsFencedGeneration: r.generation, pendingReplacement: null });
  return merge(marked, replace(applied(r, marked), reason, nowMs));
}

/**
 * The allocation whose replacement was held is released instead (the
 * client released it, or a timeout did): it ends as `afterAbsent` would,
 * the placement being gone already.
 */
function abandonReplacement(r: AllocationRecord, nowMs: number): Change {
  const patch: Partial<AllocationRecord> = {
    pendingReplacement: null,
    replaceAfterAbsent: false,
    conditions: r.conditions.filter((c) => c !== CONNECTIONS_NOT_FENCED),
  };
  return transition(r, r.reason && !ORDINARY_END_REASONS.has(r.reason) ? "failed" : "released", patch, r.reason, nowMs);
}

/**
 * Whether a connection grant may be issued for `r` now, for the caller's
 * expected generation (if any). Returns the stable refusal code and a
 * sentence, or null: only a `ready` allocation whose release was not
 * requested, with a host, a placement and a private address, gets one.
 * STALE_GENERATION for another generation (the allocation was replaced);
 * INVALID_STATE otherwise.
 */
export function grantRefusal(
  r: AllocationRecord,
  expectedGeneration: number | undefined,
): { code: "STALE_GENERATION" | "INVALID_STATE"; message: string } | null {
  if (TERMINAL_STATES.has(r.state) || r.desired === "released" || r.state === "releasing")
    return {
      code: "INVALID_STATE",
      message: `allocation is ${r.desired === "released" && !TERMINAL_STATES.has(r.state) ? "being released" : r.state}`,
    };
  if (expectedGeneration !== undefined && expectedGeneration !== r.generation)
    return {
      code: "STALE_GENERATION",
      message: `generation ${expectedGeneration} is not current (${r.generation}): the allocation was replaced`,
    };
  if (r.state !== "ready" || !r.hostId || !r.placementId)
    return { code: "INVALID_STATE", message: `allocation is ${r.state}, not ready` };
  if (!r.networkId || !r.address)
    return {
      code: "INVALID_STATE",
      message: "allocation has no private address (created before private networking was configured)",
    };
  return null;
}

/**
 * A release request with its event. A timeout or policy (`reason` set on the
 * record) ends the allocation failed; the client's own release
 * (CLIENT_RELEASE, recorded in the event only) ends it released.
 */
export function requestRelease(reason: string, nowMs: number): Change {
  const patch: Partial<AllocationRecord> =
    reason === "CLIENT_RELEASE"
      ? { desired: "released", updatedAtMs: nowMs }
      : { desired: "released", reason, updatedAtMs: nowMs };
  return { ...noChange(patch), events: [{ type: "allocation.release_requested", reason }] };
}

const HOST_STATES: ReadonlySet<AllocationState> = new Set([...LIVE_STATES, "releasing"]);
/** States whose lifetime (expiresAtMs) ends them: a running, paused or suspended VM alike. */
const EXPIRING_STATES: ReadonlySet<AllocationState> = new Set(["ready", "paused", "suspending", "suspended"]);

/**
 * The pause, suspend or resume the record asks for (issue 21), or null:
 * ready wanted paused → pause; ready wanted suspended → suspending (persisted
 * before the host is asked); suspending → suspend; paused or suspended
 * wanted ready → resume (a suspended VM's grants of its generation fenced
 * first: it comes back as the next generation).
 */
function pauseIntent(r: AllocationRecord, nowMs: number): Intent | null {
  if (!r.hostId || !r.placementId) return null;
  const at = { hostId: r.hostId, placementId: r.placementId };
  if (r.state === "ready" && r.desired === "paused") return { type: "request_pause", ...at };
  if (r.state === "ready" && r.desired === "suspended")
    return { type: "persist", change: transition(r, "suspending", {}, null, nowMs) };
  if (r.state === "suspending") return { type: "request_suspend", ...at };
  if (r.state === "paused" && r.desired === "ready")
    return { type: "request_resume", ...at, nextGeneration: r.generation };
  if (r.state === "suspended" && r.desired === "ready") {
    if (connectionsUnfenced(r) && r.networkId)
      return { type: "fence_connections", networkId: r.networkId, generation: r.generation };
    return { type: "request_resume", ...at, nextGeneration: r.generation + 1 };
  }
  return null;
}

/** True while the record waits for a pause, suspend or resume to be confirmed (the alarm looks again soon). */
function inTransition(r: AllocationRecord): boolean {
  if (r.desired === "released") return false;
  return (
    (r.state === "ready" && r.desired !== "ready") ||
    r.state === "suspending" ||
    ((r.state === "paused" || r.state === "suspended") && r.desired === "ready")
  );
}

/**
 * The next intent for a non-terminal record at `nowMs` (inbox already
 * applied). A replacement held for CONNECTIONS_NOT_FENCED first, then
 * timeouts, then the host-loss check, then release, then
 * placement and reservation.
 */
export function nextIntent(r: AllocationRecord, nowMs: number, policy: TimeoutPolicy): Intent {
  if (TERMINAL_STATES.has(r.state)) return { type: "none" };
  if (r.pendingReplacement !== null) {
    if (r.desired === "released") return { type: "persist", change: abandonReplacement(r, nowMs) };
    if (!r.networkId) return { type: "persist", change: afterFenceCheck(r, true, nowMs) };
    return { type: "fence_connections", networkId: r.networkId, generation: r.generation };
  }
  if (r.desired !== "released") {
    if (EXPIRING_STATES.has(r.state) && nowMs >= r.expiresAtMs)
      return { type: "persist", change: requestRelease("TTL_EXPIRED", nowMs) };
    if (r.state === "suspended" && nowMs >= r.stateEnteredAtMs + policy.suspendedMaxAgeMs)
      return { type: "persist", change: requestRelease("SUSPEND_EXPIRED", nowMs) };
    if (r.state === "provisioning" && nowMs >= r.stateEnteredAtMs + policy.provisioningTimeoutMs)
      return { type: "persist", change: requestRelease("GUEST_BOOT_TIMEOUT", nowMs) };
    if (r.state === "pending" && nowMs >= r.createdAtMs + policy.pendingTimeoutMs)
      return { type: "persist", change: requestRelease("NO_CAPACITY", nowMs) };
  }
  if (r.hostId && r.placementId && HOST_STATES.has(r.state) && nowMs >= r.hostCheckAtMs)
    return { type: "check_host", hostId: r.hostId, placementId: r.placementId };
  return releaseOrPlace(r, nowMs);
}

/** The intent once the host check is not due (or was answered without a change). */
export function releaseOrPlace(r: AllocationRecord, nowMs: number): Intent {
  if (TERMINAL_STATES.has(r.state)) return { type: "none" };
  if (r.desired === "released" || r.state === "releasing") {
    if (r.state === "pending")
      return {
        type: "persist",
        change: transition(
          r,
          r.reason ? "failed" : "released",
          { conditions: r.conditions.filter((c) => c !== NO_CAPACITY_CONDITION) },
          r.reason,
          nowMs,
        ),
      };
    if (r.state !== "releasing")
      return { type: "persist", change: transition(r, "releasing", {}, r.reason ?? "CLIENT_RELEASE", nowMs) };
    if (!r.hostId || !r.placementId)
      return { type: "persist", change: transition(r, r.reason ? "failed" : "released", {}, r.reason, nowMs) };
    return { type: "request_absent", hostId: r.hostId, placementId: r.placementId };
  }
  if (r.state === "pending") return nowMs >= r.nextAttemptAtMs ? { type: "find_host" } : { type: "none" };
  if (r.state === "reserving" && r.hostId && r.placementId && r.reservationKey)
    return { type: "reserve", hostId: r.hostId, placementId: r.placementId, reservationKey: r.reservationKey };
  return pauseIntent(r, nowMs) ?? { type: "none" };
}

/** Where a placement stands, as its Host reports it. */
export interface PlacementStatus {
  exists: boolean;
  state: string | null;
  leaseExpiresAtMs: number;
  hostHealth: HostHealth;
  fenced: boolean;
}

/**
 * After the host check. A lost host's placement is replaced automatically
 * only before readiness with no payload consumed, or after the controller
 * authorized it; either way only once the old lease has expired (plus
 * grace), so the old VM has stopped itself. Otherwise the allocation shows
 * replacement_blocked until the host is fenced (spec "Replacement").
 * `replaceNow` asks the caller to request absence, then `replace`.
 */
export function afterHostCheck(
  r: AllocationRecord,
  st: PlacementStatus,
  nowMs: number,
  policy: TimeoutPolicy,
): { change: Change; replaceNow: boolean } {
  const next = nowMs + policy.hostCheckIntervalMs;
  const lost = st.hostHealth === "lost" && st.state !== "absent";
  if (!lost || r.state === "releasing") return { change: noChange({ hostCheckAtMs: next }), replaceNow: false };
  if (!mayReplaceAutomatically(r, policy) && !r.replacementAuthorized) {
    if (r.conditions.includes(REPLACEMENT_BLOCKED))
      return { change: noChange({ hostCheckAtMs: next }), replaceNow: false };
    return {
      change: {
        ...noChange({ conditions: [...r.conditions, REPLACEMENT_BLOCKED], hostCheckAtMs: next, updatedAtMs: nowMs }),
        events: [{ type: "allocation.replacement_blocked", reason: "HOST_LOST" }],
        alerts: [{ type: "allocation.replacement_blocked", reason: "HOST_LOST" }],
      },
      replaceNow: false,
    };
  }
  const safeAt = st.leaseExpiresAtMs + policy.leaseGraceMs;
  if (nowMs < safeAt) return { change: noChange({ hostCheckAtMs: Math.min(safeAt, next) }), replaceNow: false };
  return { change: noChange(), replaceNow: true };
}

/** What the directory answered for a placement round. */
export type CandidateAnswer =
  | { hostId: string; outcome: null }
  | { hostId: null; outcome: Omit<PlacementOutcome, "at" | "result" | "hostId"> };

/**
 * After asking the directory: reserve on the first candidate (a fresh
 * placement ID comes from the caller), or wait for capacity (the directory
 * registered the allocation as a waiter; the alarm stays as a safety net).
 */
export function afterFindHost(
  r: AllocationRecord,
  answer: CandidateAnswer,
  placementId: string,
  reservationKey: string,
  nowMs: number,
): Change {
  if (answer.hostId !== null) {
    return transition(r, "reserving", { hostId: answer.hostId, placementId, reservationKey }, null, nowMs, {
      hostId: answer.hostId,
    });
  }
  const first = !r.conditions.includes(NO_CAPACITY_CONDITION);
  const outcome: PlacementOutcome = {
    at: new Date(nowMs).toISOString(),
    result: "no_eligible_host",
    hostId: null,
    ...answer.outcome,
  };
  return {
    ...noChange({
      conditions: first ? [...r.conditions, NO_CAPACITY_CONDITION] : r.conditions,
      triedHosts: [],
      nextAttemptAtMs: nowMs + MAX_ALARM_DELAY_MS,
      placement: outcome,
      updatedAtMs: first || r.placement?.result !== "no_eligible_host" ? nowMs : r.updatedAtMs,
    }),
    events: first
      ? [
          {
            type: "allocation.no_eligible_host",
            reason: "NO_CAPACITY",
            data: {
              tried: r.triedHosts,
              hosts: answer.outcome.hostsConsidered,
              noFit: answer.outcome.noFit,
              unschedulable: answer.outcome.unschedulable,
            },
          },
        ]
      : [],
    alerts: first ? [{ type: "allocation.no_eligible_host", reason: "NO_CAPACITY" }] : [],
  };
}

/** After the reservation call: provisioning on acceptance, else back to pending with the host marked as tried. */
export function afterReserve(
  r: AllocationRecord,
  result: { accepted: true } | { accepted: false; code: string },
  nowMs: number,
): Change {
  const hostId = r.hostId;
  if (result.accepted) {
    const outcome: PlacementOutcome = {
      at: new Date(nowMs).toISOString(),
      result: "reserved",
      hostId,
      hostsConsidered: r.placement?.hostsConsidered ?? 0,
      noFit: {},
      unschedulable: {},
    };
    return transition(
      r,
      "provisioning",
      { conditions: r.conditions.filter((c) => c !== NO_CAPACITY_CONDITION), placement: outcome },
      null,
      nowMs,
      { hostId },
    );
  }
  const outcome: PlacementOutcome = {
    at: new Date(nowMs).toISOString(),
    result: "rejected",
    hostId,
    hostsConsidered: r.placement?.hostsConsidered ?? 0,
    noFit: { [result.code]: 1 },
    unschedulable: {},
  };
  return transition(
    r,
    "pending",
    {
      hostId: null,
      placementId: null,
      reservationKey: null,
      triedHosts: hostId ? [...r.triedHosts, hostId] : r.triedHosts,
      placement: outcome,
    },
    result.code,
    nowMs,
    { hostId },
  );
}

/** When the alarm should fire next for `r` at `nowMs` (terminal: the retention purge). */
export function nextAlarmAt(r: AllocationRecord, nowMs: number, policy: TimeoutPolicy): number {
  if (TERMINAL_STATES.has(r.state)) return (r.terminalAtMs ?? r.updatedAtMs) + policy.retentionDays * 86_400_000;
  let at = nowMs + MAX_ALARM_DELAY_MS;
  if (r.state === "pending")
    at = Math.min(at, Math.max(nowMs + MIN_ALARM_DELAY_MS, r.nextAttemptAtMs), r.createdAtMs + policy.pendingTimeoutMs);
  if (r.state === "releasing" || r.state === "reserving") at = Math.min(at, nowMs + BUSY_RECHECK_MS);
  if (r.state === "provisioning") at = Math.min(at, r.stateEnteredAtMs + policy.provisioningTimeoutMs);
  if (EXPIRING_STATES.has(r.state)) at = Math.min(at, r.expiresAtMs);
  if (r.state === "suspended") at = Math.min(at, r.stateEnteredAtMs + policy.suspendedMaxAgeMs);
  if (inTransition(r)) at = Math.min(at, nowMs + BUSY_RECHECK_MS);
  if (r.hostId && r.placementId && HOST_STATES.has(r.state)) at = Math.min(at, r.hostCheckAtMs);
  return Math.max(at, nowMs + MIN_ALARM_DELAY_MS);
}
