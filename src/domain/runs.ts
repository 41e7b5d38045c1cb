/**
 * The rules of runs (issue 22, "Runs"), without I/O: which queued run a free
 * slot goes to, where each queued run stands, what the job's payload is, and
 * what a run does next given its allocation's latest view and the time.
 *
 * Fairness (the AIec neighbour's order): a free slot goes to the tenant with
 * the fewest active runs, then the one dispatched least recently, then the
 * oldest queued run; within a tenant, oldest first. So a tenant with two
 * running never gets a slot while another waits with none.
 * Recovery is teardown, never replay: a run has one attempt; whatever ends
 * its VM ends the run.
 * Must never: read a clock (callers pass `nowMs`), dispatch a run twice, or
 * end a run before its VM is gone (a run whose cleanup failed keeps its slot).
 */
import type { AllocationView } from "../protocol/api.ts";
import type { RunOutcome, RunState } from "../protocol/runs.ts";

/** A queued run as the order sees it: its owner and its submission sequence (smaller is older). */
export interface QueuedRun {
  runId: string;
  tenant: string;
  seq: number;
}

/** A tenant's share right now: its active runs and when it was last given a slot (ms; 0 never). */
export interface TenantLoad {
  active: number;
  lastDispatchAtMs: number;
}

/**
 * The order in which `queued` would take slots if none ended meanwhile:
 * repeatedly the tenant with the fewest active runs, then the least recently
 * dispatched, then the oldest head run; each pick counts as one more active
 * run of its tenant, dispatched after every earlier pick. `limit` cuts the
 * order short (the first `limit` picks). O(n × tenants).
 */
export function dispatchOrder(
  queued: readonly QueuedRun[],
  load: ReadonlyMap<string, TenantLoad>,
  limit = Number.POSITIVE_INFINITY,
): QueuedRun[] {
  const byTenant = new Map<string, QueuedRun[]>();
  for (const q of [...queued].sort((a, b) => a.seq - b.seq)) {
    const list = byTenant.get(q.tenant);
    if (list) list.push(q);
    else byTenant.set(q.tenant, [q]);
  }
  const now = new Map<string, { active: number; last: number; next: number }>();
  for (const t of byTenant.keys()) {
    const l = load.get(t);
    now.set(t, { active: l?.active ?? 0, last: l?.lastDispatchAtMs ?? 0, next: 0 });
  }
  let clock = Math.max(0, ...[...load.values()].map((l) => l.lastDispatchAtMs));
  const out: QueuedRun[] = [];
  while (out.length < Math.min(limit, queued.length)) {
    let best: string | null = null;
    for (const [t, s] of now) {
      const list = byTenant.get(t)!;
      if (s.next >= list.length) continue;
      if (best === null) {
        best = t;
        continue;
      }
      const b = now.get(best)!;
      const head = list[s.next]!.seq;
      const bestHead = byTenant.get(best)![b.next]!.seq;
      if (s.active !== b.active ? s.active < b.active : s.last !== b.last ? s.last < b.last : head < bestHead) best = t;
    }
    if (best === null) break;
    const s = now.get(best)!;
    out.push(byTenant.get(best)![s.next]!);
    s.next += 1;
    s.active += 1;
    s.last = ++clock;
  }
  return out;
}

/** Quotes `value` for a POSIX shell (single quotes; a quote inside becomes '\''). */
export function shellQuote(value: string): string {
  return `'${value.replaceAll("'", "'\\''")}'`;
}

/**
 * The bootstrap payload of a run: its environment as `export` lines
 * (BEACHBALL_RUN_ID first, then the run's variables in name order), then the
 * script unchanged. The dev image runs a payload with /bin/sh, so a `#!`
 * line of the script is a comment there.
 */
export function runPayload(runId: string, env: Readonly<Record<string, string>>, script: Uint8Array): Uint8Array {
  const lines = [`export BEACHBALL_RUN_ID=${shellQuote(runId)}`];
  for (const k of Object.keys(env).sort()) lines.push(`export ${k}=${shellQuote(env[k]!)}`);
  const head = new TextEncoder().encode(`${lines.join("\n")}\n`);
  const out = new Uint8Array(head.length + script.length);
  out.set(head);
  out.set(script, head.length);
  return out;
}

/** What the run store keeps of one run that the next step depends on (times in ms since the epoch). */
export interface RunProgress {
  state: RunState;
  outcome: RunOutcome | null;
  reason: string | null;
  exitCode: number | null;
  budgetMs: number;
  queueDeadlineAtMs: number;
  dispatchedAtMs: number | null;
  placedAtMs: number | null;
  readyAtMs: number | null;
  runningAtMs: number | null;
  exitedAtMs: number | null;
  endedAtMs: number | null;
  hostId: string | null;
  /** The allocation is known to be terminal with CLEANUP_PENDING or still releasing. */
  cleanupPending: boolean;
  /** The allocation generation the script was handed to, once a delivery began. */
  deliveredGeneration: number | null;
}

/** A change the store applies: new field values, events to write, and what to do after the commit. */
export interface RunStep {
  set: Partial<RunProgress>;
  events: { type: string; data?: Record<string, unknown> }[];
  /** Release the run's allocation (idempotent). */
  release: boolean;
  /** Hand the guest the run's payload (the allocation is ready and the job has not started). */
  deliver: boolean;
}

