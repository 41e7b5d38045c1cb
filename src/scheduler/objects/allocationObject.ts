/**
 * The Allocation object: the authority for one allocation's lifecycle
 * (spec "Allocation lifecycle", "The reconciliation loop", "Replacement").
 *
 * Create asks Admission itself (and, for an allocation admitted before,
 * whether the index lists it), so the front makes one call per create.
 * Every entry (API call, inbox nudge, alarm) runs the same single-flight
 * reconcile pass: read the record, apply the inbox, ask the pure rules
 * (src/domain/reconcile.ts) for the next intent, persist intent and events
 * in one transaction, do the remote work (directory, host), persist the
 * result only if generation and placement still match, re-arm the alarm
 * (≤ 60 s). The record is kept in memory; the row is the truth it was read from.
 * With private networking, create reserves the allocation's /128 in its
 * owner's Network before any host is chosen; connection grants are issued
 * through the Network for the current generation of a ready allocation
 * only; a release request closes the generation at the Network (its grants
 * are revoked at once), and a replacement waits until the Network confirms
 * the old generation's grants are gone (CONNECTIONS_NOT_FENCED).
 * Must never: free or assume freed capacity before the Host reported the
 * placement absent, keep a bootstrap payload, or start fresh when state
 * that must exist is missing.
 */
import { and, asc, desc, eq, getTableColumns, gt, like, sql } from "drizzle-orm";
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { prepared, type ObjectDb } from "../runtime/drizzle.ts";
import { DamagedStateError } from "../runtime/faults.ts";
import { BeachballError } from "../../protocol/errors.ts";
import type { AllocationEvent, AllocationView, CreateAllocationBody, PlacementExitView } from "../../protocol/api.ts";
import type { ConnectionGrantBody, ConnectionGrantResponse } from "../../protocol/connection.ts";
import type { PlacementSpec } from "../../protocol/agent.ts";
import { TERMINAL_STATES } from "../../domain/allocation.ts";
import { defaultNetworkIdFor, reservationKey } from "../../domain/identifiers.ts";
import {
  afterAbsent,
  afterFenceCheck,
  afterFindHost,
  afterHostCheck,
  afterReserve,
  applied,
  applyInput,
  grantRefusal,
  merge,
  NO_CAPACITY_CONDITION,
  nextAlarmAt,
  nextIntent,
  noChange,
  RECONCILE_RETRY_MS,
  releaseOrPlace,
  replace,
  requestRelease,
  REPLACEMENT_BLOCKED,
  type AllocationRecord,
  type Change,
  type Intent,
} from "../../domain/reconcile.ts";
import { GLOBAL, type SchedulerEnv } from "../env.ts";
import type { AdmissionLimits } from "./admissionObject.ts";
import { commandSpecOf } from "./hostTypes.ts";
import { ALLOCATION_TABLES, allocationEventTable, allocationTable } from "./allocationSchema.ts";
import {
  decodeAllocation,
  encodeAllocation,
  placementExitOf,
  toAllocationEvent,
  toAllocationView,
  type StoredAllocation,
} from "./allocationView.ts";
import { AllocationMessage } from "./messages.ts";
import { AppendBudget, appendLogChunk, LogFollowers, logEnd, readLogPage } from "./allocationLog.ts";
import {
  LOG_FOLLOW_WAIT_MS,
  MAX_LOG_READ_BYTES,
  type LogChunk,
  type LogChunkResult,
  type LogPage,
} from "../../protocol/logs.ts";

/** Most reconcile steps in one pass (each step persists one intent). */
export const MAX_STEPS_PER_PASS = 8;

/** A create command, already authenticated and resolved against the workload class, with the admission limits that apply. */
export interface CreateCommand {
  allocationId: string;
  identity: string;
  body: CreateAllocationBody;
  bodyDigest: string;
  spec: PlacementSpec;
  ttlMs: number;
  limits: AdmissionLimits;
}

