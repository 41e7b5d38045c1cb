/**
 * The Allocation object's storage (spec "Worker and Durable Objects": the
 * stored rows are the truth): its row, read once and kept decoded in memory,
 * its event log, and the messages each change posts to other objects in the
 * same transaction (index view, admission, Network, operator alerts). Every
 * write goes through the drizzle tables (allocationSchema.ts) and the one
 * row codec (allocationRow.ts); only the columns a change touched are
 * updated.
 * Must never: keep an in-memory copy that a failed transaction did not
 * write (every catch forgets what the transaction would have changed), or
 * post a message outside the transaction of the change that implies it.
 */
import { and, asc, desc, eq, gt, like, sql } from "drizzle-orm";
import type { ObjectState } from "../runtime/api.ts";
import { prepared, dbFor, type ObjectDb } from "../runtime/drizzle.ts";
import { BeachballError } from "../../protocol/errors.ts";
import type { AllocationEvent, AllocationView, PlacementExitView } from "../../protocol/api.ts";
import { TERMINAL_STATES, type TimeoutPolicy } from "../../domain/allocation.ts";
import { applied, type AllocationRecord, type Change } from "../../domain/reconcile.ts";
import { runOfAllocation } from "../../domain/identifiers.ts";
import { postLease, postUsage } from "./allocationUsage.ts";
import { GLOBAL, type SchedulerEnv } from "../env.ts";
import { allocationEventTable, allocationTable } from "./allocationSchema.ts";
import {
  changedColumns,
  decodeAllocation,
  encodeAllocation,
  type AllocationRow,
  type StoredAllocation,
} from "./allocationRow.ts";
import { placementExitOf, toAllocationEvent, toAllocationView } from "./allocationView.ts";
import type { AllocationMessage } from "./messages.ts";
import { LogFollowers } from "./allocationLog.ts";
import { ParkedReads } from "./parkedReads.ts";
import { EVENT_FOLLOW_RETRY_AFTER_SECONDS, MAX_EVENT_FOLLOWERS } from "../../protocol/eventFollow.ts";

const queries = (db: ObjectDb) => {
  const obj = sql.placeholder("obj");
  const e = allocationEventTable;
  return {
    row: db.select().from(allocationTable).where(eq(allocationTable.obj, obj)).prepare(),
    lastSeq: db
      .select({ seq: sql<number>`max(${e.seq})` })
      .from(e)
      .where(eq(e.obj, obj))
      .prepare(),
    events: db
      .select()
      .from(e)
      .where(and(eq(e.obj, obj), gt(e.seq, sql.placeholder("after"))))
      .orderBy(asc(e.seq))
      .limit(sql.placeholder("limit"))
      .prepare(),
    lastExit: db
      .select()
      .from(e)
      .where(and(eq(e.obj, obj), eq(e.type, "placement.error"), like(e.dataJson, '%"exitReason"%')))
      .orderBy(desc(e.seq))
      .limit(1)
      .prepare(),
    insertEvent: db
      .insert(e)
      .values({
        obj,
        seq: sql.placeholder("seq"),
        eventId: sql.placeholder("eventId"),
        type: sql.placeholder("type"),
        atMs: sql.placeholder("atMs"),
        generation: sql.placeholder("generation"),
        placementId: sql.placeholder("placementId"),
        hostId: sql.placeholder("hostId"),
        fromState: sql.placeholder("fromState"),
        toState: sql.placeholder("toState"),
        reason: sql.placeholder("reason"),
        dataJson: sql.placeholder("dataJson"),
      })
      .prepare(),
  };
};

/** See the module header. One per Allocation instance. */
export class AllocationStore {
  private readonly q: ReturnType<typeof queries>;
  private readonly db: ObjectDb;
  /** The decoded row (undefined: not read yet; null: no row). */
  private stored: StoredAllocation | null | undefined;
  /** The row as last read or written (to update only the columns that change). */
  private written: AllocationRow | undefined;
  private lastSeq = 0;
  /** The last VM exit its events recorded (undefined: not read since the last placement.error event was written). */
  private lastExit: PlacementExitView | null | undefined;
  /** The index's copy of the view is behind: post it at the end of the pass (one message per pass, not per step). */
  private indexBehind = false;
  /** Follow reads of this allocation's log parked in memory (allocationLog.ts); woken when it ends. */
  readonly followers = new LogFollowers();
  /** Follow reads of this allocation's events parked in memory (src/protocol/eventFollow.ts); woken when an event is written. */
  readonly eventFollowers = new ParkedReads(
    MAX_EVENT_FOLLOWERS,
    `${MAX_EVENT_FOLLOWERS} readers already follow this allocation's events`,
    EVENT_FOLLOW_RETRY_AFTER_SECONDS,
  );

