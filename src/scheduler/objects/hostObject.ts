/**
 * The Host object: the only authority that admits work against a host's
 * capacity (spec "Design principles", "Reservation", "The agent protocol").
 *
 * Owns: the host row (admin state, credential digest, session epoch,
 * heartbeat), its placements, the agent command queue and consumed-delivery
 * digests. Reservation rechecks every hard constraint and inserts placement,
 * first lease and ensure_present in one transaction. Capacity is released
 * only when the agent reports the placement absent.
 * Must never: call an Allocation object (observations go out by `post`),
 * store a bootstrap payload, or accept a message from an older epoch.
 */
import { and, eq, inArray } from "drizzle-orm";
import { AuthorityObject } from "../runtime/objectRuntime.ts";
import { BeachballError } from "../../protocol/errors.ts";
import { commandIdFor } from "../../domain/identifiers.ts";
import { fits, sub, used, type HostPlacementState, type Resources } from "../../domain/capacity.ts";
import { healthFromHeartbeat, HEALTHY_HEARTBEAT_AGE_MS } from "../../domain/health.ts";
import { OVERLAP_SUSPECT_MS, unschedulableReasons, type HostFacts } from "../../domain/hostConditions.ts";
import type { Advertisement } from "../../domain/placement.ts";
import type { Capacity } from "../../protocol/api.ts";
import { type AgentCommand, type Envelope, type PlacementSpec, type PollResponse, type PlacementUpdate, type UpdateRejection, type UpdateRejectionCode } from "../../protocol/agent.ts";
import type { SchedulerServices } from "../services.ts";
import { HOST_DDL, commandTable, deliveryTable, hostTable, placementTable } from "./hostSchema.ts";
import { NO_FACTS, prepareHostQueries, toRes, type AgentFacts, type HostRegistration, type HostView, type ObservationMessage, type PlacementStatus, type ReserveRequest, type ReserveResult } from "./hostTypes.ts";

export type { HostRegistration, HostView, ObservationMessage, PlacementStatus, ReserveRequest, ReserveResult } from "./hostTypes.ts";

/** How long acknowledged or superseded commands are kept, ms. */
export const COMMAND_RETENTION_MS = 3600_000;

/** Longest interval between advertisements, ms (spec: at least every 30 s). */
export const AD_REFRESH_MS = 10_000;

/** See the module header. */
export class HostObject extends AuthorityObject {
  static readonly className = "Host";
  private readonly svc = this.ctx.services as SchedulerServices;

  constructor(ctx: ConstructorParameters<typeof AuthorityObject>[0]) {
    super(ctx);
    ctx.sql.exec(HOST_DDL);
  }

  /** Prepared once per instance (after the DDL ran): the hot statements of every envelope and reservation. */
  private preparedQueries: ReturnType<typeof prepareHostQueries> | undefined;
  private get q(): ReturnType<typeof prepareHostQueries> {
    return (this.preparedQueries ??= prepareHostQueries(this.ctx.db));
  }

  private row() {
    return this.q.host.get();
  }

  private mustRow() {
    const r = this.row();
    if (!r) throw new BeachballError("NOT_FOUND", "host is not registered");
    return r;
  }

  /**
   * Creates the host on first enrollment (draining, or active with autoActivate).
   * A repeat with the same enrollment digest returns the existing row's version;
   * another configuration is ENROLLMENT_CONFLICT.
   */
  register(reg: HostRegistration): { created: boolean; adminState: string; credentialVersion: number } {
    const existing = this.row();
    if (existing) {
      if (existing.enrollDigest !== reg.enrollDigest) throw new BeachballError("ENROLLMENT_CONFLICT", "host already enrolled with another configuration");
      return { created: false, adminState: existing.adminState, credentialVersion: existing.credentialVersion };
    }
    const now = this.ctx.clock.now();
    this.ctx.db
      .insert(hostTable)
      .values({
        hostId: reg.hostId,
        adminState: reg.autoActivate ? "active" : "draining",
        credentialDigest: reg.credentialDigest,
        credentialVersion: 1,
        enrollDigest: reg.enrollDigest,
        capacityJson: JSON.stringify(reg.capacity),
        reserveJson: JSON.stringify(reg.reserve),
        region: reg.region,
        architecture: reg.architecture,
        labelsJson: JSON.stringify(reg.labels),
        agentProtocolVersion: reg.agentProtocolVersion,
        vmmDriver: reg.vmmDriver,
        heartbeatAtMs: null,
        agentEpoch: "",
        bootId: "",
        lastSeq: 0,
        isolationHealthy: true,
        adRevision: 0,
        adPublishedAtMs: 0,
        registeredAtMs: now,
        factsJson: JSON.stringify(NO_FACTS),
        fencedAtMs: null,
      })
      .run();
    this.publish(true);
    return { created: true, adminState: reg.autoActivate ? "active" : "draining", credentialVersion: 1 };
  }

