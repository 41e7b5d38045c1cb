/**
 * The Allocation object: the authority for one allocation's lifecycle
 * (spec "Allocation lifecycle", "The reconciliation loop", "Replacement").
 * A thin shell over the pure rules (src/domain/reconcile.ts,
 * src/domain/allocation.ts): its public calls, the single-flight reconcile
 * pass and retention; the rest lives beside it, one idea a file:
 * creation and admission (allocationCreate.ts), one reconcile step and the
 * placement request (allocationPlacement.ts), connection grants
 * (allocationConnections.ts), the row, events and outgoing messages
 * (allocationStore.ts, through the one codec allocationRow.ts), the API
 * views (allocationView.ts) and the log (allocationLog.ts).
 *
 * Every entry (API call, inbox nudge, alarm) runs the same single-flight
 * reconcile pass: read the record, apply the inbox, ask the pure rules for
 * the next intent, persist intent and events in one transaction, do the
 * remote work (directory, host), persist the result only if generation and
 * placement still match, re-arm the alarm (≤ 60 s). The record is kept in
 * memory; the row is the truth it was read from.
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
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { DamagedStateError } from "../runtime/faults.ts";
import { BeachballError } from "../../protocol/errors.ts";
import type { AllocationEvent, AllocationView } from "../../protocol/api.ts";
import type { ConnectionGrantBody, ConnectionGrantResponse } from "../../protocol/connection.ts";
import { TERMINAL_STATES } from "../../domain/allocation.ts";
import {
  nextAlarmAt,
  noChange,
  RECONCILE_RETRY_MS,
  requestRelease,
  REPLACEMENT_BLOCKED,
  type AllocationRecord,
  type Change,
} from "../../domain/reconcile.ts";
import { GLOBAL, type SchedulerEnv } from "../env.ts";
import { ALLOCATION_TABLES } from "./allocationSchema.ts";
import { AllocationMessage } from "./messages.ts";
import { AppendBudget, appendLogChunk, logEnd, readLogPage } from "./allocationLog.ts";
import { EVENT_FOLLOW_WAIT_MS } from "../../protocol/eventFollow.ts";
import { RUN_LOG_RING_BYTES } from "../../protocol/runs.ts";
import { runOfAllocation } from "../../domain/identifiers.ts";
import { AllocationStore } from "./allocationStore.ts";
import type { StoredAllocation } from "./allocationRow.ts";
import { createAllocation, type CreateCommand, type CreateResult } from "./allocationCreate.ts";
import { reconcileStep } from "./allocationPlacement.ts";
import { forkSourceOf, requestAway, requestResume, type ForkParent } from "./allocationPause.ts";
import { requestConnectionGrant, revokeConnectionGrant } from "./allocationConnections.ts";
import {
  LOG_FOLLOW_WAIT_MS,
  LOG_RING_BYTES,
  MAX_LOG_READ_BYTES,
  type LogChunk,
  type LogChunkResult,
  type LogPage,
} from "../../protocol/logs.ts";

export type { CreateCommand } from "./allocationCreate.ts";

/** Most reconcile steps in one pass (each step persists one intent). */
export const MAX_STEPS_PER_PASS = 8;

/** See the module header. */
export class AllocationObject extends AuthorityObject<SchedulerEnv, AllocationMessage> {
  static readonly className = "Allocation";
  static readonly messageSchema = AllocationMessage;
  static readonly tables = ALLOCATION_TABLES;

  /** The row, its events and what they post (read once, then kept). */
  private readonly store: AllocationStore;
  private running: Promise<void> | null = null;
  private again = false;
  /** The append rate bound of this allocation's log (allocationLog.ts). */
  private readonly logBudget = new AppendBudget();

  constructor(state: ObjectState<AllocationMessage>, env: SchedulerEnv) {
    super(state, env);
    this.store = new AllocationStore(state, env);
  }

  private get now(): number {
    return this.env.clock.wallMs();
  }

  private rec(): AllocationRecord | null {
    return this.store.rec();
  }

  private owned(identity: string): StoredAllocation {
    return this.store.owned(identity);
  }

  private persist(c: Change): void {
    this.store.persist(c);
  }

  private view(s: StoredAllocation): AllocationView {
    return this.store.view(s);
  }

  private load(): StoredAllocation | null {
    return this.store.load();
  }

