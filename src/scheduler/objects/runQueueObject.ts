/**
 * The RunQueue object (issue 22, "Runs"; one instance, GLOBAL, until the
 * queue is sharded): admits runs into a durable queue (the run and its
 * place in it are one row, written in one transaction), gives free slots
 * fairly between tenants (src/domain/runs.ts, dispatchOrder), creates each
 * dispatched run's allocation under the run's owner, hands its guest the
 * script once it is ready, and ends the run once its VM is gone.
 *
 * It follows its allocations by message (the Allocation posts a run's
 * allocation's views here, as it does to the index) and calls them one way
 * only (create, release, the delivery through the Host), never awaited in a
 * transaction. A dispatch repeated after a crash creates the same
 * allocation (its clientRequestId is `run/<runId>`) and delivers with the
 * same deliveryId, so no run runs twice; recovery is teardown, never
 * replay. docs/adr/0190-runs-in-one-queue-object.md.
 * Must never: let a run end before its VM is gone (a failed cleanup keeps
 * its slot), extend a budget, or show a script in a view or an event.
 */
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { BeachballError } from "../../protocol/errors.ts";
import type { AllocationView } from "../../protocol/api.ts";
import { type RunEvent, type RunState, type RunPage, type RunView, type SubmitRunBody } from "../../protocol/runs.ts";
import {
  EVENT_FOLLOW_RETRY_AFTER_SECONDS,
  EVENT_FOLLOW_WAIT_MS,
  MAX_EVENT_FOLLOWERS,
} from "../../protocol/eventFollow.ts";
import { dispatchOrder, estimatedStartMs, queuedRunExpired, runStep, type RunStep } from "../../domain/runs.ts";
import type { SchedulerEnv } from "../env.ts";
import { Bucket } from "./admissionObject.ts";
import { RunQueueMessage } from "./messages.ts";
import { ParkedReads } from "./parkedReads.ts";
import { RunStore, newRunRow, type SubmitCommand, progressOf, runView } from "./runStore.ts";
import type { RunRow } from "./runSchema.ts";
import { runActions, type RunAction } from "./runActions.ts";

export type { SubmitCommand } from "./runStore.ts";

/** How often the queue re-reads its open runs' allocations and deadlines when nothing else wakes it, ms. */
export const RUN_RESYNC_MS = 10_000;
/** A view older than this is read again from its allocation, ms. */
const VIEW_STALE_MS = 30_000;
/** Most runs with event follows parked at once. */
const MAX_FOLLOWED_RUNS = 10_000;
/** How often terminal runs past retention are purged, ms. */
const PURGE_EVERY_MS = 3_600_000;

/** See the module header. */
export class RunQueueObject extends AuthorityObject<SchedulerEnv, RunQueueMessage> {
  static readonly className = "RunQueue";
  static readonly messageSchema = RunQueueMessage;
  static readonly tables = ["run_records", "run_events", "run_tenants"] as const;

  private readonly store: RunStore;
  /** The latest view of each open run's allocation, with when it arrived (ms). */
  private readonly views = new Map<string, { view: AllocationView; atMs: number }>();
  /** Actions under way, by `<kind>:<runId>` (one of each kind per run at a time). */
  private readonly inflight = new Set<string>();
  private readonly followers = new Map<string, ParkedReads>();
  /** When a run whose create was refused may try again, and how many times it was (memory only: a restart tries at once). */
  private readonly retryAt = new Map<string, { atMs: number; attempts: number }>();
  private readonly buckets = new Map<string, Bucket>();
  private order: Map<string, number> | null = null;
  private pumping = false;
  private again = false;
  private nextPurgeAtMs = 0;
  private readonly actions;

  constructor(state: ObjectState<RunQueueMessage>, env: SchedulerEnv) {
    super(state, env);
    this.store = new RunStore(state.storage, state.name);
    this.actions = runActions(env, {
      row: (id) => this.store.open().get(id) ?? null,
      script: (id) => this.store.script(id),
      retryLater: (id) => {
        const attempts = (this.retryAt.get(id)?.attempts ?? 0) + 1;
        this.retryAt.set(id, { atMs: this.env.clock.wallMs() + Math.min(30_000, 500 * 2 ** attempts), attempts });
      },
      retried: (id) => this.retryAt.delete(id),
      view: (allocationId) => this.views.get(allocationId)?.view ?? null,
      noteView: (v) => this.noteView(v),
      change: (r, patch, events) => this.change(r, patch, events),
      kick: () => this.kick(),
    });
  }

