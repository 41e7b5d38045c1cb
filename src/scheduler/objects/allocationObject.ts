/**
 * The Allocation object: the authority for one allocation's lifecycle
 * (spec "Allocation lifecycle", "The reconciliation loop", "Replacement").
 *
 * Every entry (API call, forwarded observation, alarm) runs the same
 * reconcile pass: read state, apply inbox, choose one intent, persist intent
 * and event in one transaction, do bounded remote work, persist the result
 * only if generation and placement still match, re-arm the alarm (≤ 60 s).
 * Must never: free or assume freed capacity before the Host reported the
 * placement absent, or keep a bootstrap payload.
 */
import { asc, gt } from "drizzle-orm";
import { AuthorityObject } from "../runtime/objectRuntime.ts";
import { BeachballError } from "../../protocol/errors.ts";
import type { AllocationEvent, AllocationState, AllocationView, CreateAllocationBody } from "../../protocol/api.ts";
import type { PlacementSpec } from "../../protocol/agent.ts";
import { canTransition, MAX_ALARM_DELAY_MS, mayReplaceAutomatically, noCapacityBackoffMs, TERMINAL_STATES } from "../../domain/allocation.ts";
import { reservationKey } from "../../domain/identifiers.ts";
import type { SchedulerServices } from "../services.ts";
import { ALLOCATION_DDL, allocationTable, eventTable } from "./allocationSchema.ts";
import { toAllocationEvent, toAllocationView } from "./allocationView.ts";
import { HostObject, type ObservationMessage } from "./hostObject.ts";
import { HostDirectoryObject } from "./hostDirectory.ts";

/** When a reconcile pass that died mid-way is retried, ms. */
const RECONCILE_RETRY_MS = 5_000;
/** Most reconcile steps in one pass (each step persists one intent). */
const MAX_STEPS_PER_PASS = 8;

/** A create command, already authenticated and resolved against the workload class. */
export interface CreateCommand {
  allocationId: string;
  identity: string;
  body: CreateAllocationBody;
  bodyDigest: string;
  spec: PlacementSpec;
  ttlMs: number;
}

type Row = typeof allocationTable.$inferSelect;
type Patch = Partial<Row>;

/** See the module header. */
export class AllocationObject extends AuthorityObject {
  static readonly className = "Allocation";
  private readonly svc = this.ctx.services as SchedulerServices;

  constructor(ctx: ConstructorParameters<typeof AuthorityObject>[0]) {
    super(ctx);
    ctx.sql.exec(ALLOCATION_DDL);
  }

  private rowQuery: ReturnType<typeof this.prepareRow> | undefined;
  private prepareRow() {
    return this.ctx.db.select().from(allocationTable).prepare();
  }

  private row(): Row | undefined {
    return (this.rowQuery ??= this.prepareRow()).get();
  }

  private owned(identity: string): Row {
    const r = this.row();
    if (!r || r.identity !== identity) throw new BeachballError("NOT_FOUND", "no such allocation");
    return r;
  }

  /**
   * Creates the allocation, or returns the existing one for an identical
   * body. A different body under the same clientRequestId is IDEMPOTENCY_CONFLICT.
   */
  async create(cmd: CreateCommand): Promise<{ created: boolean; view: AllocationView }> {
    const existing = this.row();
    if (existing) {
      if (existing.bodyDigest !== cmd.bodyDigest) throw new BeachballError("IDEMPOTENCY_CONFLICT", "clientRequestId was used with a different request body");
      return { created: false, view: this.view(existing) };
    }
    const now = this.ctx.clock.now();
    this.ctx.sql.transaction(() => {
      this.ctx.db
        .insert(allocationTable)
        .values({
          allocationId: cmd.allocationId,
          identity: cmd.identity,
          clientRequestId: cmd.body.clientRequestId,
          bodyDigest: cmd.bodyDigest,
          workloadClass: cmd.body.workloadClass,
          specJson: JSON.stringify(cmd.spec),
          labelsJson: JSON.stringify(cmd.body.labels ?? {}),
          state: "pending",
          desired: "ready",
          generation: 1,
          attempts: 1,
          hostId: null,
          placementId: null,
          reservationKey: null,
          observedState: null,
          reason: null,
          conditionsJson: "[]",
          triedHostsJson: "[]",
          noCapacityRounds: 0,
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
          hostCheckAtMs: now + this.svc.timeouts.hostCheckIntervalMs,
          terminalAtMs: null,
        })
        .run();
      this.event("allocation.created", { toState: "pending", data: { workloadClass: cmd.body.workloadClass, imageDigest: cmd.spec.imageDigest } });
      this.ctx.post("AllocationIndex", "global", { messageId: `idx:${cmd.allocationId}:created`, kind: "upsert", body: { allocationId: cmd.allocationId, identity: cmd.identity, state: "pending", createdAtMs: now } });
    })();
    await this.reconcile();
    return { created: true, view: this.view(this.row()!) };
  }

