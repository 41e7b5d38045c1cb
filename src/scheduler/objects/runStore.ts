/**
 * The RunQueue's rows (issue 22, "Runs"): every run's record and events in
 * drizzle's tables of ./runSchema.ts, the open (non-terminal) runs held in
 * memory once read, each tenant's last dispatch, and the API view of a row.
 * Must never: write a row outside the caller's transaction, or show a
 * script or environment in a view.
 */
import { and, desc, eq, gt, isNull, isNotNull, lt, lte, max, sql } from "drizzle-orm";
import type { ObjectStorage } from "../runtime/api.ts";
import { dbFor, fromExcluded, placeholders, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import {
  RUN_QUEUE_DEADLINE_SECONDS,
  type RunEvent,
  type RunOutcome,
  type RunState,
  type RunView,
  type SubmitRunBody,
} from "../../protocol/runs.ts";
import type { RunProgress } from "../../domain/runs.ts";
import { runEventTable, runTable, runTenantTable, type RunRow } from "./runSchema.ts";

const obj = sql.placeholder("obj");
const run = and(eq(runTable.obj, obj), eq(runTable.runId, sql.placeholder("runId")));

function queries(db: ObjectDb) {
  const e = runEventTable;
  return {
    one: db.select().from(runTable).where(run).prepare(),
    script: db
      .select({ scriptBase64: runTable.scriptBase64, envJson: runTable.envJson })
      .from(runTable)
      .where(run)
      .prepare(),
    open: db
      .select()
      .from(runTable)
      .where(and(eq(runTable.obj, obj), isNull(runTable.endedAtMs)))
      .prepare(),
    page: db
      .select()
      .from(runTable)
      .where(
        and(
          eq(runTable.obj, obj),
          eq(runTable.tenant, sql.placeholder("tenant")),
          lt(runTable.seq, sql.placeholder("before")),
        ),
      )
      .orderBy(desc(runTable.seq))
      .limit(sql.placeholder("limit"))
      .prepare(),
    lastSeq: db
      .select({ m: max(runTable.seq) })
      .from(runTable)
      .where(eq(runTable.obj, obj))
      .prepare(),
    recentEnded: db
      .select({ d: runTable.dispatchedAtMs, e: runTable.endedAtMs })
      .from(runTable)
      .where(and(eq(runTable.obj, obj), isNotNull(runTable.endedAtMs), isNotNull(runTable.dispatchedAtMs)))
      .orderBy(desc(runTable.endedAtMs))
      .limit(20)
      .prepare(),
    expired: db
      .select({ runId: runTable.runId })
      .from(runTable)
      .where(and(eq(runTable.obj, obj), lte(runTable.endedAtMs, sql.placeholder("before"))))
      .limit(500)
      .prepare(),
    deleteRun: db.delete(runTable).where(run).prepare(),
    deleteEvents: db
      .delete(e)
      .where(and(eq(e.obj, obj), eq(e.runId, sql.placeholder("runId"))))
      .prepare(),
    insertEvent: db
      .insert(e)
      .values({ obj, ...placeholders("runId", "seq", "type", "state", "atMs", "dataJson") })
      .prepare(),
    lastEvent: db
      .select({ m: max(e.seq) })
      .from(e)
      .where(and(eq(e.obj, obj), eq(e.runId, sql.placeholder("runId"))))
      .prepare(),
    events: db
      .select()
      .from(e)
      .where(and(eq(e.obj, obj), eq(e.runId, sql.placeholder("runId")), gt(e.seq, sql.placeholder("after"))))
      .orderBy(e.seq)
      .limit(sql.placeholder("limit"))
      .prepare(),
    tenants: db.select().from(runTenantTable).where(eq(runTenantTable.obj, obj)).prepare(),
    setTenant: db
      .insert(runTenantTable)
      .values({ obj, ...placeholders("tenant", "lastDispatchAtMs") })
      .onConflictDoUpdate({
        target: [runTenantTable.obj, runTenantTable.tenant],
        set: fromExcluded(runTenantTable, "lastDispatchAtMs"),
      })
      .prepare(),
  };
}

/** The store of one RunQueue instance (see the module header). */
export class RunStore {
  private readonly q;
  private readonly db: ObjectDb;
  /** Open runs by ID (read once; the rows are written through). */
  private openRuns: Map<string, RunRow> | undefined;
  private lastDispatch: Map<string, number> | undefined;
  private readonly eventSeq = new Map<string, number>();
  private nextSeq: number | undefined;

  constructor(
    private readonly storage: ObjectStorage,
    private readonly name: string,
  ) {
    this.q = prepared(storage, queries);
    this.db = dbFor(storage);
  }

  /**
   * The open runs (queued, starting, running, finishing), by ID. The rows in
   * memory leave the script and environment out (a caller controls their
   * size: up to 10,000 waiting runs of a payload each); `script` reads them.
   */
  open(): Map<string, RunRow> {
    if (!this.openRuns) {
      this.openRuns = new Map(this.q.open.all({ obj: this.name }).map((r) => [r.runId, lean(r)]));
    }
    return this.openRuns;
  }

  /** The run's script (base64) and environment (JSON) while it waits for its VM, or null once consumed or ended. */
  script(runId: string): { scriptBase64: string; envJson: string } | null {
    const r = this.q.script.get({ obj: this.name, runId });
    return r?.scriptBase64 ? { scriptBase64: r.scriptBase64, envJson: r.envJson ?? "{}" } : null;
  }

  /** When each tenant was last given a slot (ms; absent: never). */
  tenantDispatch(): Map<string, number> {
    if (!this.lastDispatch)
      this.lastDispatch = new Map(this.q.tenants.all({ obj: this.name }).map((t) => [t.tenant, t.lastDispatchAtMs]));
    return this.lastDispatch;
  }

  /** One run's row (open or not), or null. */
  get(runId: string): RunRow | null {
    return this.open().get(runId) ?? this.q.one.get({ obj: this.name, runId }) ?? null;
  }

  /** `tenant`'s runs with a sequence below `before`, newest first, at most `limit`. */
  page(tenant: string, before: number, limit: number): RunRow[] {
    return this.q.page.all({ obj: this.name, tenant, before, limit });
  }

  /** The next submission sequence number. */
  takeSeq(): number {
    if (this.nextSeq === undefined) this.nextSeq = (this.q.lastSeq.get({ obj: this.name })?.m ?? 0) + 1;
    return this.nextSeq++;
  }

  /** Inserts a new run's row (call inside a transaction). */
  insert(r: RunRow): void {
    this.db.insert(runTable).values(r).run();
    this.open().set(r.runId, lean(r));
  }

  /** Writes `patch` over the run's row (call inside a transaction); a terminal row leaves the open set. */
  update(r: RunRow, patch: Partial<RunRow>): RunRow {
    const next = lean({ ...r, ...patch });
    this.db
      .update(runTable)
      .set(patch)
      .where(and(eq(runTable.obj, this.name), eq(runTable.runId, r.runId)))
      .run();
    if (next.endedAtMs !== null) this.open().delete(r.runId);
    else this.open().set(r.runId, next);
    return next;
  }

  /** Records that `tenant` was given a slot at `atMs` (call inside a transaction). */
  dispatched(tenant: string, atMs: number): void {
    this.q.setTenant.run({ obj: this.name, tenant, lastDispatchAtMs: atMs });
    this.tenantDispatch().set(tenant, atMs);
  }

  /** Appends an event of the run in its state `state` (call inside a transaction). */
  event(runId: string, type: string, state: RunState, atMs: number, data?: Record<string, unknown>): void {
    let seq = this.eventSeq.get(runId);
    if (seq === undefined) seq = this.q.lastEvent.get({ obj: this.name, runId })?.m ?? 0;
    seq += 1;
    this.eventSeq.set(runId, seq);
    this.q.insertEvent.run({
      obj: this.name,
      runId,
      seq,
      type,
      state,
      atMs,
      dataJson: data ? JSON.stringify(data) : null,
    });
  }

  /** The run's events after `after`, oldest first, at most `limit`. */
  events(runId: string, after: number, limit: number): RunEvent[] {
    return this.q.events.all({ obj: this.name, runId, after, limit }).map((e) => ({
      seq: e.seq,
      type: e.type,
      at: new Date(e.atMs).toISOString(),
      runId: e.runId,
      state: e.state as RunState,
      ...(e.dataJson ? { data: JSON.parse(e.dataJson) as Record<string, unknown> } : {}),
    }));
  }

  /** The mean time from dispatch to end of the last 20 ended runs, ms, or null before any ended. */
  meanRunMs(): number | null {
    const rows = this.q.recentEnded.all({ obj: this.name });
    if (rows.length === 0) return null;
    return Math.round(rows.reduce((s, r) => s + (r.e! - r.d!), 0) / rows.length);
  }

  /** Deletes the runs that ended at or before `beforeMs`, with their events (retention), in batches of 500, at most `maxBatches`; answers how many. */
  purge(beforeMs: number, maxBatches = 20): number {
    let n = 0;
    for (let i = 0; i < maxBatches; i++) {
      const got = this.purgeBatch(beforeMs);
      n += got;
      if (got < 500) break;
    }
    return n;
  }

  private purgeBatch(beforeMs: number): number {
    const ids = this.q.expired.all({ obj: this.name, before: beforeMs });
    this.storage.transactionSync(() => {
      for (const { runId } of ids) {
        this.q.deleteRun.run({ obj: this.name, runId });
        this.q.deleteEvents.run({ obj: this.name, runId });
        this.eventSeq.delete(runId);
      }
    });
    return ids.length;
  }
}

/** A submit, authenticated and checked by the front: the run's ID, owner, body and digests. */
export interface SubmitCommand {
  runId: string;
  tenant: string;
  body: SubmitRunBody;
  bodyDigest: string;
  scriptDigest: string;
}

/** The row of a run admitted at `nowMs` with submission sequence `seq` (queued; the script and environment kept until consumed). */
export function newRunRow(objName: string, seq: number, cmd: SubmitCommand, nowMs: number): RunRow {
  const b = cmd.body;
  return {
    obj: objName,
    runId: cmd.runId,
    seq,
    tenant: cmd.tenant,
    clientRequestId: b.clientRequestId,
    bodyDigest: cmd.bodyDigest,
    workloadClass: b.workloadClass,
    state: "queued",
    outcome: null,
    reason: null,
    exitCode: null,
    allocationId: null,
    hostId: null,
    labelsJson: JSON.stringify(b.labels ?? {}),
    budgetMs: b.budgetSeconds * 1000,
    scriptDigest: cmd.scriptDigest,
    scriptBase64: b.scriptBase64,
    envJson: JSON.stringify(b.env ?? {}),
    queuedAtMs: nowMs,
    queueDeadlineAtMs: nowMs + (b.queueDeadlineSeconds ?? RUN_QUEUE_DEADLINE_SECONDS.default) * 1000,
    dispatchedAtMs: null,
    placedAtMs: null,
    readyAtMs: null,
    runningAtMs: null,
    exitedAtMs: null,
    endedAtMs: null,
    cleanupPending: false,
    deliveredGeneration: null,
    dispatchError: null,
  };
}

/** A row as memory keeps it: without the script and environment. */
function lean(r: RunRow): RunRow {
  return r.scriptBase64 === null && r.envJson === null ? r : { ...r, scriptBase64: null, envJson: null };
}

/** The rule inputs of a row (src/domain/runs.ts). */
export function progressOf(r: RunRow): RunProgress {
  return {
    state: r.state as RunState,
    outcome: r.outcome as RunOutcome | null,
    reason: r.reason,
    exitCode: r.exitCode,
    budgetMs: r.budgetMs,
    queueDeadlineAtMs: r.queueDeadlineAtMs,
    dispatchedAtMs: r.dispatchedAtMs,
    placedAtMs: r.placedAtMs,
    readyAtMs: r.readyAtMs,
    runningAtMs: r.runningAtMs,
    exitedAtMs: r.exitedAtMs,
    endedAtMs: r.endedAtMs,
    hostId: r.hostId,
    cleanupPending: r.cleanupPending,
    deliveredGeneration: r.deliveredGeneration,
  };
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** The API view of a row; `queue` is its place while queued (null otherwise). */
export function runView(r: RunRow, queue: RunView["queue"]): RunView {
  const conditions: string[] = [];
  if (r.cleanupPending) conditions.push("CLEANUP_PENDING");
  if (r.dispatchError && r.endedAtMs === null) conditions.push("DISPATCH_RETRYING");
  return {
    runId: r.runId,
    clientRequestId: r.clientRequestId,
    workloadClass: r.workloadClass,
    state: r.state as RunState,
    outcome: r.outcome as RunOutcome | null,
    reason: r.reason ?? (r.dispatchError && r.endedAtMs === null ? r.dispatchError : null),
    exitCode: r.exitCode,
    allocationId: r.allocationId,
    hostId: r.hostId,
    labels: JSON.parse(r.labelsJson) as Record<string, string>,
    budgetSeconds: Math.round(r.budgetMs / 1000),
    scriptDigest: r.scriptDigest,
    conditions,
    queue: r.state === "queued" ? queue : null,
    timings: {
      queuedAt: iso(r.queuedAtMs)!,
      dispatchedAt: iso(r.dispatchedAtMs),
      placedAt: iso(r.placedAtMs),
      readyAt: iso(r.readyAtMs),
      runningAt: iso(r.runningAtMs),
      exitedAt: iso(r.exitedAtMs),
      endedAt: iso(r.endedAtMs),
    },
    queueDeadlineAt: iso(r.queueDeadlineAtMs)!,
    executionDeadlineAt: iso(r.dispatchedAtMs === null ? null : r.dispatchedAtMs + r.budgetMs),
  };
}