const queries = (db: ObjectDb) => {
  const obj = sql.placeholder("obj");
  return {
    row: db.select().from(allocationTable).where(eq(allocationTable.obj, obj)).prepare(),
    lastSeq: db
      .select({ seq: sql<number>`max(${allocationEventTable.seq})` })
      .from(allocationEventTable)
      .where(eq(allocationEventTable.obj, obj))
      .prepare(),
    events: db
      .select()
      .from(allocationEventTable)
      .where(and(eq(allocationEventTable.obj, obj), gt(allocationEventTable.seq, sql.placeholder("after"))))
      .orderBy(asc(allocationEventTable.seq))
      .limit(sql.placeholder("limit"))
      .prepare(),
    lastExit: db
      .select()
      .from(allocationEventTable)
      .where(
        and(
          eq(allocationEventTable.obj, obj),
          eq(allocationEventTable.type, "placement.error"),
          like(allocationEventTable.dataJson, '%"exitReason"%'),
        ),
      )
      .orderBy(desc(allocationEventTable.seq))
      .limit(1)
      .prepare(),
  };
};

type Row = typeof allocationTable.$inferInsert;

/** See the module header. */
export class AllocationObject extends AuthorityObject<SchedulerEnv, AllocationMessage> {
  static readonly className = "Allocation";
  static readonly messageSchema = AllocationMessage;
  static readonly tables = ALLOCATION_TABLES;

  private readonly q = prepared(this.state.storage, queries);
  /** The decoded row (undefined: not read yet; null: no row). */
  private stored: StoredAllocation | null | undefined;
  /** The row as last read or written (to update only the columns that change). */
  private written: Row | undefined;
  private lastSeq = 0;
  /** The last VM exit its events recorded (undefined: not read since the last placement.error event was written). */
  private lastExit: PlacementExitView | null | undefined;
  private running: Promise<void> | null = null;
  /** The index's copy of the view is behind: post it at the end of the pass (one message per pass, not per step). */
  private indexBehind = false;
  private again = false;
  /** Follow reads of this allocation's log parked in memory (allocationLog.ts). */
  private readonly followers = new LogFollowers();
  /** The append rate bound of this allocation's log (allocationLog.ts). */
  private readonly logBudget = new AppendBudget();

  constructor(state: ObjectState<AllocationMessage>, env: SchedulerEnv) {
    super(state, env);
  }

  private get now(): number {
    return this.env.clock.now();
  }

  private get policy() {
    return this.env.config.timeouts;
  }

  /** The stored allocation (read once, then kept). Throws DamagedStateError for a row that fails its checks. */
  private load(): StoredAllocation | null {
    if (this.stored !== undefined) return this.stored;
    const row = this.q.row.get({ obj: this.state.name });
    this.stored = row ? decodeAllocation(row) : null;
    this.written = row ?? undefined;
    if (this.stored) this.lastSeq = this.q.lastSeq.get({ obj: this.state.name })?.seq ?? 0;
    return this.stored;
  }

  private rec(): AllocationRecord | null {
    return this.load()?.rec ?? null;
  }

  private owned(identity: string): StoredAllocation {
    const s = this.load();
    if (!s || s.rec.identity !== identity) throw new BeachballError("NOT_FOUND", "no such allocation");
    return s;
  }