  /** The stored body digest, or null if this allocation does not exist yet. */
  peekDigest(): string | null {
    return this.row()?.bodyDigest ?? null;
  }

  /** The allocation as `identity` may see it. Throws NOT_FOUND for another identity. */
  get(identity: string): AllocationView {
    return this.view(this.owned(identity));
  }

  /** Requests release (idempotent) and runs a reconcile pass. */
  async release(identity: string): Promise<AllocationView> {
    const r = this.owned(identity);
    if (r.desired !== "released" && !TERMINAL_STATES.has(r.state)) {
      this.ctx.sql.transaction(() => {
        this.ctx.db.update(allocationTable).set({ desired: "released", updatedAtMs: this.ctx.clock.now() }).run();
        this.event("allocation.release_requested", { reason: "CLIENT_RELEASE" });
      })();
    }
    await this.reconcile();
    return this.view(this.row()!);
  }

  /** Events after sequence `after`, at most `limit`. */
  events(identity: string, after: number, limit: number): AllocationEvent[] {
    const r = this.owned(identity);
    return this.ctx.db
      .select()
      .from(eventTable)
      .where(gt(eventTable.seq, after))
      .orderBy(asc(eventTable.seq))
      .limit(limit)
      .all()
      .map((e) => toAllocationEvent(e, r));
  }

  /**
   * Records the controller's certification that it revoked the workload's
   * external authority, unblocking a replacement after readiness (spec
   * "Replacement"). Throws STALE_GENERATION or REPLACEMENT_NOT_BLOCKED.
   */
  async authorizeReplacement(identity: string, generation: number): Promise<AllocationView> {
    const r = this.owned(identity);
    if (generation !== r.generation) throw new BeachballError("STALE_GENERATION", `generation ${generation} is not current (${r.generation})`);
    if (!(JSON.parse(r.conditionsJson) as string[]).includes("replacement_blocked")) throw new BeachballError("REPLACEMENT_NOT_BLOCKED", "no replacement is blocked for this allocation");
    if (!r.replacementAuthorized) {
      this.ctx.sql.transaction(() => {
        this.ctx.db.update(allocationTable).set({ replacementAuthorized: true, hostCheckAtMs: 0, updatedAtMs: this.ctx.clock.now() }).run();
        this.event("allocation.replacement_authorized", { reason: "CONTROLLER_AUTHORIZED" });
      })();
    }
    await this.reconcile();
    return this.view(this.row()!);
  }

  /**
   * Where a bootstrap delivery must go: the current placement, if the
   * generation matches and the guest is ready. Throws STALE_GENERATION (409)
   * or GUEST_NOT_CONNECTED (503).
   */
  deliveryTarget(identity: string, generation: number): { hostId: string; placementId: string; allocationId: string } {
    const r = this.owned(identity);
    if (generation !== r.generation) throw new BeachballError("STALE_GENERATION", `generation ${generation} is not current (${r.generation})`);
    if (r.state !== "ready" || !r.hostId || !r.placementId) throw new BeachballError("GUEST_NOT_CONNECTED", `allocation is ${r.state}, not ready`);
    return { hostId: r.hostId, placementId: r.placementId, allocationId: r.allocationId };
  }

  override async alarm(): Promise<void> {
    const r = this.row();
    if (r && TERMINAL_STATES.has(r.state)) return this.purgeIfDue(r);
    await this.reconcile();
  }