  private get limits() {
    const l = this.env.config.manifest.limits;
    return {
      maxActive: l.maxActiveRuns ?? 4,
      maxQueuedPerTenant: l.maxQueuedRunsPerController ?? 1000,
      maxQueued: l.maxQueuedRuns ?? 10_000,
      rps: l.controllerRequestsPerSecond ?? 50,
    };
  }

  /**
   * Admits a run (or answers the existing one for a repeated body). Throws
   * IDEMPOTENCY_CONFLICT (another body under the key), RATE_LIMITED (the
   * tenant's submit rate), QUOTA_QUEUED_RUNS (the tenant's or the
   * deployment's waiting runs at their bound; Retry-After from the mean run
   * time). Nothing is written for a refusal.
   */
  submit(cmd: SubmitCommand): { created: boolean; view: RunView } {
    const existing = this.store.get(cmd.runId);
    if (existing) {
      if (existing.bodyDigest !== cmd.bodyDigest)
        throw new BeachballError("IDEMPOTENCY_CONFLICT", "clientRequestId was used with a different request body");
      return { created: false, view: this.viewOf(existing) };
    }
    const now = this.env.clock.wallMs();
    const lim = this.limits;
    let bucket = this.buckets.get(cmd.tenant);
    if (!bucket) this.buckets.set(cmd.tenant, (bucket = new Bucket(lim.rps, now)));
    const wait = bucket.take(now);
    if (wait > 0) throw new BeachballError("RATE_LIMITED", "run submit rate exceeded", { retryAfterSeconds: wait });
    const queued = [...this.store.open().values()].filter((r) => r.state === "queued");
    const mine = queued.filter((r) => r.tenant === cmd.tenant).length;
    if (mine >= lim.maxQueuedPerTenant || queued.length >= lim.maxQueued) {
      const retry = Math.max(1, Math.ceil((this.store.meanRunMs() ?? 10_000) / 1000 / lim.maxActive));
      throw new BeachballError(
        "QUOTA_QUEUED_RUNS",
        mine >= lim.maxQueuedPerTenant
          ? `you have ${mine} runs waiting; the limit is ${lim.maxQueuedPerTenant}`
          : `the deployment has ${queued.length} runs waiting; the limit is ${lim.maxQueued}`,
        { retryAfterSeconds: retry, limit: mine >= lim.maxQueuedPerTenant ? lim.maxQueuedPerTenant : lim.maxQueued },
      );
    }
    const b = cmd.body;
    const row = newRunRow(this.state.name, this.store.takeSeq(), cmd, now);
    this.state.storage.transactionSync(() => {
      this.store.insert(row);
      this.store.event(row.runId, "run.queued", "queued", now, { workloadClass: b.workloadClass });
      this.state.setAlarm(now);
    });
    this.order = null;
    this.env.metrics.inc("bb_runs_submitted_total", "Runs admitted into the queue", {
      workload_class: b.workloadClass,
    });
    this.kick();
    return { created: true, view: this.viewOf(row) };
  }

  /** The owner's view of a run. Throws NOT_FOUND (also for another tenant's run). */
  get(tenant: string, runId: string): RunView {
    return this.viewOf(this.owned(tenant, runId));
  }

  /** The tenant's runs, newest first, below the sequence `cursor` (null: from the newest), at most `limit`. */
  list(tenant: string, cursor: number | null, limit: number): RunPage {
    const rows = this.store.page(tenant, cursor ?? Number.MAX_SAFE_INTEGER, limit);
    return {
      items: rows.map((r) => this.viewOf(this.store.open().get(r.runId) ?? r)),
      nextCursor: rows.length === limit ? rows[rows.length - 1]!.seq : null,
    };
  }

  /** Where the run's output is: its allocation once dispatched; `ended` once terminal. Throws NOT_FOUND. */
  logSource(tenant: string, runId: string): { allocationId: string | null; ended: boolean; lastEventSeq: number } {
    const r = this.owned(tenant, runId);
    const events = this.store.events(runId, 0, 1_000);
    return {
      allocationId: r.allocationId,
      ended: r.endedAtMs !== null,
      lastEventSeq: events.length ? events[events.length - 1]!.seq : 0,
    };
  }