  /**
   * Creates the allocation, or returns the existing one for an identical
   * body (a replay is not admitted again). A different body under the same
   * clientRequestId is IDEMPOTENCY_CONFLICT. Admission (rates, quotas) is
   * asked first; an allocation that admission and the index both know but
   * that has no row is damaged state (OBJECT_DAMAGED), never a fresh start.
   * Throws RATE_LIMITED and QUOTA_* from admission.
   */
  async create(cmd: CreateCommand): Promise<{ created: boolean; view: AllocationView }> {
    const replay = this.replayOf(cmd);
    if (replay) return replay;
    const { admittedBefore } = await this.env.Admission.get(GLOBAL).admit(cmd.identity, cmd.allocationId, cmd.limits);
    // A concurrent create of the same allocation may have written the row while admission answered.
    const raced = this.replayOf(cmd);
    if (raced) return raced;
    // Admitted before but no row: a create that never committed (carry on), or state that was lost (the index knows it).
    if (
      admittedBefore &&
      (await this.env.AllocationIndex.get(GLOBAL).has(cmd.identity, cmd.allocationId)) &&
      !this.load()
    ) {
      throw new DamagedStateError(`allocation ${cmd.allocationId} is listed by the index but its state is missing`);
    }
    const again = this.replayOf(cmd);
    if (again) return again;
    // The private address is reserved before any host is chosen (spec "Networks, addresses, and grants"); idempotent per allocation.
    let network: { networkId: string; address: string } | null = null;
    if (this.env.config.connections) {
      network = await this.env.Network.get(defaultNetworkIdFor(cmd.identity)).reserveAllocationAddress(
        cmd.allocationId,
        cmd.identity,
      );
      const late = this.replayOf(cmd);
      if (late) return late;
    }
    if (!admittedBefore)
      this.env.metrics.inc("bb_allocations_admitted_total", "Allocations admitted", {
        workload_class: cmd.body.workloadClass,
      });
    const now = this.now;
    const rec: AllocationRecord = {
      allocationId: cmd.allocationId,
      identity: cmd.identity,
      clientRequestId: cmd.body.clientRequestId,
      workloadClass: cmd.body.workloadClass,
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
      nextAttemptAtMs: now,
      guestReady: false,
      payloadConsumed: false,
      replaceAfterAbsent: false,
      workloadExitCode: null,
      createdAtMs: now,
      updatedAtMs: now,
      stateEnteredAtMs: now,
      expiresAtMs: now + cmd.ttlMs,
      replacementAuthorized: false,
      hostCheckAtMs: now + this.policy.hostCheckIntervalMs,
      terminalAtMs: null,
      placement: null,
      networkId: network?.networkId ?? null,
      address: network?.address ?? null,
      grantGeneration: 0,
      connectionsFencedGeneration: 0,
      pendingReplacement: null,
    };
    const s: StoredAllocation = { rec, spec: cmd.spec, labels: cmd.body.labels ?? {}, bodyDigest: cmd.bodyDigest };
    try {
      this.state.storage.transactionSync(() => {
        this.writeRow(s, true);
        this.writeChange(s, {
          ...noChange(),
          events: [
            {
              type: "allocation.created",
              toState: "pending",
              data: { workloadClass: cmd.body.workloadClass, imageDigest: cmd.spec.imageDigest },
            },
          ],
        });
        // The index learns of the allocation in the transaction that creates it (a listed allocation without a row is damage).
        this.stored = s;
        // A new allocation has no exit yet (its only event is allocation.created).
        this.lastExit = null;
        this.postIndexView();
      });
    } catch (e) {
      this.stored = undefined;
      this.written = undefined;
      this.lastSeq = 0;
      this.indexBehind = false;
      this.lastExit = undefined;
      throw e;
    }
    this.env.log.info("allocation state", {
      allocationId: cmd.allocationId,
      from: null,
      to: "pending",
      reason: null,
      generation: 1,
      hostId: null,
      workloadClass: cmd.body.workloadClass,
      by: cmd.identity,
    });
    await this.reconcile();
    return { created: true, view: this.view(this.load()!) };
  }

  /** The existing allocation for a repeated create (IDEMPOTENCY_CONFLICT for another body), or null. */
  private replayOf(cmd: CreateCommand): { created: false; view: AllocationView } | null {
    const existing = this.load();
    if (!existing) return null;
    if (existing.bodyDigest !== cmd.bodyDigest)
      throw new BeachballError("IDEMPOTENCY_CONFLICT", "clientRequestId was used with a different request body");
    return { created: false, view: this.view(existing) };
  }

  /** The stored body digest, or null if this allocation does not exist yet. */
  peekDigest(): string | null {
    return this.load()?.bodyDigest ?? null;
  }