  /** True once the host was enrolled. */
  isRegistered(): boolean {
    return !!this.row();
  }

  /** The administrative state, or null before enrollment. */
  adminState(): "active" | "draining" | "disabled" | null {
    return this.row()?.adminState ?? null;
  }

  /** True if `credentialDigest` is this host's current credential. */
  authenticate(credentialDigest: string): boolean {
    const r = this.row();
    return !!r && r.adminState !== "disabled" && r.credentialDigest === credentialDigest;
  }

  private freeCapacity(r: NonNullable<ReturnType<HostObject["row"]>>): Resources {
    const placements = this.q.consuming.all();
    const allocatable = sub(toRes(JSON.parse(r.capacityJson) as Capacity), toRes(JSON.parse(r.reserveJson) as Capacity));
    return sub(allocatable, used(placements.map((p) => ({ state: p.state as HostPlacementState, resources: JSON.parse(p.resourcesJson) as Resources }))));
  }

  /** Reserves capacity for one placement (idempotent by `key`). Rejects with a stable code. */
  reserve(req: ReserveRequest): ReserveResult {
    const prior = this.ctx.db.select().from(placementTable).where(eq(placementTable.reservationKey, req.key)).get();
    if (prior) return { accepted: true, placementId: prior.placementId };
    const r = this.row();
    if (!r) return { accepted: false, code: "HOST_NOT_ACTIVE" };
    const now = this.ctx.clock.now();
    const blocked = unschedulableReasons(this.facts(r), now);
    if (blocked.length) return { accepted: false, code: blocked[0]! };
    const request: Resources = { cpuMillis: req.spec.cpuMillis, memoryMiB: req.spec.memoryMiB, ephemeralDiskMiB: req.spec.ephemeralDiskMiB, slots: 1 };
    const misfit = fits(this.freeCapacity(r), request);
    if (misfit) return { accepted: false, code: misfit };
    this.ctx.sql.transaction(() => {
      this.ctx.db
        .insert(placementTable)
        .values({
          placementId: req.placementId,
          allocationId: req.allocationId,
          generation: req.generation,
          state: "reserved",
          resourcesJson: JSON.stringify(request),
          specJson: JSON.stringify(req.spec),
          reservationKey: req.key,
          desired: "present",
          leaseExpiresAtMs: now + this.svc.timeouts.leaseMs,
          errorCode: null,
          createdAtMs: now,
          updatedAtMs: now,
        })
        .run();
      this.enqueue(req.placementId, "ensure_present", req.generation);
      this.publish(true);
    })();
    this.svc.hostSignals.notify(r.hostId);
    return { accepted: true, placementId: req.placementId };
  }

  private facts(r: NonNullable<ReturnType<HostObject["row"]>>): HostFacts {
    const cap = JSON.parse(r.capacityJson) as Capacity;
    return { adminState: r.adminState, heartbeatAtMs: r.heartbeatAtMs, isolationHealthy: r.isolationHealthy, registered: cap, ...(JSON.parse(r.factsJson) as AgentFacts) };
  }