  /**
   * The run's events after `after`; `follow` parks a read that finds none up
   * to EVENT_FOLLOW_WAIT_MS (bounded: RATE_LIMITED past MAX_EVENT_FOLLOWERS
   * per run). Throws NOT_FOUND.
   */
  async events(tenant: string, runId: string, after: number, limit: number, follow = false): Promise<RunEvent[]> {
    const r = this.owned(tenant, runId);
    const first = this.store.events(runId, after, limit);
    if (!follow || first.length > 0 || r.endedAtMs !== null) return first;
    let parked = this.followers.get(runId);
    if (!parked) {
      if (this.followers.size >= MAX_FOLLOWED_RUNS)
        throw new BeachballError("RATE_LIMITED", "too many runs followed at once", {
          retryAfterSeconds: EVENT_FOLLOW_RETRY_AFTER_SECONDS,
        });
      parked = new ParkedReads(
        MAX_EVENT_FOLLOWERS,
        "too many event follows on this run",
        EVENT_FOLLOW_RETRY_AFTER_SECONDS,
      );
      this.followers.set(runId, parked);
    }
    await parked.wait(EVENT_FOLLOW_WAIT_MS);
    return this.store.events(runId, after, limit);
  }

  /**
   * Cancels a run (idempotent): a queued one ends canceled at once; one with
   * a VM is decided canceled and its VM released (it ends once the VM is
   * gone); an ended one is unchanged. Throws NOT_FOUND.
   */
  cancel(tenant: string, runId: string): RunView {
    const r = this.owned(tenant, runId);
    const now = this.env.clock.wallMs();
    if (r.state === "queued") {
      this.change(r, { state: "canceled", outcome: "canceled", reason: "CANCELED", endedAtMs: now }, [
        { type: "run.canceled" },
        { type: "run.ended", data: { outcome: "canceled", reason: "CANCELED" } },
      ]);
    } else if (r.endedAtMs === null && r.outcome === null) {
      this.change(r, { state: "finishing", outcome: "canceled", reason: "CANCELED", exitedAtMs: r.exitedAtMs ?? now }, [
        { type: "run.canceled" },
      ]);
      this.kick();
    }
    return this.get(tenant, runId);
  }

  override onInbox(): void {
    this.kick();
  }

  override alarm(): void {
    this.kick();
  }

  override drain(): void {
    for (const f of this.followers.values()) f.wake();
  }

  private owned(tenant: string, runId: string): RunRow {
    const r = this.store.get(runId);
    if (!r || r.tenant !== tenant) throw new BeachballError("NOT_FOUND", "no such run");
    return r;
  }

  private viewOf(r: RunRow): RunView {
    if (r.state !== "queued") return runView(r, null);
    if (!this.order) {
      const queued = [...this.store.open().values()].filter((q) => q.state === "queued");
      this.order = new Map(dispatchOrder(queued, this.load()).map((q, i) => [q.runId, i]));
    }
    const position = this.order.get(r.runId) ?? 0;
    const est = estimatedStartMs(position, this.limits.maxActive, this.store.meanRunMs(), this.env.clock.wallMs());
    return runView(r, { position, estimatedStartAt: est === null ? null : new Date(est).toISOString() });
  }

  /** Each tenant's active runs and last dispatch. */
  private load() {
    const load = new Map<string, { active: number; lastDispatchAtMs: number }>();
    for (const [t, at] of this.store.tenantDispatch()) load.set(t, { active: 0, lastDispatchAtMs: at });
    for (const r of this.store.open().values()) {
      if (r.state === "queued") continue;
      const l = load.get(r.tenant) ?? { active: 0, lastDispatchAtMs: 0 };
      l.active += 1;
      load.set(r.tenant, l);
    }
    return load;
  }

  private noteView(v: AllocationView): void {
    this.views.set(v.allocationId, { view: v, atMs: this.env.clock.wallMs() });
  }

  /** Writes `patch` and `events` of run `r` in one transaction, wakes its followers, and forgets an ended run's memory. */
  private change(r: RunRow, patch: Partial<RunRow>, events: RunStep["events"]): RunRow {
    const now = this.env.clock.wallMs();
    const ended = patch.endedAtMs !== undefined && patch.endedAtMs !== null;
    if (ended) Object.assign(patch, { scriptBase64: null, envJson: null });
    const next = this.state.storage.transactionSync(() => {
      const n = this.store.update(r, patch);
      for (const e of events) this.store.event(r.runId, e.type, n.state as RunState, now, e.data);
      return n;
    });
    if (patch.state !== undefined || ended) this.order = null;
    if (events.length) this.followers.get(r.runId)?.wake();
    if (ended) {
      this.followers.get(r.runId)?.wake();
      this.followers.delete(r.runId);
      if (r.allocationId) this.views.delete(r.allocationId);
      this.retryAt.delete(r.runId);
      this.env.metrics.inc("bb_runs_ended_total", "Runs ended, by outcome", { result: String(next.state) });
    }
    return next;
  }