  /** Retention: a terminal allocation past its retention purges its index and admission rows, then deletes itself. */
  private purgeIfDue(r: Row): void {
    const dueAt = (r.terminalAtMs ?? r.updatedAtMs) + this.svc.timeouts.retentionDays * 86_400_000;
    if (this.ctx.clock.now() < dueAt) return this.ctx.setAlarm(dueAt);
    this.ctx.sql.transaction(() => {
      this.ctx.post("AllocationIndex", "global", { messageId: `idx:${r.allocationId}:purge`, kind: "purge", body: { allocationId: r.allocationId } });
      this.ctx.post("Admission", "global", { messageId: `adm:${r.allocationId}:purge`, kind: "allocation_purged", body: { allocationId: r.allocationId } });
      this.ctx.setAlarm(null);
    })();
    this.ctx.deleteSelf();
  }

  override async onInbox(): Promise<void> {
    await this.reconcile();
  }

  /** The single reconcile entry point (runs inside this object's mailbox, so it is single-flight). */
  async reconcile(): Promise<void> {
    // Safety net first: if this pass dies mid-way (say, in a remote call), the alarm resumes it.
    const r = this.row();
    if (r && !TERMINAL_STATES.has(r.state)) this.ctx.setAlarm(this.ctx.clock.now() + RECONCILE_RETRY_MS);
    for (let i = 0; i < MAX_STEPS_PER_PASS; i++) if (!(await this.step())) break;
    this.armAlarm();
  }

  private armAlarm(): void {
    const r = this.row();
    if (!r) return this.ctx.setAlarm(null);
    if (TERMINAL_STATES.has(r.state)) return this.ctx.setAlarm((r.terminalAtMs ?? r.updatedAtMs) + this.svc.timeouts.retentionDays * 86_400_000);
    const now = this.ctx.clock.now();
    let at = now + MAX_ALARM_DELAY_MS;
    if (r.state === "pending") at = Math.min(at, Math.max(now + 50, r.nextAttemptAtMs));
    if (r.state === "releasing" || r.state === "reserving") at = Math.min(at, now + 5_000);
    if (r.state === "provisioning") at = Math.min(at, r.stateEnteredAtMs + this.svc.timeouts.provisioningTimeoutMs);
    if (r.state === "ready") at = Math.min(at, r.expiresAtMs);
    if (r.hostId && r.placementId && (r.state === "provisioning" || r.state === "ready" || r.state === "releasing")) at = Math.min(at, r.hostCheckAtMs);
    this.ctx.setAlarm(Math.max(at, now + 50));
  }

  /** One reconcile step; returns true if it persisted progress worth another step. */
  private async step(): Promise<boolean> {
    let r = this.row();
    if (!r || TERMINAL_STATES.has(r.state)) return false;
    if (this.applyInbox(r)) return true;
    const now = this.ctx.clock.now();
    r = this.row()!;
    if (r.desired !== "released" && r.state === "ready" && now >= r.expiresAtMs) return this.requestRelease("TTL_EXPIRED");
    if (r.desired !== "released" && r.state === "provisioning" && now >= r.stateEnteredAtMs + this.svc.timeouts.provisioningTimeoutMs)
      return this.requestRelease("GUEST_BOOT_TIMEOUT");
    if (r.desired !== "released" && r.state === "pending" && now >= r.createdAtMs + this.svc.timeouts.pendingTimeoutMs) return this.requestRelease("NO_CAPACITY");
    if (r.hostId && r.placementId && (r.state === "provisioning" || r.state === "ready" || r.state === "releasing") && now >= r.hostCheckAtMs) {
      if (await this.stepHostCheck(r, now)) return true;
      r = this.row()!;
      if (TERMINAL_STATES.has(r.state)) return false;
    }
    if (r.desired === "released" || r.state === "releasing") return this.stepRelease(r);
    if (r.state === "pending") return this.stepPlace(r, now);
    if (r.state === "reserving") return this.stepReserve(r);
    return false;
  }

  private requestRelease(reason: string): boolean {
    this.ctx.sql.transaction(() => {
      this.ctx.db.update(allocationTable).set({ desired: "released", reason, updatedAtMs: this.ctx.clock.now() }).run();
      this.event("allocation.release_requested", { reason });
    })();
    return true;
  }