  /**
   * Sets the administrative state (spec "Administrative state and health").
   * `disabled` fences the host: the credential is cleared and its version
   * bumped, every placement counts as absent (its VM can no longer be
   * commanded or renew its lease), and each owning allocation is told.
   * Returns the placements that were fenced. A disabled host stays
   * disabled: disabling it again changes nothing; activating or draining it
   * throws HOST_DISABLED.
   */
  setAdminState(state: "active" | "draining" | "disabled"): { adminState: string; credentialVersion: number; fenced: number } {
    const r = this.mustRow();
    if (r.adminState === "disabled") {
      if (state !== "disabled") throw new BeachballError("HOST_DISABLED", `host ${r.hostId} is disabled (fenced for good); enroll it again to use it`);
      return { adminState: r.adminState, credentialVersion: r.credentialVersion, fenced: 0 };
    }
    const now = this.ctx.clock.now();
    let fenced = 0;
    this.ctx.sql.transaction(() => {
      if (state !== "disabled") {
        this.ctx.db.update(hostTable).set({ adminState: state }).run();
      } else {
        this.ctx.db.update(hostTable).set({ adminState: "disabled", credentialDigest: null, credentialVersion: r.credentialVersion + 1, fencedAtMs: now }).run();
        for (const p of this.q.consuming.all()) {
          fenced++;
          this.ctx.db.update(placementTable).set({ state: "absent", desired: "absent", errorCode: "HOST_FENCED", updatedAtMs: now }).where(eq(placementTable.placementId, p.placementId)).run();
          const msg: ObservationMessage = { hostId: r.hostId, placementId: p.placementId, generation: p.generation, state: "absent", errorCode: "HOST_FENCED", workloadExitCode: null, at: new Date(now).toISOString() };
          this.ctx.post("Allocation", p.allocationId, { messageId: `fence:${r.hostId}:${p.placementId}`, kind: "observation", body: msg });
        }
        this.ctx.db.update(commandTable).set({ status: "superseded" }).where(eq(commandTable.status, "pending")).run();
        this.ctx.post("Operations", "global", { messageId: `alert:host_disabled:${r.hostId}:${now}`, kind: "alert", body: { type: "host.disabled", subject: r.hostId, reason: "HOST_FENCED", atMs: now } });
      }
      this.publish(true);
    })();
    const after = this.mustRow();
    return { adminState: after.adminState, credentialVersion: after.credentialVersion, fenced };
  }

  /** Where a placement stands and how healthy this host is (for an allocation's host-loss check). */
  placementStatus(placementId: string): PlacementStatus {
    const r = this.row();
    const p = this.q.byId.get({ id: placementId });
    return {
      exists: !!p,
      state: p?.state ?? null,
      leaseExpiresAtMs: p?.leaseExpiresAtMs ?? 0,
      hostHealth: r ? healthFromHeartbeat(r.heartbeatAtMs, this.ctx.clock.now()) : "unknown",
      fenced: r?.adminState === "disabled",
    };
  }

  /** Asks the agent to make the placement absent (idempotent). Returns true once absence was observed. */
  requestAbsent(placementId: string, generation: number): boolean {
    const p = this.q.byId.get({ id: placementId });
    if (!p || p.generation !== generation) return !p;
    if (p.state === "absent") return true;
    if (this.svc.debug.releaseCapacityOnLeaseExpiry && p.leaseExpiresAtMs < this.ctx.clock.now()) {
      this.ctx.db.update(placementTable).set({ state: "absent", desired: "absent" }).where(eq(placementTable.placementId, placementId)).run();
      return true;
    }
    if (p.desired !== "absent") {
      this.ctx.sql.transaction(() => {
        this.ctx.db.update(placementTable).set({ desired: "absent", updatedAtMs: this.ctx.clock.now() }).where(eq(placementTable.placementId, placementId)).run();
        this.ctx.db
          .update(commandTable)
          .set({ status: "superseded" })
          .where(and(eq(commandTable.placementId, placementId), eq(commandTable.status, "pending")))
          .run();
        this.enqueue(placementId, "ensure_absent", generation);
      })();
      this.svc.hostSignals.notify(this.mustRow().hostId);
    }
    return false;
  }

  private enqueue(placementId: string, type: AgentCommand["type"], generation: number): void {
    this.ctx.db
      .insert(commandTable)
      .values({ commandId: commandIdFor(placementId, type, generation), placementId, type, generation, status: "pending", createdAtMs: this.ctx.clock.now() })
      .onConflictDoNothing()
      .run();
  }