  /** One pass at a time (a pass is synchronous; a wake-up from inside one runs one more after it). */
  private kick(): void {
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = true;
    try {
      do {
        this.again = false;
        this.pass();
      } while (this.again);
    } finally {
      this.pumping = false;
    }
  }

  /** Applies the inbox, steps every open run, fills free slots, starts the actions that follow, and re-arms the alarm. */
  private pass(): void {
    const msgs = this.state.readInbox();
    for (const { message: m } of msgs) this.noteView(m.view);
    if (msgs.length) this.state.storage.transactionSync(() => this.state.ackInbox(msgs[msgs.length - 1]!.seq));
    const now = this.env.clock.wallMs();
    const pending: RunAction[] = [];
    for (const r of [...this.store.open().values()]) this.stepOne(r, now, pending);
    this.fill(now, pending);
    if (now >= this.nextPurgeAtMs) {
      this.nextPurgeAtMs = now + PURGE_EVERY_MS;
      this.store.purge(now - this.env.config.timeouts.retentionDays * 86_400_000);
    }
    this.armAlarm(now);
    for (const a of pending) {
      const key = `${a.kind}:${a.runId}`;
      if (this.inflight.has(key)) continue;
      this.inflight.add(key);
      void this.actions.run(a).finally(() => this.inflight.delete(key));
    }
  }

  private stepOne(r: RunRow, now: number, pending: RunAction[]): void {
    if (r.state === "queued") {
      const why = queuedRunExpired(r, now);
      if (why)
        this.change(r, { state: "timed_out", outcome: "timed_out", reason: why, endedAtMs: now }, [
          { type: "run.timed_out", data: { reason: why } },
          { type: "run.ended", data: { outcome: "timed_out", reason: why } },
        ]);
      return;
    }
    const seen = r.allocationId ? this.views.get(r.allocationId) : undefined;
    // A create refused for a while (a quota, a rate) is tried again after a backoff, not on every pass.
    if ((!seen || now - seen.atMs > VIEW_STALE_MS) && now >= (this.retryAt.get(r.runId)?.atMs ?? 0))
      pending.push({ kind: "sync", runId: r.runId });
    // Without a view the budget still runs out: the run is decided timed_out and its allocation, if any, released.
    const step = runStep(progressOf(r), seen?.view ?? null, now);
    const next =
      Object.keys(step.set).length || step.events.length ? this.change(r, step.set as Partial<RunRow>, step.events) : r;
    if (next.endedAtMs !== null || !seen) return;
    if (step.deliver) pending.push({ kind: "deliver", runId: r.runId });
    const v = seen.view.state;
    if (next.state === "finishing" && v !== "releasing" && v !== "released" && v !== "failed")
      pending.push({ kind: "release", runId: r.runId });
  }

  /** Gives free slots to queued runs in the fair order (src/domain/runs.ts). */
  private fill(now: number, pending: RunAction[]): void {
    const open = [...this.store.open().values()];
    const free = this.limits.maxActive - open.filter((r) => r.state !== "queued").length;
    if (free <= 0) return;
    const queued = open.filter((r) => r.state === "queued");
    if (queued.length === 0) return;
    for (const pick of dispatchOrder(queued, this.load(), free)) {
      const r = this.store.open().get(pick.runId)!;
      const allocationId = this.actions.allocationIdOf(r);
      this.state.storage.transactionSync(() => this.store.dispatched(r.tenant, now));
      this.change(r, { state: "starting", dispatchedAtMs: now, allocationId }, [
        { type: "run.dispatched", data: { allocationId, waitedMs: now - r.queuedAtMs } },
      ]);
      this.env.metrics.observe(
        "bb_run_queue_wait_seconds",
        "Time runs waited in the queue before dispatch",
        (now - r.queuedAtMs) / 1000,
      );
      pending.push({ kind: "sync", runId: r.runId });
    }
  }

  private armAlarm(now: number): void {
    let at: number | null = null;
    const soonest = (t: number) => {
      at = at === null ? t : Math.min(at, t);
    };
    for (const r of this.store.open().values()) {
      if (r.state === "queued") soonest(r.queueDeadlineAtMs);
      else {
        soonest(now + RUN_RESYNC_MS);
        const retry = this.retryAt.get(r.runId)?.atMs;
        if (retry !== undefined && retry > now) soonest(retry);
        // Only deadlines still ahead: one already passed was decided in this pass.
        if (r.outcome === null && r.dispatchedAtMs !== null && r.dispatchedAtMs + r.budgetMs > now)
          soonest(r.dispatchedAtMs + r.budgetMs);
      }
    }
    this.state.storage.transactionSync(() => this.state.setAlarm(at === null ? null : Math.max(at, now + 50)));
  }
}