  constructor(
    readonly state: ObjectState<AllocationMessage>,
    readonly env: SchedulerEnv,
  ) {
    this.q = prepared(state.storage, queries);
    this.db = dbFor(state.storage);
  }

  /** Wall time, ms. */
  get now(): number {
    return this.env.clock.wallMs();
  }

  /** The deployment's timeout policy. */
  get policy(): TimeoutPolicy {
    return this.env.config.timeouts;
  }

  /** The stored allocation (read once, then kept). Throws DamagedStateError for a row that fails its checks. */
  load(): StoredAllocation | null {
    if (this.stored !== undefined) return this.stored;
    const row = this.q.row.get({ obj: this.state.name });
    this.stored = row ? decodeAllocation(row) : null;
    this.written = row ?? undefined;
    if (this.stored) this.lastSeq = this.q.lastSeq.get({ obj: this.state.name })?.seq ?? 0;
    return this.stored;
  }

  /** The stored record, or null without a row. */
  rec(): AllocationRecord | null {
    return this.load()?.rec ?? null;
  }

  /** The allocation if `identity` owns it. Throws NOT_FOUND otherwise (another owner looks like absence). */
  owned(identity: string): StoredAllocation {
    const s = this.load();
    if (!s || s.rec.identity !== identity) throw new BeachballError("NOT_FOUND", "no such allocation");
    return s;
  }

  /** Writes a new allocation's row and the change that creates it in one transaction, and posts its first index view in it. */
  insert(s: StoredAllocation, c: Change): void {
    try {
      this.state.storage.transactionSync(() => {
        this.writeRow(s, true);
        this.writeChange(s, c);
        // The index learns of the allocation in the transaction that creates it (a listed allocation without a row is damage).
        this.stored = s;
        // A new allocation has no exit yet (its only event is allocation.created).
        this.lastExit = null;
        this.postIndexView();
      });
    } catch (e) {
      this.forget();
      throw e;
    }
  }

  /** Persists a change atomically: the row, its events, the index view, admission and alert messages, and (optionally) the inbox acknowledgement. */
  persist(c: Change, ackUpTo?: number): void {
    const s = this.load()!;
    const next: StoredAllocation = { ...s, rec: applied(s.rec, c) };
    const touched = Object.keys(c.patch).length > 0;
    if (!touched && c.events.length === 0 && ackUpTo === undefined) return;
    const seqBefore = this.lastSeq;
    try {
      this.state.storage.transactionSync(() => {
        if (touched) this.writeRow(next, false);
        this.writeChange(next, c);
        if (ackUpTo !== undefined) this.state.ackInbox(ackUpTo);
      });
    } catch (e) {
      this.lastSeq = seqBefore;
      this.written = undefined;
      this.lastExit = undefined;
      throw e;
    }
    this.stored = next;
    if (TERMINAL_STATES.has(next.rec.state)) this.followers.wake();
    // After the commit: a woken follow read finds the new events.
    if (c.events.length > 0) this.eventFollowers.wake();
    if (c.transition) reportTransition(this.env, s.rec, next.rec, c.transition, this.now);
  }

  /** Forgets everything kept in memory (a failed create, or the instance deleted itself); the next read loads the row. */
  forget(): void {
    this.stored = undefined;
    this.written = undefined;
    this.lastSeq = 0;
    this.indexBehind = false;
    this.lastExit = undefined;
    // A parked event follow of a deleted allocation answers now (NOT_FOUND on its second read), not at its park's end.
    this.eventFollowers.wake();
  }

  /** Events after sequence `after`, at most `limit`, as the API shows them. */
  events(s: StoredAllocation, after: number, limit: number): AllocationEvent[] {
    return this.q.events.all({ obj: this.state.name, after, limit }).map((e) => toAllocationEvent(e, s.rec));
  }

  /** The view of `s`, with the last VM exit its events recorded (no column: it lives in the placement.error event). */
  view(s: StoredAllocation): AllocationView {
    if (this.lastExit === undefined) this.lastExit = placementExitOf(this.q.lastExit.get({ obj: this.state.name }));
    return toAllocationView(s, this.lastExit);
  }

  /**
   * Posts the current view to the index if it is behind (the latest pending
   * copy is replaced, not queued), versioned by the last event's sequence
   * number: a view is posted only after a pass that wrote events, so the
   * versions of posted views strictly increase and the index can refuse an
   * older one that arrives late.
   */
  postIndexView(): void {
    const s = this.stored;
    if (!this.indexBehind || !s) return;
    this.indexBehind = false;
    const view = this.view(s);
    this.state.postLatest(this.env.AllocationIndex, GLOBAL, `idx:${s.rec.allocationId}`, {
      kind: "upsert",
      identity: s.rec.identity,
      view,
      version: this.lastSeq,
    });
    // A run's allocation tells its run too (issue 22): the RunQueue follows it by message, never by asking.
    if (runOfAllocation(s.rec.clientRequestId) !== null)
      this.state.postLatest(this.env.RunQueue, GLOBAL, `run:${s.rec.allocationId}`, {
        kind: "allocation",
        allocationId: s.rec.allocationId,
        view,
      });
  }