  /**
   * Creates the allocation, or returns the existing one for an identical
   * body (a replay is not admitted again), then runs a reconcile pass
   * (allocationCreate.ts). A different body under the same
   * clientRequestId is IDEMPOTENCY_CONFLICT. Admission (rates, quotas) is
   * asked first; an allocation that admission and the index both know but
   * that has no row is damaged state (OBJECT_DAMAGED), never a fresh start.
   * Throws RATE_LIMITED and QUOTA_* from admission.
   */
  create(cmd: CreateCommand): Promise<CreateResult> {
    return createAllocation(this.store, cmd, () => this.reconcile());
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

  /** Asks for the VM to be paused (issue 21): allocationPause.ts requestAway. Throws NOT_FOUND, INVALID_STATE. */
  pause(identity: string): Promise<AllocationView> {
    return requestAway(this.store, identity, "paused", () => this.reconcile());
  }

  /** Asks for the VM to be suspended (issue 21): allocationPause.ts requestAway. Throws NOT_FOUND, NOT_SUSPENDABLE, INVALID_STATE. */
  suspend(identity: string): Promise<AllocationView> {
    return requestAway(this.store, identity, "suspended", () => this.reconcile());
  }

  /** Asks for a paused or suspended VM to run again (issue 21): allocationPause.ts requestResume. Throws NOT_FOUND, INVALID_STATE. */
  resume(identity: string): Promise<AllocationView> {
    return requestResume(this.store, identity, () => this.reconcile());
  }

  /** What a fork of this allocation copies (issue 21): allocationPause.ts forkSourceOf. Throws NOT_FOUND, INVALID_STATE, PAYLOAD_CONSUMED. */
  forkSource(identity: string, allowConsumedPayload: boolean): ForkParent {
    return forkSourceOf(this.store, identity, allowConsumedPayload);
  }

  /**
   * Events after sequence `after`, at most `limit`. With `follow`, a read
   * that finds none parks up to EVENT_FOLLOW_WAIT_MS until an event is
   * written or the object drains (src/protocol/eventFollow.ts), then reads
   * again (an empty page when nothing came). Throws NOT_FOUND (not the
   * owner), RATE_LIMITED (MAX_EVENT_FOLLOWERS follow reads parked).
   */
  async events(identity: string, after: number, limit: number, follow = false): Promise<AllocationEvent[]> {
    const first = this.store.events(this.owned(identity), after, limit);
    if (!follow || first.length > 0) return first;
    await this.store.eventFollowers.wait(EVENT_FOLLOW_WAIT_MS);
    return this.store.events(this.owned(identity), after, limit);
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
      appendLogChunk(
        this.state.storage,
        this.state.name,
        current,
        chunk,
        (n) => this.logBudget.take(n, this.now),
        r && runOfAllocation(r.clientRequestId) !== null ? RUN_LOG_RING_BYTES : LOG_RING_BYTES,
      ),
    );
    if (out.appended) this.store.followers.wake();
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
      const p = readLogPage(this.state.storage, this.state.name, offset, MAX_LOG_READ_BYTES);
      return {
        ...p,
        complete: TERMINAL_STATES.has(s.rec.state) && p.nextOffset >= logEnd(this.state.storage, this.state.name),
      };
    };
    const first = page();
    if (!follow || first.text || first.complete || first.nextOffset > offset) return first;
    await this.store.followers.wait(LOG_FOLLOW_WAIT_MS);
    return page();
  }

  /** Ends parked follow reads (logs and events) at once (the embedded host stops); readers resume by offset or sequence number. */
  override drain(): void {
    this.store.followers.wake();
    this.store.eventFollowers.wake();
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
   * Issues a connection grant for the current generation through the
   * allocation's Network (allocationConnections.ts). Throws NOT_FOUND,
   * INVALID_STATE, STALE_GENERATION, and what the Network throws (FORBIDDEN,
   * RATE_LIMITED, CONNECTIVITY_UNAVAILABLE).
   */
  requestConnectionGrant(identity: string, body: ConnectionGrantBody): Promise<ConnectionGrantResponse> {
    return requestConnectionGrant(this.store, identity, body);
  }

  /** Revokes one of this allocation's grants (owner only, else NOT_FOUND; idempotent). Throws NOT_FOUND for an unknown grant. */
  revokeConnectionGrant(identity: string, grantId: string): Promise<void> {
    return revokeConnectionGrant(this.store, identity, grantId);
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
    const dueAt = nextAlarmAt(r, this.now, this.env.config.timeouts);
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
    this.store.forget();
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
      for (let i = 0; i < MAX_STEPS_PER_PASS; i++) if (!(await reconcileStep(this.store))) break;
    } finally {
      this.store.postIndexView();
    }
    const after = this.rec();
    if (after) this.state.setAlarm(nextAlarmAt(after, this.now, this.env.config.timeouts));
  }
}