const none = (): RunStep => ({ set: {}, events: [], release: false, deliver: false });
const TERMINAL_ALLOCATION = new Set(["released", "failed"]);

/** Ends a run that has a VM: the outcome is fixed now, the VM released, the run terminal once the VM is gone. */
function decide(step: RunStep, r: RunProgress, outcome: RunOutcome, reason: string | null, nowMs: number): void {
  if (r.outcome !== null) return;
  step.set.outcome = outcome;
  step.set.reason = reason;
  step.set.state = "finishing";
  if (r.exitedAtMs === null) step.set.exitedAtMs = nowMs;
  step.release = true;
  if (outcome === "timed_out") step.events.push({ type: "run.timed_out", data: { reason } });
  if (outcome === "canceled") step.events.push({ type: "run.canceled" });
}

/**
 * The next step of a run that was dispatched, from its allocation's latest
 * view (null while the allocation does not exist yet) at `nowMs`:
 * - timings from the view (placed, ready) as they first appear;
 * - ready and not running: deliver the payload (never to a generation
 *   after the one it was handed to: a VM replaced after the delivery began,
 *   a fenced host's, fails the run with VM_REPLACED instead, so the job
 *   never runs twice);
 * - an exit code: outcome succeeded (0) or failed (WORKLOAD_FAILED), release;
 * - past dispatchedAt + budget: outcome timed_out (BUDGET_EXCEEDED), release;
 * - the allocation terminal: the run ends, with the outcome fixed before, or
 *   failed with the allocation's reason (the VM ended without an exit code);
 *   a terminal allocation still CLEANUP_PENDING holds the run in finishing.
 */
export function runStep(r: RunProgress, view: AllocationView | null, nowMs: number): RunStep {
  const step = none();
  if (r.endedAtMs !== null || r.dispatchedAtMs === null) return step;
  if (view) {
    if (view.hostId && r.hostId !== view.hostId) step.set.hostId = view.hostId;
    if (view.hostId && r.placedAtMs === null) {
      step.set.placedAtMs = nowMs;
      step.events.push({ type: "run.placed", data: { hostId: view.hostId } });
    }
    if (view.state === "ready" && r.readyAtMs === null) {
      step.set.readyAtMs = nowMs;
      step.events.push({ type: "run.ready" });
    }
    if (view.workloadExitCode !== null && r.exitCode === null && r.outcome === null) {
      step.set.exitCode = view.workloadExitCode;
      step.set.exitedAtMs = nowMs;
      step.events.push({ type: "run.exited", data: { exitCode: view.workloadExitCode } });
      decide(
        step,
        r,
        view.workloadExitCode === 0 ? "succeeded" : "failed",
        view.workloadExitCode === 0 ? null : "WORKLOAD_FAILED",
        nowMs,
      );
    }
  }
  const replaced = view !== null && r.deliveredGeneration !== null && view.generation > r.deliveredGeneration;
  if (replaced && r.outcome === null && step.set.outcome === undefined) decide(step, r, "failed", "VM_REPLACED", nowMs);
  if (r.outcome === null && step.set.outcome === undefined && nowMs >= r.dispatchedAtMs + r.budgetMs)
    decide(step, r, "timed_out", "BUDGET_EXCEEDED", nowMs);
  const terminal = view !== null && TERMINAL_ALLOCATION.has(view.state);
  const cleanupPending = view !== null && view.conditions.includes("CLEANUP_PENDING");
  if (cleanupPending !== r.cleanupPending) step.set.cleanupPending = cleanupPending;
  if (terminal && !cleanupPending) {
    const outcome = step.set.outcome ?? r.outcome;
    if (outcome === null || outcome === undefined) {
      // The VM ended before the job reported an exit: the run failed with the allocation's reason.
      step.set.outcome = "failed";
      step.set.reason = view.reason ?? "VM_GONE";
      if (r.exitedAtMs === null) step.set.exitedAtMs = nowMs;
    }
    step.set.state = (step.set.outcome ?? r.outcome)!;
    step.set.endedAtMs = nowMs;
    step.release = false;
    step.events.push({ type: "run.ended", data: { outcome: step.set.state, reason: step.set.reason ?? r.reason } });
    return step;
  }
  if (view?.state === "ready" && r.runningAtMs === null && (step.set.outcome ?? r.outcome) === null && !replaced)
    step.deliver = true;
  return step;
}

/** Why a queued run ends without a VM at `nowMs`, or null: past its queue deadline (QUEUE_DEADLINE_EXCEEDED). */
export function queuedRunExpired(r: Pick<RunProgress, "queueDeadlineAtMs">, nowMs: number): string | null {
  return nowMs >= r.queueDeadlineAtMs ? "QUEUE_DEADLINE_EXCEEDED" : null;
}

/** The expected start of the run at `position` (0: next) with `slots` slots, from the mean duration of recent runs (ms), or null without one. */
export function estimatedStartMs(
  position: number,
  slots: number,
  meanRunMs: number | null,
  nowMs: number,
): number | null {
  if (meanRunMs === null || slots < 1) return null;
  return nowMs + Math.floor(position / slots) * meanRunMs;
}