  /**
   * Applies one agent envelope (poll or messages): epoch fencing, heartbeat,
   * lease renewal, observations, acks. Returns the poll response body.
   * Throws STALE_AGENT_EPOCH for an older epoch.
   */
  handleEnvelope(env: Envelope): PollResponse {
    const r = this.mustRow();
    const now = this.ctx.clock.now();
    let epoch = r.agentEpoch;
    const newSession = env.agentEpoch === "" && env.type === "poll";
    if (newSession) {
      epoch = Buffer.from(this.ctx.random.bytes(16)).toString("hex");
    } else if (env.agentEpoch !== r.agentEpoch) {
      throw new BeachballError("STALE_AGENT_EPOCH", "the agent epoch is not the current session", { currentEpochKnown: r.agentEpoch !== "" });
    }
    const rejected: UpdateRejection[] = [];
    const prevFacts = JSON.parse(r.factsJson) as AgentFacts;
    const sentAtMs = Date.parse(env.sentAt);
    const overlapping = newSession && r.bootId !== "" && r.bootId !== env.payload.bootId && r.heartbeatAtMs !== null && now - r.heartbeatAtMs < HEALTHY_HEARTBEAT_AGE_MS;
    const facts: AgentFacts = {
      clockSkewMs: Number.isFinite(sentAtMs) ? Math.abs(sentAtMs - now) : prevFacts.clockSkewMs,
      inventory: env.payload.health?.inventory ?? prevFacts.inventory,
      volumesNearlyFull: env.payload.health?.volumesNearlyFull ?? prevFacts.volumesNearlyFull,
      overlapUntilMs: overlapping ? now + OVERLAP_SUSPECT_MS : prevFacts.overlapUntilMs,
      cachedImages: env.payload.health?.cachedImages ?? prevFacts.cachedImages ?? [],
    };
    this.ctx.sql.transaction(() => {
      this.ctx.sql
        .query("UPDATE host SET heartbeat_at_ms = ?, agent_epoch = ?, boot_id = ?, last_seq = ?, isolation_healthy = ?, facts_json = ?")
        .run(now, epoch, env.payload.bootId, newSession ? 0 : r.lastSeq, (env.payload.health?.isolationHealthy ?? r.isolationHealthy) ? 1 : 0, JSON.stringify(facts));
      if (overlapping)
        this.ctx.post("Operations", "global", { messageId: `alert:overlap:${r.hostId}:${now}`, kind: "alert", body: { type: "host.overlapping_agent_session", subject: r.hostId, reason: "OVERLAPPING_AGENT_SESSION", atMs: now } });
      if (newSession) this.ctx.sql.exec("DELETE FROM update_seqs");
      let lastSeq = newSession ? 0 : r.lastSeq;
      let material = newSession || JSON.stringify(facts) !== r.factsJson || (env.payload.health?.isolationHealthy ?? r.isolationHealthy) !== r.isolationHealthy;
      for (const u of env.payload.updates) {
        const outcome = this.applyUpdate(r.hostId, epoch, u);
        if (typeof outcome === "string") {
          rejected.push({ seq: u.seq, placementId: u.placementId, code: outcome });
          continue;
        }
        lastSeq = Math.max(lastSeq, u.seq);
        if (outcome.material) material = true;
      }
      if (lastSeq !== (newSession ? 0 : r.lastSeq)) this.ctx.sql.query("UPDATE host SET last_seq = ?").run(lastSeq);
      for (const a of env.payload.acks) {
        this.ctx.db
          .update(commandTable)
          .set({ status: a.result === "rejected" ? "rejected" : "acked" })
          .where(and(eq(commandTable.commandId, a.commandId), eq(commandTable.status, "pending")))
          .run();
      }
      for (const d of env.payload.deliveryAcks) this.applyDeliveryAck(r.hostId, d);
      // Leases are renewed by heartbeats, but never for a placement the scheduler wants gone.
      this.q.renew.run({ lease: now + this.svc.timeouts.leaseMs });
      this.publish(material || now - r.adPublishedAtMs > AD_REFRESH_MS);
    })();
    if (newSession) this.svc.deliveries.rearm(r.hostId);
    // A messages envelope may have enqueued work (prepared ⇒ ensure_running): wake the parked poll.
    // Commands and deliveries ride only in poll responses, so each is handed out once per poll.
    const withRejections = (res: PollResponse): PollResponse => (rejected.length ? { ...res, rejectedUpdates: rejected } : res);
    if (env.type === "messages") {
      if (this.hasWork()) this.svc.hostSignals.notify(r.hostId);
      return withRejections({ agentEpoch: epoch, commands: [], deliveries: [], leases: this.leases() });
    }
    return withRejections(this.work(epoch));
  }