  /** True if the allocation has a row (for the damaged-state check). */
  exists(): boolean {
    return this.load() !== null;
  }

  /**
   * The allocation as `identity` may see it. Throws NOT_FOUND for another
   * identity; with `listed` (the index lists it for `identity`), a missing
   * row is damaged state (OBJECT_DAMAGED), not absence.
   */
  get(identity: string, listed = false): AllocationView {
    if (listed && !this.load())
      throw new DamagedStateError(`allocation ${this.state.name} is listed by the index but its state is missing`);
    return this.view(this.owned(identity));
  }

  /** Requests release (idempotent) and runs a reconcile pass. */
  async release(identity: string): Promise<AllocationView> {
    const s = this.owned(identity);
    if (s.rec.desired !== "released" && !TERMINAL_STATES.has(s.rec.state))
      this.persist(requestRelease("CLIENT_RELEASE", this.now));
    await this.reconcile();
    return this.view(this.load()!);
  }

  /** Events after sequence `after`, at most `limit`. */
  events(identity: string, after: number, limit: number): AllocationEvent[] {
    const s = this.owned(identity);
    return this.q.events.all({ obj: this.state.name, after, limit }).map((e) => toAllocationEvent(e, s.rec));
  }

  /**
   * Records the controller's certification that it revoked the workload's
   * external authority, unblocking a replacement after readiness (spec
   * "Replacement"). Throws STALE_GENERATION or REPLACEMENT_NOT_BLOCKED.
   */
  async authorizeReplacement(identity: string, generation: number): Promise<AllocationView> {
    const r = this.owned(identity).rec;
    if (generation !== r.generation)
      throw new BeachballError("STALE_GENERATION", `generation ${generation} is not current (${r.generation})`);
    if (!r.conditions.includes(REPLACEMENT_BLOCKED))
      throw new BeachballError("REPLACEMENT_NOT_BLOCKED", "no replacement is blocked for this allocation");
    if (!r.replacementAuthorized) {
      this.persist({
        ...noChange({ replacementAuthorized: true, hostCheckAtMs: 0, updatedAtMs: this.now }),
        events: [{ type: "allocation.replacement_authorized", reason: "CONTROLLER_AUTHORIZED" }],
      });
    }
    await this.reconcile();
    return this.view(this.load()!);
  }

  /**
   * Appends a chunk of workload output pushed by `hostId` (allocationLog.ts):
   * only the host of the current placement may, for that placement and
   * generation; anything else is refused with UNKNOWN_PLACEMENT or
   * STALE_GENERATION in the result. Wakes parked follow reads; counts a
   * gap the agent left (lost output) in bb_log_lost_bytes_total. Throws
   * RATE_LIMITED past the log's append rate (nothing written; only bytes
   * not yet stored count, so a resend is free).
   */
  appendLog(hostId: string, chunk: LogChunk): LogChunkResult {
    const r = this.rec();
    const current =
      r && r.hostId === hostId && r.placementId && r.allocationId === chunk.allocationId
        ? { placementId: r.placementId, generation: r.generation }
        : null;
    const out = this.state.storage.transactionSync(() =>
      appendLogChunk(this.state.storage.sql, this.state.name, current, chunk, (n) => this.logBudget.take(n, this.now)),
    );
    if (out.appended) this.followers.wake();
    if (out.gapBytes > 0)
      this.env.metrics.inc(
        "bb_log_lost_bytes_total",
        "Bytes of workload output lost before they reached the scheduler (gaps agents left in placements' streams)",
        { workload_class: r!.workloadClass },
        out.gapBytes,
      );
    const { appended: _, gapBytes: __, ...result } = out;
    return result;
  }