  private writeRow(s: StoredAllocation, insert: boolean): void {
    const row = encodeAllocation(s);
    if (insert) {
      this.db.insert(allocationTable).values(row).run();
      this.written = row;
      return;
    }
    // Only the columns that changed (the statement text repeats per column set; there are few).
    const changed = changedColumns(this.written ?? encodeAllocation(this.load()!), row);
    if (Object.keys(changed).length === 0) return;
    this.db.update(allocationTable).set(changed).where(eq(allocationTable.obj, row.obj)).run();
    this.written = row;
  }

  /** Events, admission, Network and alert messages of a change (inside the caller's transaction); the index view is posted at the end of the pass. */
  private writeChange(s: StoredAllocation, c: Change): void {
    const r = s.rec;
    const now = this.now;
    for (const e of c.events) {
      this.lastSeq++;
      // The view's last exit comes from these events: read it again after one is written.
      if (e.type === "placement.error") this.lastExit = undefined;
      this.q.insertEvent.run({
        obj: r.allocationId,
        seq: this.lastSeq,
        eventId: this.env.random.id("evt"),
        type: e.type,
        atMs: now,
        generation: r.generation,
        placementId: r.placementId,
        hostId: r.hostId,
        fromState: e.fromState ?? null,
        toState: e.toState ?? null,
        reason: e.reason ?? null,
        dataJson: e.data ? JSON.stringify(e.data) : null,
      });
    }
    if (c.events.length > 0) this.indexBehind = true;
    this.postMessages(r, c, now);
    postUsage(this.state, this.env, s, c, now, this.lastSeq);
    postLease(this.state, this.env, s, c, now, this.lastSeq);
  }

  /** The messages a change implies for other objects (inside the caller's transaction). */
  private postMessages(r: AllocationRecord, c: Change, now: number): void {
    if (c.terminal)
      this.state.post(this.env.Admission, GLOBAL, `adm:${r.allocationId}:terminal`, {
        kind: "allocation_terminal",
        allocationId: r.allocationId,
      });
    // Release requested: the Network closes the generation and revokes its grants now, not when the VM is gone.
    if (c.patch.desired === "released" && r.networkId && r.grantGeneration > 0) {
      this.state.post(this.env.Network, r.networkId, `net:${r.allocationId}:close:${r.generation}`, {
        kind: "close_generation",
        allocationId: r.allocationId,
        generation: r.generation,
      });
    }
    // Its placement's cleanup completed: the Network revokes its grants and frees its address once they are gone.
    if (c.terminal && r.networkId)
      this.state.post(this.env.Network, r.networkId, `net:${r.allocationId}:terminal`, {
        kind: "allocation_terminal",
        allocationId: r.allocationId,
      });
    for (const a of c.alerts) {
      const alertId = `alert:${a.type}:${r.allocationId}:${r.generation}:${this.lastSeq}`;
      this.state.post(this.env.Operations, GLOBAL, alertId, {
        kind: "alert",
        alertId,
        type: a.type,
        subject: r.workloadClass,
        reason: a.reason,
        atMs: now,
      });
    }
  }
}

/** Counts and logs a state transition `before.state → next.state` (metrics and the structured log; after the commit). */
function reportTransition(
  env: SchedulerEnv,
  before: AllocationRecord,
  next: AllocationRecord,
  t: NonNullable<Change["transition"]>,
  nowMs: number,
): void {
  const labels: Record<string, string> = { state: t.to, workload_class: next.workloadClass };
  if (t.reason) labels["reason"] = t.reason;
  env.metrics.inc("bb_allocation_transitions_total", "Allocation state transitions", labels);
  // Latencies of the first placement only: a replacement's clock would start at the original create.
  if (next.generation === 1 && (t.to === "provisioning" || t.to === "ready")) {
    const name =
      t.to === "provisioning" ? "bb_allocation_create_to_reserved_seconds" : "bb_allocation_create_to_ready_seconds";
    const help =
      t.to === "provisioning"
        ? "From create to a host accepting the reservation"
        : "From create to the guest running (ready)";
    env.metrics.observe(name, help, (nowMs - next.createdAtMs) / 1000, { workload_class: next.workloadClass });
  }
  env.log.info("allocation state", {
    allocationId: next.allocationId,
    from: before.state,
    to: t.to,
    reason: t.reason ?? null,
    generation: next.generation,
    hostId: next.hostId ?? null,
    workloadClass: next.workloadClass,
  });
}