  /**
   * Applies one observation if its placement and generation are current and
   * its sequence number is above the last one applied for that placement in
   * this session; otherwise returns the stable reason and changes nothing
   * (so an update for an unknown placement, or a huge sequence number on one
   * placement, never holds back another placement's updates). Applied:
   * `material` is true when it changed capacity.
   */
  private applyUpdate(hostId: string, epoch: string, u: PlacementUpdate): { material: boolean } | UpdateRejectionCode {
    const p = this.q.byId.get({ id: u.placementId });
    if (!p) return "UNKNOWN_PLACEMENT";
    if (p.generation !== u.generation) return "STALE_GENERATION";
    const last = this.ctx.sql.query<{ last_seq: number }, [string]>("SELECT last_seq FROM update_seqs WHERE placement_id = ?").get(p.placementId)?.last_seq ?? 0;
    if (u.seq <= last) return "SEQUENCE_NOT_INCREASING";
    if (p.state === "absent") return "INVALID_STATE";
    this.ctx.sql.query("INSERT INTO update_seqs (placement_id, last_seq) VALUES (?, ?) ON CONFLICT (placement_id) DO UPDATE SET last_seq = excluded.last_seq").run(p.placementId, u.seq);
    const now = this.ctx.clock.now();
    let state: HostPlacementState = p.state;
    if (u.state === "accepted" || u.state === "preparing" || u.state === "prepared") state = "preparing";
    else if (u.state === "starting" || u.state === "running") state = "running";
    else if (u.state === "stopping") state = "stopping";
    else if (u.state === "error") state = "cleanup_pending";
    else if (u.state === "absent") state = "absent";
    this.ctx.db
      .update(placementTable)
      .set({ state, errorCode: u.errorCode ?? p.errorCode, updatedAtMs: now })
      .where(eq(placementTable.placementId, p.placementId))
      .run();
    if (u.state === "prepared" && p.desired === "present") {
      this.ctx.db.update(placementTable).set({ desired: "running" }).where(eq(placementTable.placementId, p.placementId)).run();
      this.enqueue(p.placementId, "ensure_running", p.generation);
    }
    if (u.state === "absent") {
      this.ctx.db
        .update(commandTable)
        .set({ status: "superseded" })
        .where(and(eq(commandTable.placementId, p.placementId), eq(commandTable.status, "pending")))
        .run();
    }
    const msg: ObservationMessage = {
      hostId,
      placementId: p.placementId,
      generation: p.generation,
      state: u.state,
      errorCode: u.errorCode ?? null,
      workloadExitCode: u.workloadExitCode ?? null,
      at: u.at,
    };
    this.ctx.post("Allocation", p.allocationId, { messageId: `obs:${hostId}:${epoch}:${p.placementId}:${u.seq}`, kind: "observation", body: msg });
    return { material: state === "absent" };
  }

  private applyDeliveryAck(hostId: string, d: Envelope["payload"]["deliveryAcks"][number]): void {
    if (d.result === "consumed" && d.digest) {
      const p = this.q.byId.get({ id: d.placementId });
      this.ctx.db
        .insert(deliveryTable)
        .values({ deliveryId: d.deliveryId, placementId: d.placementId, generation: d.generation, digest: d.digest, consumedAtMs: this.ctx.clock.now() })
        .onConflictDoNothing()
        .run();
      if (p) this.ctx.post("Allocation", p.allocationId, { messageId: `dlv:${d.deliveryId}`, kind: "delivery_consumed", body: { deliveryId: d.deliveryId, generation: d.generation, digest: d.digest } });
      this.svc.deliveries.settle(hostId, d.deliveryId, { result: "consumed", digest: d.digest });
    } else {
      this.svc.deliveries.settle(hostId, d.deliveryId, { result: d.result === "guest_not_connected" ? "guest_not_connected" : "rejected" });
    }
  }

  /** True if the agent has commands or deliveries waiting. */
  hasWork(): boolean {
    const r = this.row();
    if (!r) return false;
    if (this.svc.deliveries.hasWork(r.hostId)) return true;
    return this.q.pending.all().length > 0;
  }