  /**
   * The owner's read of the log from `offset` (src/protocol/logs.ts,
   * LogPage). With `follow`, a read that finds nothing new parks up to
   * LOG_FOLLOW_WAIT_MS until bytes arrive or the allocation ends. Throws
   * NOT_FOUND (not the owner), LOG_OFFSET_PAST_END, RATE_LIMITED (too many
   * follow reads parked).
   */
  async readLog(identity: string, offset: number, follow: boolean): Promise<LogPage> {
    const page = (): LogPage => {
      const s = this.owned(identity);
      const p = readLogPage(this.state.storage.sql, this.state.name, offset, MAX_LOG_READ_BYTES);
      return {
        ...p,
        complete: TERMINAL_STATES.has(s.rec.state) && p.nextOffset >= logEnd(this.state.storage.sql, this.state.name),
      };
    };
    const first = page();
    if (!follow || first.text || first.complete || first.nextOffset > offset) return first;
    await this.followers.wait(LOG_FOLLOW_WAIT_MS);
    return page();
  }

  /** Ends parked follow reads at once (the embedded host stops); readers resume by offset. */
  override drain(): void {
    this.followers.wake();
  }

  /**
   * Where a bootstrap delivery must go: the current placement, if the
   * generation matches and the guest is ready. Throws STALE_GENERATION (409)
   * or GUEST_NOT_CONNECTED (503).
   */
  deliveryTarget(identity: string, generation: number): { hostId: string; placementId: string; allocationId: string } {
    const r = this.owned(identity).rec;
    if (generation !== r.generation)
      throw new BeachballError("STALE_GENERATION", `generation ${generation} is not current (${r.generation})`);
    if (r.state !== "ready" || !r.hostId || !r.placementId)
      throw new BeachballError("GUEST_NOT_CONNECTED", `allocation is ${r.state}, not ready`);
    return { hostId: r.hostId, placementId: r.placementId, allocationId: r.allocationId };
  }

  /**
   * Issues a connection grant for the current generation (spec "Data
   * path" step 2) through the allocation's Network. Only the owner may
   * (NOT_FOUND otherwise); the allocation must be ready and not being
   * released (INVALID_STATE), of the expected generation if the body names
   * one (STALE_GENERATION). That a grant may exist for this generation is
   * recorded before the Network is asked, so a later replacement waits for
   * it (CONNECTIONS_NOT_FENCED). Throws what the Network throws (FORBIDDEN,
   * RATE_LIMITED, CONNECTIVITY_UNAVAILABLE, STALE_GENERATION).
   */
  async requestConnectionGrant(identity: string, body: ConnectionGrantBody): Promise<ConnectionGrantResponse> {
    const r = this.owned(identity).rec;
    const refused = grantRefusal(r, body.generation);
    if (refused) throw new BeachballError(refused.code, refused.message);
    if (r.grantGeneration < r.generation) this.persist(noChange({ grantGeneration: r.generation }));
    const res = await this.env.Network.get(r.networkId!).issueGrant({
      allocationId: r.allocationId,
      tenant: r.identity,
      workloadClass: r.workloadClass,
      generation: r.generation,
      hostId: r.hostId!,
      placementId: r.placementId!,
      clientPublicKey: body.clientPublicKey,
      transport: body.transport,
      ports: body.ports,
      ttlSeconds: body.ttlSeconds,
    });
    const g = res.grant.payload;
    this.persist({
      ...noChange(),
      events: [
        {
          type: "connection.granted",
          data: {
            grantId: g.grantId,
            generation: g.generation,
            transport: g.transport,
            ports: g.ports,
            expiresAt: new Date(g.expiresAtMs).toISOString(),
          },
        },
      ],
    });
    this.postIndexView();
    return res;
  }

  /** Revokes one of this allocation's grants (owner only, else NOT_FOUND; idempotent). Throws NOT_FOUND for an unknown grant. */
  async revokeConnectionGrant(identity: string, grantId: string): Promise<void> {
    const r = this.owned(identity).rec;
    if (!r.networkId) throw new BeachballError("NOT_FOUND", "no such grant for this allocation");
    const changed = await this.env.Network.get(r.networkId).revokeGrant(r.allocationId, grantId);
    if (changed) {
      this.persist({
        ...noChange(),
        events: [{ type: "connection.revoked", reason: "CLIENT_REVOKED", data: { grantId } }],
      });
      this.postIndexView();
    }
  }