  /**
   * Asks the host where the placement stands. A lost host's placement is
   * replaced automatically only before readiness with no payload consumed,
   * or after the controller authorized it; either way only once the old
   * lease has expired (plus grace), so the old VM has stopped itself.
   * Otherwise the allocation shows replacement_blocked until the host is
   * fenced (spec "Replacement", "Fencing").
   */
  private async stepHostCheck(r: Row, now: number): Promise<boolean> {
    const st = await this.ctx.call(HostObject, r.hostId!, (h) => h.placementStatus(r.placementId!));
    const cur = this.row()!;
    if (cur.placementId !== r.placementId || cur.generation !== r.generation) return true;
    const next = now + this.svc.timeouts.hostCheckIntervalMs;
    const lost = st.hostHealth === "lost" && st.state !== "absent";
    if (!lost || cur.state === "releasing") {
      this.ctx.db.update(allocationTable).set({ hostCheckAtMs: next }).run();
      return false;
    }
    const conditions = JSON.parse(cur.conditionsJson) as string[];
    const auto = mayReplaceAutomatically(cur, this.svc.timeouts);
    if (!auto && !cur.replacementAuthorized) {
      if (!conditions.includes("replacement_blocked")) {
        this.ctx.sql.transaction(() => {
          this.ctx.db.update(allocationTable).set({ conditionsJson: JSON.stringify([...conditions, "replacement_blocked"]), hostCheckAtMs: next }).run();
          this.event("allocation.replacement_blocked", { reason: "HOST_LOST" });
          this.alert("allocation.replacement_blocked", "HOST_LOST");
        })();
      } else this.ctx.db.update(allocationTable).set({ hostCheckAtMs: next }).run();
      return false;
    }
    const safeAt = st.leaseExpiresAtMs + this.svc.timeouts.leaseGraceMs;
    if (now < safeAt) {
      this.ctx.db.update(allocationTable).set({ hostCheckAtMs: Math.min(safeAt, next) }).run();
      return false;
    }
    await this.ctx.call(HostObject, r.hostId!, (h) => h.requestAbsent(r.placementId!, r.generation)).catch(() => false);
    const again = this.row()!;
    if (again.placementId !== r.placementId || again.generation !== r.generation) return true;
    return this.replace(again, "HOST_LOST");
  }

  /** Starts the next generation; the old placement keeps its capacity until its host reports it absent or is fenced. */
  private replace(r: Row, reason: string): boolean {
    return this.transition(
      r,
      "pending",
      {
        generation: r.generation + 1,
        attempts: r.attempts + 1,
        hostId: null,
        placementId: null,
        reservationKey: null,
        observedState: null,
        replaceAfterAbsent: false,
        replacementAuthorized: false,
        guestReady: false,
        conditionsJson: JSON.stringify((JSON.parse(r.conditionsJson) as string[]).filter((c) => c !== "replacement_blocked")),
        triedHostsJson: JSON.stringify([r.hostId]),
        nextAttemptAtMs: this.ctx.clock.now(),
      },
      reason,
    );
  }

  private alert(type: string, reason: string): void {
    const r = this.row()!;
    this.ctx.post("Operations", "global", { messageId: `alert:${type}:${r.allocationId}:${r.generation}:${this.lastEventSeq()}`, kind: "alert", body: { type, subject: r.workloadClass, reason, atMs: this.ctx.clock.now() } });
  }

  private async stepRelease(r: Row): Promise<boolean> {
    if (r.state === "pending") return this.transition(r, r.reason ? "failed" : "released", {}, r.reason);
    if (r.state !== "releasing") return this.transition(r, "releasing", {}, r.reason ?? "CLIENT_RELEASE");
    if (!r.hostId || !r.placementId) return this.transition(r, r.reason ? "failed" : "released", {}, r.reason);
    const absent = await this.ctx.call(HostObject, r.hostId, (h) => h.requestAbsent(r.placementId!, r.generation));
    const now = this.row()!;
    if (!absent || now.placementId !== r.placementId || now.generation !== r.generation) return false;
    return this.finishAbsent(now);
  }

  /** Placement is confirmed absent: replace, or end in released/failed. */
  private finishAbsent(r: Row): boolean {
    if (r.replaceAfterAbsent && r.desired !== "released") return this.replace(r, "REPLACEMENT");
    return this.transition(r, r.reason && r.reason !== "CLIENT_RELEASE" && r.reason !== "TTL_EXPIRED" ? "failed" : "released", {}, r.reason);
  }