  /** Pending commands (≤ MAX_COMMANDS_PER_POLL) stamped with `epoch`, deliveries, and leases. */
  work(epoch: string): PollResponse {
    const r = this.mustRow();
    const cmds = this.q.pending.all();
    const ids = [...new Set(cmds.map((c) => c.placementId))];
    const placements = ids.length ? this.ctx.db.select().from(placementTable).where(inArray(placementTable.placementId, ids)).all() : [];
    const byId = new Map(placements.map((p) => [p.placementId, p]));
    const commands: AgentCommand[] = [];
    for (const c of cmds) {
      const p = byId.get(c.placementId);
      if (!p) continue;
      commands.push({
        commandId: c.commandId,
        type: c.type,
        allocationId: p.allocationId,
        placementId: p.placementId,
        generation: c.generation,
        agentEpoch: epoch,
        leaseExpiresAt: new Date(p.leaseExpiresAtMs).toISOString(),
        spec: JSON.parse(p.specJson) as PlacementSpec,
      });
    }
    return { agentEpoch: epoch, commands, deliveries: this.svc.deliveries.take(r.hostId), leases: this.leases() };
  }

  /** Authoritative lease expiry of every placement not yet absent. */
  private leases(): Record<string, string> {
    const leases: Record<string, string> = {};
    for (const p of this.q.consuming.all()) leases[p.placementId] = new Date(p.leaseExpiresAtMs).toISOString();
    return leases;
  }

  /** Checks that a delivery may go to this placement now; returns an earlier digest for a repeated delivery ID. */
  checkDelivery(deliveryId: string, placementId: string, generation: number): { earlierDigest: string | null } {
    const prior = this.ctx.db.select().from(deliveryTable).where(eq(deliveryTable.deliveryId, deliveryId)).get();
    if (prior) return { earlierDigest: prior.digest };
    const p = this.q.byId.get({ id: placementId });
    if (!p || p.generation !== generation) throw new BeachballError("STALE_GENERATION", "the placement generation is not current");
    if (p.state !== "running" || p.desired !== "running") throw new BeachballError("GUEST_NOT_CONNECTED", "the guest is not running");
    return { earlierDigest: null };
  }

  /** The operator's view with free capacity. */
  view(): HostView {
    const r = this.mustRow();
    const registered = toRes(JSON.parse(r.capacityJson) as Capacity);
    const allocatable = sub(registered, toRes(JSON.parse(r.reserveJson) as Capacity));
    const placements = this.q.consuming.all();
    return {
      hostId: r.hostId,
      adminState: r.adminState,
      health: healthFromHeartbeat(r.heartbeatAtMs, this.ctx.clock.now()),
      registered,
      allocatable,
      free: this.freeCapacity(r),
      placements: placements.map((p) => ({ placementId: p.placementId, allocationId: p.allocationId, generation: p.generation, state: p.state })),
      heartbeatAt: r.heartbeatAtMs ? new Date(r.heartbeatAtMs).toISOString() : null,
      vmmDriver: r.vmmDriver,
      unschedulable: unschedulableReasons(this.facts(r), this.ctx.clock.now()),
      credentialVersion: r.credentialVersion,
    };
  }

  /** Publishes an advertisement to the directory when `material` (or it is due). */
  private publish(material: boolean): void {
    const r = this.row();
    if (!r || !material) return;
    const now = this.ctx.clock.now();
    const revision = r.adRevision + 1;
    const ad: Advertisement = {
      hostId: r.hostId,
      revision,
      adminState: r.adminState,
      heartbeatAtMs: r.heartbeatAtMs,
      region: r.region,
      architecture: r.architecture,
      labels: JSON.parse(r.labelsJson) as Record<string, string>,
      agentProtocolVersion: r.agentProtocolVersion,
      isolationHealthy: r.isolationHealthy,
      unschedulable: unschedulableReasons(this.facts(r), now).filter((x) => x !== "HOST_NOT_ACTIVE" && x !== "HOST_NOT_HEALTHY"),
      free: this.freeCapacity(r),
      cachedImages: (JSON.parse(r.factsJson) as AgentFacts).cachedImages ?? [],
    };
    this.ctx.sql.query("UPDATE host SET ad_revision = ?, ad_published_at_ms = ?").run(revision, now);
    this.ctx.post("HostDirectory", "global", { messageId: `ad:${r.hostId}:${revision}`, kind: "advertisement", body: ad });
    this.ctx.setAlarm(now + AD_REFRESH_MS * 3);
  }

  /** Re-publishes the advertisement and prunes commands acknowledged over an hour ago (spec "Observability and retention"). */
  override alarm(): void {
    const cutoff = this.ctx.clock.now() - COMMAND_RETENTION_MS;
    this.ctx.sql.transaction(() => {
      this.ctx.sql.query("DELETE FROM commands WHERE status != 'pending' AND created_at_ms < ?").run(cutoff);
      this.publish(true);
    })();
  }
}