  override async alarm(): Promise<void> {
    const r = this.rec();
    if (!r) return;
    if (TERMINAL_STATES.has(r.state)) return this.purgeIfDue(r);
    await this.reconcile();
  }

  override async onInbox(): Promise<void> {
    await this.reconcile();
  }

  /** Retention: a terminal allocation past its retention purges its index and admission rows, then deletes itself. */
  private purgeIfDue(r: AllocationRecord): void {
    const dueAt = nextAlarmAt(r, this.now, this.policy);
    if (this.now < dueAt) return this.state.setAlarm(dueAt);
    this.state.storage.transactionSync(() => {
      this.state.post(this.env.AllocationIndex, GLOBAL, `idx:${r.allocationId}:purge`, {
        kind: "purge",
        allocationId: r.allocationId,
      });
      this.state.post(this.env.Admission, GLOBAL, `adm:${r.allocationId}:purge`, {
        kind: "allocation_purged",
        allocationId: r.allocationId,
      });
      this.state.setAlarm(null);
    });
    this.stored = undefined;
    this.lastExit = undefined;
    this.state.deleteSelf();
  }

  /** The single reconcile entry point: single-flight (a call during a pass makes the pass run once more and waits for it). */
  reconcile(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      try {
        do {
          this.again = false;
          await this.pass();
        } while (this.again);
      } finally {
        this.running = null;
      }
    })();
    return this.running;
  }

  private async pass(): Promise<void> {
    const r = this.rec();
    if (!r) return;
    // Safety net first: if this pass dies mid-way (say, in a remote call), the alarm resumes it.
    const armed = this.state.getAlarm();
    if (!TERMINAL_STATES.has(r.state) && (armed === null || armed > this.now + RECONCILE_RETRY_MS))
      this.state.setAlarm(this.now + RECONCILE_RETRY_MS);
    try {
      for (let i = 0; i < MAX_STEPS_PER_PASS; i++) if (!(await this.step())) break;
    } finally {
      this.postIndexView();
    }
    const after = this.rec();
    if (after) this.state.setAlarm(nextAlarmAt(after, this.now, this.policy));
  }

  /** One reconcile step; returns true if it persisted progress worth another step. */
  private async step(): Promise<boolean> {
    const r = this.rec();
    if (!r || TERMINAL_STATES.has(r.state)) return false;
    const now = this.now;
    const msgs = this.state.readInbox();
    if (msgs.length > 0) {
      let c = noChange();
      let cur = r;
      for (const m of msgs) {
        const ci = applyInput(cur, m.message, now, this.policy);
        c = merge(c, ci);
        cur = applied(cur, ci);
      }
      this.persist(c, msgs[msgs.length - 1]!.seq);
      if (c.events.length > 0 || Object.keys(c.patch).length > 0) return true;
    }
    let intent: Intent = nextIntent(r, now, this.policy);
    if (intent.type === "check_host") {
      const st = await this.env.Host.get(intent.hostId).placementStatus(intent.placementId);
      const cur = this.rec();
      if (!cur || moved(cur, r)) return true;
      const { change, replaceNow } = afterHostCheck(cur, st, now, this.policy);
      if (replaceNow) {
        await this.env.Host.get(intent.hostId)
          .requestAbsent(intent.placementId, r.generation)
          .catch((e: unknown) => {
            if (e instanceof BeachballError) return false;
            throw e;
          });
        const again = this.rec();
        if (!again || moved(again, r)) return true;
        this.persist(replace(again, "HOST_LOST", now));
        return true;
      }
      this.persist(change);
      const next = this.rec()!;
      if (TERMINAL_STATES.has(next.state)) return false;
      intent = releaseOrPlace(next, now);
    }
    return this.act(intent, now);
  }

  private async act(intent: Intent, now: number): Promise<boolean> {
    const r = this.rec()!;
    switch (intent.type) {
      case "none":
      case "check_host":
        return false;
      case "persist": {
        this.persist(intent.change);
        // A waiter that stops waiting (released or failed while pending) gives up its place in the queue.
        const after = this.rec()!;
        if (r.conditions.includes(NO_CAPACITY_CONDITION) && after.state !== "pending")
          await this.env.HostDirectory.get(GLOBAL).cancelWait(r.allocationId);
        return true;
      }
      case "request_absent": {
        const absent = await this.env.Host.get(intent.hostId).requestAbsent(intent.placementId, r.generation);
        const cur = this.rec();
        if (!absent || !cur || moved(cur, r)) return false;
        this.persist(afterAbsent(cur, now, this.policy));
        return true;
      }
      case "find_host": {
        const spec = this.load()!.spec;
        const answer = await this.env.HostDirectory.get(GLOBAL).candidates({
          allocationId: r.allocationId,
          resources: {
            cpuMillis: spec.cpuMillis,
            memoryMiB: spec.memoryMiB,
            ephemeralDiskMiB: spec.ephemeralDiskMiB,
            slots: 1,
          },
          imageDigest: spec.imageDigest,
          architecture: "x86_64",
          regions: null,
          requiredLabels: {},
          agentProtocolVersion: "1.0",
          exclude: r.triedHosts,
          waiter: { createdAtMs: r.createdAtMs, untilMs: r.createdAtMs + this.policy.pendingTimeoutMs },
        });
        const cur = this.rec();
        if (!cur || cur.state !== "pending" || cur.generation !== r.generation || cur.desired === "released")
          return true;
        const placementId = answer.hostId === null ? "" : this.env.random.id("plc");
        const key = answer.hostId === null ? "" : reservationKey(cur.allocationId, cur.generation, answer.hostId);
        this.persist(afterFindHost(cur, answer, placementId, key, now));
        return answer.hostId !== null;
      }
      case "fence_connections": {
        const answer = await this.env.Network.get(intent.networkId).fenceGeneration(r.allocationId, intent.generation);
        const cur = this.rec();
        if (!cur || moved(cur, r) || cur.pendingReplacement === null) return true;
        // The injected bug (src/scheduler/env.ts InjectedBugs): the old generation counts as fenced at once.
        const fenced = answer.fenced || this.env.config.debug.connectionsNotFenced === true;
        this.persist(afterFenceCheck(cur, fenced, now));
        return fenced;
      }
      case "reserve": {
        const result = await this.env.Host.get(intent.hostId)
          .reserve({
            key: intent.reservationKey,
            allocationId: r.allocationId,
            generation: r.generation,
            placementId: intent.placementId,
            spec: commandSpecOf(this.load()!.spec, r.address),
          })
          .catch((e: unknown) => {
            if (e instanceof BeachballError) return { accepted: false as const, code: e.code };
            throw e;
          });
        const cur = this.rec();
        if (!cur || cur.state !== "reserving" || moved(cur, r)) return false;
        this.persist(afterReserve(cur, result, now));
        return true;
      }
    }
  }

  /** Persists a change atomically: the row, its events, the index view, admission and alert messages, and (optionally) the inbox acknowledgement. */
  private persist(c: Change, ackUpTo?: number): void {
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
    if (c.transition) {
      const labels: Record<string, string> = { state: c.transition.to, workload_class: next.rec.workloadClass };
      if (c.transition.reason) labels["reason"] = c.transition.reason;
      this.env.metrics.inc("bb_allocation_transitions_total", "Allocation state transitions", labels);
      // Latencies of the first placement only: a replacement's clock would start at the original create.
      if (next.rec.generation === 1 && (c.transition.to === "provisioning" || c.transition.to === "ready")) {
        const name =
          c.transition.to === "provisioning"
            ? "bb_allocation_create_to_reserved_seconds"
            : "bb_allocation_create_to_ready_seconds";
        const help =
          c.transition.to === "provisioning"
            ? "From create to a host accepting the reservation"
            : "From create to the guest running (ready)";
        this.env.metrics.observe(name, help, (this.now - next.rec.createdAtMs) / 1000, {
          workload_class: next.rec.workloadClass,
        });
      }
      this.env.log.info("allocation state", {
        allocationId: next.rec.allocationId,
        from: s.rec.state,
        to: c.transition.to,
        reason: c.transition.reason ?? null,
        generation: next.rec.generation,
        hostId: next.rec.hostId ?? null,
        workloadClass: next.rec.workloadClass,
      });
    }
  }

  private writeRow(s: StoredAllocation, insert: boolean): void {
    const row: Row = encodeAllocation(s);
    if (insert) {
      this.state.storage.sql.exec(INSERT_SQL, ...values(row, false));
      this.written = row;
      return;
    }
    // Only the columns that changed (the statement is cached per column set; there are few).
    const before = this.written ?? encodeAllocation(this.load()!);
    const changed = COLUMNS.filter(([k]) => k !== "obj" && row[k] !== before[k]);
    if (changed.length === 0) return;
    this.state.storage.sql.exec(
      `UPDATE allocation SET ${changed.map(([, c]) => `${c.name} = ?`).join(", ")} WHERE obj = ?`,
      ...changed.map(([k]) => dbValue(row[k])),
      row.obj,
    );
    this.written = row;
  }

  /** The view of `s`, with the last VM exit its events recorded (no column: it lives in the placement.error event). */
  private view(s: StoredAllocation): AllocationView {
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
  private postIndexView(): void {
    const s = this.stored;
    if (!this.indexBehind || !s) return;
    this.indexBehind = false;
    this.state.postLatest(this.env.AllocationIndex, GLOBAL, `idx:${s.rec.allocationId}`, {
      kind: "upsert",
      identity: s.rec.identity,
      view: this.view(s),
      version: this.lastSeq,
    });
  }

  /** Events, admission and alert messages of a change (inside the caller's transaction); the index view is posted at the end of the pass. */
  private writeChange(s: StoredAllocation, c: Change): void {
    const r = s.rec;
    const now = this.now;
    for (const e of c.events) {
      this.lastSeq++;
      // The view's last exit comes from these events: read it again after one is written.
      if (e.type === "placement.error") this.lastExit = undefined;
      this.state.storage.sql.exec(
        "INSERT INTO allocation_events (obj, seq, event_id, type, at_ms, generation, placement_id, host_id, from_state, to_state, reason, data_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        r.allocationId,
        this.lastSeq,
        this.env.random.id("evt"),
        e.type,
        now,
        r.generation,
        r.placementId,
        r.hostId,
        e.fromState ?? null,
        e.toState ?? null,
        e.reason ?? null,
        e.data ? JSON.stringify(e.data) : null,
      );
    }
    if (c.events.length > 0) this.indexBehind = true;
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

/** True if the placement or generation changed since `before` (a late answer must not be applied). */
function moved(cur: AllocationRecord, before: AllocationRecord): boolean {
  return cur.placementId !== before.placementId || cur.generation !== before.generation;
}

const COLUMNS = Object.entries(getTableColumns(allocationTable)) as [keyof Row, { name: string }][];
const INSERT_SQL = `INSERT INTO allocation (${COLUMNS.map(([, c]) => c.name).join(", ")}) VALUES (${COLUMNS.map(() => "?").join(", ")})`;

/** A value as SQLite stores it (booleans as 0/1, as drizzle's boolean mode does). */
function dbValue(v: unknown): unknown {
  return typeof v === "boolean" ? (v ? 1 : 0) : (v ?? null);
}

/** Column values of `row` in COLUMNS order. */
function values(row: Row, skipObj: boolean): unknown[] {
  const out: unknown[] = [];
  for (const [k] of COLUMNS) if (!skipObj || k !== "obj") out.push(dbValue(row[k]));
  return out;
}