  private async stepPlace(r: Row, now: number): Promise<boolean> {
    if (now < r.nextAttemptAtMs) return false;
    const spec = JSON.parse(r.specJson) as PlacementSpec;
    const tried = new Set(JSON.parse(r.triedHostsJson) as string[]);
    const candidates = await this.ctx.call(HostDirectoryObject, "global", (d) =>
      d.candidates({
        allocationId: r.allocationId,
        resources: { cpuMillis: spec.cpuMillis, memoryMiB: spec.memoryMiB, ephemeralDiskMiB: spec.ephemeralDiskMiB, slots: 1 },
        imageDigest: spec.imageDigest,
        architecture: "x86_64",
        regions: null,
        requiredLabels: {},
        agentProtocolVersion: "1.0",
        exclude: tried,
      }),
    );
    const next = candidates[0];
    if (!next) {
      const rounds = r.noCapacityRounds + 1;
      this.ctx.sql.transaction(() => {
        this.ctx.db.update(allocationTable).set({ noCapacityRounds: rounds, triedHostsJson: "[]", nextAttemptAtMs: now + noCapacityBackoffMs(rounds), updatedAtMs: now }).run();
        if (rounds === 1 || rounds % 10 === 0) {
          this.event("allocation.no_eligible_host", { reason: "NO_CAPACITY", data: { tried: [...tried], rounds } });
          this.alert("allocation.no_eligible_host", "NO_CAPACITY");
        }
      })();
      return false;
    }
    const placementId = this.ctx.random.id("plc");
    return this.transition(r, "reserving", { hostId: next, placementId, reservationKey: reservationKey(r.allocationId, r.generation, next) }, null, { hostId: next });
  }

  private async stepReserve(r: Row): Promise<boolean> {
    const spec = JSON.parse(r.specJson) as PlacementSpec;
    const result = await this.ctx.call(HostObject, r.hostId!, (h) =>
      h.reserve({ key: r.reservationKey!, allocationId: r.allocationId, generation: r.generation, placementId: r.placementId!, spec }),
    ).catch((e: unknown) => ({ accepted: false as const, code: e instanceof BeachballError ? e.code : "HOST_UNREACHABLE" }));
    const cur = this.row()!;
    if (cur.state !== "reserving" || cur.generation !== r.generation || cur.placementId !== r.placementId) return false;
    if (result.accepted) return this.transition(cur, "provisioning", { noCapacityRounds: 0 }, null, { hostId: r.hostId });
    const tried = [...(JSON.parse(cur.triedHostsJson) as string[]), r.hostId!];
    return this.transition(cur, "pending", { hostId: null, placementId: null, reservationKey: null, triedHostsJson: JSON.stringify(tried) }, result.code, { hostId: r.hostId });
  }

  /** Applies inbox messages for the current placement; returns true if anything changed. */
  private applyInbox(r: Row): boolean {
    const msgs = this.ctx.readInbox();
    if (msgs.length === 0) return false;
    let changed = false;
    this.ctx.sql.transaction(() => {
      for (const m of msgs) {
        const cur = this.row()!;
        if (m.kind === "delivery_consumed") {
          const b = m.body as { deliveryId: string; generation: number; digest: string };
          if (b.generation === cur.generation && !cur.payloadConsumed) {
            this.ctx.db.update(allocationTable).set({ payloadConsumed: true, updatedAtMs: this.ctx.clock.now() }).run();
            this.event("bootstrap.consumed", { data: { deliveryId: b.deliveryId, digest: b.digest } });
            changed = true;
          }
        } else if (m.kind === "observation") {
          if (this.applyObservation(cur, m.body as ObservationMessage)) changed = true;
        }
      }
      this.ctx.ackInbox(msgs[msgs.length - 1]!.seq);
    })();
    void r;
    return changed;
  }

  private applyObservation(r: Row, o: ObservationMessage): boolean {
    if (o.placementId !== r.placementId || o.generation !== r.generation) return false;
    const patch: Patch = {};
    let changed = false;
    if (o.workloadExitCode !== null && r.workloadExitCode === null) {
      patch.workloadExitCode = o.workloadExitCode;
      this.event("workload.exited", { data: { exitCode: o.workloadExitCode } });
      changed = true;
    }
    if (o.state !== r.observedState) {
      patch.observedState = o.state;
      this.event(`placement.${o.state}`, { reason: o.errorCode, data: { hostId: o.hostId } });
      changed = true;
    }
    if (Object.keys(patch).length) this.ctx.db.update(allocationTable).set({ ...patch, updatedAtMs: this.ctx.clock.now() }).run();
    const cur = this.row()!;
    if (o.state === "running" && cur.state === "provisioning") {
      this.ctx.db.update(allocationTable).set({ guestReady: true }).run();
      this.transition(this.row()!, "ready", {}, null);
      return true;
    }
    if (o.state === "error" && cur.desired !== "released" && cur.state !== "releasing") {
      const replace = mayReplaceAutomatically(cur, this.svc.timeouts);
      this.ctx.db.update(allocationTable).set({ replaceAfterAbsent: replace, reason: replace ? null : (o.errorCode ?? "PLACEMENT_FAILED"), desired: replace ? "ready" : "released" }).run();
      this.transition(this.row()!, "releasing", {}, o.errorCode ?? "PLACEMENT_FAILED");
      return true;
    }
    if (o.state === "absent") {
      if (cur.state === "releasing") return this.finishAbsent(cur);
      if (cur.state === "provisioning" || cur.state === "ready") {
        // A fenced host's VM can no longer act for the workload: fencing unblocks replacement (spec "Replacement").
        const replace = o.errorCode === "HOST_FENCED" || mayReplaceAutomatically(cur, this.svc.timeouts) || cur.replacementAuthorized;
        this.ctx.db.update(allocationTable).set({ replaceAfterAbsent: replace, reason: replace ? null : "PLACEMENT_LOST", desired: replace ? "ready" : "released" }).run();
        this.transition(this.row()!, "releasing", {}, "PLACEMENT_LOST");
        return this.finishAbsent(this.row()!);
      }
    }
    return changed;
  }

  /** Persists a state transition and its event in one transaction. Throws INTERNAL for a forbidden transition. */
  private transition(r: Row, to: AllocationState, patch: Patch, reason: string | null, data?: Record<string, unknown>): boolean {
    if (!canTransition(r.state, to)) throw new BeachballError("INTERNAL", `forbidden transition ${r.state} -> ${to}`);
    const now = this.ctx.clock.now();
    this.ctx.sql.transaction(() => {
      this.ctx.db.update(allocationTable).set({ ...patch, state: to, stateEnteredAtMs: now, updatedAtMs: now, ...(TERMINAL_STATES.has(to) ? { terminalAtMs: now } : {}) }).run();
      const after = this.row()!;
      this.event(`allocation.${to}`, { fromState: r.state, toState: to, reason, ...(data ? { data } : {}) });
      this.ctx.post("AllocationIndex", "global", { messageId: `idx:${r.allocationId}:${this.lastEventSeq()}`, kind: "upsert", body: { allocationId: r.allocationId, identity: r.identity, state: to, createdAtMs: r.createdAtMs } });
      if (TERMINAL_STATES.has(to)) this.ctx.post("Admission", "global", { messageId: `adm:${r.allocationId}:terminal`, kind: "allocation_terminal", body: { allocationId: r.allocationId } });
      void after;
    })();
    this.svc.metrics.inc("bb_allocation_transitions_total", "Allocation state transitions", { state: to, workload_class: r.workloadClass, ...(reason ? { reason } : {}) });
    return true;
  }

  private lastEventSeq(): number {
    return this.ctx.sql.query<{ s: number | null }, []>("SELECT MAX(seq) AS s FROM events").get()?.s ?? 0;
  }

  private event(type: string, e: { fromState?: AllocationState; toState?: AllocationState; reason?: string | null; data?: Record<string, unknown> }): void {
    const r = this.row()!;
    this.ctx.db
      .insert(eventTable)
      .values({
        eventId: this.ctx.random.id("evt"),
        type,
        atMs: this.ctx.clock.now(),
        generation: r.generation,
        placementId: r.placementId,
        hostId: r.hostId,
        fromState: e.fromState ?? null,
        toState: e.toState ?? null,
        reason: e.reason ?? null,
        dataJson: e.data ? JSON.stringify(e.data) : null,
      })
      .run();
  }

  private view(r: Row): AllocationView {
    return toAllocationView(r);
  }

}
