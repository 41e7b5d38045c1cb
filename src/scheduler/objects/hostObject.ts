/**
 * The Host object: the only authority that admits work against a host's
 * capacity (spec "Design principles", "Reservation", "The agent protocol").
 *
 * Owns: the host row (admin state, credential digest, session epoch,
 * heartbeat), its placements, the agent command queue and consumed-delivery
 * digests, the host endpoint's public key and candidates and the
 * configure_connection queue (./hostConnections.ts); and, in memory only, the agent's parked polls and the bootstrap
 * deliveries waiting for it (spec "One allocation end to end": a payload
 * lives in this instance's memory until the agent acknowledges it).
 * Reservation rechecks every hard constraint and inserts placement, first
 * lease and ensure_present in one transaction. Capacity is released only
 * when the agent reports the placement absent.
 * Calls only Admission (the active-host cap and count around an admin
 * change), which calls nobody; posts revoke acknowledgements to Networks.
 * Must never: call an Allocation object (observations go out by `post`),
 * store a bootstrap payload, or accept a message from an older epoch.
 */
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { prepared } from "../runtime/drizzle.ts";
import { BeachballError } from "../../protocol/errors.ts";
import { commandIdFor } from "../../domain/identifiers.ts";
import { fits, sub, used, type HostPlacementState, type Resources } from "../../domain/capacity.ts";
import { healthFromHeartbeat, HEALTHY_HEARTBEAT_AGE_MS } from "../../domain/health.ts";
import { OVERLAP_SUSPECT_MS, unschedulableReasons, type HostFacts } from "../../domain/hostConditions.ts";
import type { Advertisement } from "../../domain/placement.ts";
import type { Capacity } from "../../protocol/api.ts";
import {
  POLL_PARK_MS,
  type AgentCommand,
  type BootstrapDelivery,
  type Envelope,
  type CommandSpec,
  type PollResponse,
  type PlacementUpdate,
  type UpdateRejection,
  type UpdateRejectionCode,
} from "../../protocol/agent.ts";
import type { Candidate } from "../../protocol/connection.ts";
import { GLOBAL, type SchedulerEnv } from "../env.ts";
import { HOST_TABLES, type hostTable, type placementTable } from "./hostSchema.ts";
import { HostConnections, type ConnectionCommandRequest, type HostEndpointFacts } from "./hostConnections.ts";
import {
  NO_FACTS,
  prepareHostQueries,
  toRes,
  type AgentFacts,
  type DeliveryOutcome,
  type HostRegistration,
  type HostView,
  type PlacementStatus,
  type ReserveRequest,
  type ReserveResult,
} from "./hostTypes.ts";

export type {
  DeliveryOutcome,
  HostRegistration,
  HostView,
  PlacementStatus,
  ReserveRequest,
  ReserveResult,
} from "./hostTypes.ts";
export type { ConnectionCommandRequest, HostEndpointFacts } from "./hostConnections.ts";

/** How long acknowledged or superseded commands (and absent placements) are kept, ms. */
export const COMMAND_RETENTION_MS = 3600_000;
/** Longest interval between advertisements, ms (spec: at least every 30 s). */
export const AD_REFRESH_MS = 10_000;
/** Most deliveries held in memory per host at once. */
export const MAX_PENDING_DELIVERIES_PER_HOST = 64;
/** Most polls of one host parked at once (a reconnecting agent may briefly have two). */
export const MAX_PARKED_POLLS = 8;

type HostRow = typeof hostTable.$inferSelect;
type PlacementRow = typeof placementTable.$inferSelect;

interface PendingDelivery {
  delivery: BootstrapDelivery;
  handedOut: boolean;
  settle: (o: DeliveryOutcome) => void;
}

/** See the module header. */
export class HostObject extends AuthorityObject<SchedulerEnv, never> {
  static readonly className = "Host";
  static readonly messageSchema = null;
  static readonly tables = HOST_TABLES;

  private readonly q = prepared(this.state.storage, prepareHostQueries);
  private cachedRow: HostRow | null | undefined;
  /** Capacity-consuming placements (state ≠ absent), by ID. */
  private live: Map<string, PlacementRow> | undefined;
  /** Parked polls of this host's agent: each resolves when woken or after its park. */
  private readonly parked = new Set<(wokenAtMs: number | null) => void>();
  /** Bootstrap deliveries waiting for the agent, by delivery ID (memory only). */
  private readonly deliveries = new Map<string, PendingDelivery>();
  private draining = false;
  /** Private networking: endpoint facts and configure_connection commands. */
  private readonly conn = new HostConnections(this.state, this.env);

  constructor(state: ObjectState<never>, env: SchedulerEnv) {
    super(state, env);
  }

  private get sql() {
    return this.state.storage.sql;
  }

  private row(): HostRow | null {
    if (this.cachedRow === undefined) this.cachedRow = this.q.host.get({ obj: this.state.name }) ?? null;
    return this.cachedRow;
  }

  private mustRow(): HostRow {
    const r = this.row();
    if (!r) throw new BeachballError("NOT_FOUND", "host is not registered");
    return r;
  }

  /** Applies `patch` to the host row (in the caller's transaction) and to the cached copy. */
  private setRow(patch: Partial<HostRow>): void {
    const r = this.mustRow();
    const cols = Object.keys(patch) as (keyof HostRow)[];
    if (cols.length === 0) return;
    this.sql.exec(
      `UPDATE host SET ${cols.map((c) => `${HOST_COLUMN[c]} = ?`).join(", ")} WHERE obj = ?`,
      ...cols.map((c) => dbValue(patch[c])),
      this.state.name,
    );
    this.cachedRow = { ...r, ...patch };
  }

  private placements(): Map<string, PlacementRow> {
    if (!this.live) this.live = new Map(this.q.consuming.all({ obj: this.state.name }).map((p) => [p.placementId, p]));
    return this.live;
  }

  private placement(id: string): PlacementRow | undefined {
    return this.placements().get(id) ?? this.q.byId.get({ obj: this.state.name, id });
  }

  private setPlacement(p: PlacementRow, patch: Partial<PlacementRow>): PlacementRow {
    const cols = Object.keys(patch) as (keyof PlacementRow)[];
    this.sql.exec(
      `UPDATE host_placements SET ${cols.map((c) => `${PLACEMENT_COLUMN[c]} = ?`).join(", ")} WHERE obj = ? AND placement_id = ?`,
      ...cols.map((c) => dbValue(patch[c])),
      this.state.name,
      p.placementId,
    );
    const next = { ...p, ...patch };
    if (next.state === "absent") this.placements().delete(p.placementId);
    else this.placements().set(p.placementId, next);
    return next;
  }

  /** Runs `fn` atomically; the cached copies are dropped if it throws (they may hold rolled-back writes). */
  private atomically<T>(fn: () => T): T {
    try {
      return this.state.storage.transactionSync(fn);
    } catch (e) {
      this.cachedRow = undefined;
      this.live = undefined;
      throw e;
    }
  }

  /**
   * Creates the host on first enrollment (draining, or active with autoActivate).
   * A repeat with the same enrollment digest returns the existing row's version;
   * another configuration is ENROLLMENT_CONFLICT.
   */
  register(reg: HostRegistration): { created: boolean; adminState: string; credentialVersion: number } {
    const existing = this.row();
    if (existing) {
      if (existing.enrollDigest !== reg.enrollDigest)
        throw new BeachballError("ENROLLMENT_CONFLICT", "host already enrolled with another configuration");
      return { created: false, adminState: existing.adminState, credentialVersion: existing.credentialVersion };
    }
    const now = this.env.clock.now();
    const row: HostRow = {
      obj: reg.hostId,
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
    };
    const cols = Object.keys(row) as (keyof HostRow)[];
    this.atomically(() => {
      this.sql.exec(
        `INSERT INTO host (${cols.map((c) => HOST_COLUMN[c]).join(", ")}) VALUES (${cols.map(() => "?").join(", ")})`,
        ...cols.map((c) => dbValue(row[c])),
      );
      this.cachedRow = row;
      this.live = new Map();
      this.publish(true);
    });
    return { created: true, adminState: row.adminState, credentialVersion: 1 };
  }

  /** True once the host was enrolled. */
  isRegistered(): boolean {
    return !!this.row();
  }

  /** The administrative state, or null before enrollment. */
  adminState(): "active" | "draining" | "disabled" | null {
    return this.row()?.adminState ?? null;
  }

  /**
   * An operator's admin change, one at a time per host: it touches
   * Admission (the active-host cap, then the active count) and this host,
   * so two changes must not interleave between the two. Activation is gated
   * by the cap (`maxActive`); afterwards Admission counts this host as
   * active exactly when it is, whatever the change's outcome. Throws
   * NOT_FOUND, HOST_DISABLED, QUOTA_ACTIVE_HOSTS.
   */
  changeAdminState(
    state: "active" | "draining" | "disabled",
    maxActive: number,
  ): Promise<{ adminState: string; credentialVersion: number; fenced: number }> {
    const run = this.adminChain.then(
      () => this.changeNow(state, maxActive),
      () => this.changeNow(state, maxActive),
    );
    this.adminChain = run.catch(() => undefined);
    return run;
  }

  private adminChain: Promise<unknown> = Promise.resolve();

  private async changeNow(
    state: "active" | "draining" | "disabled",
    maxActive: number,
  ): Promise<{ adminState: string; credentialVersion: number; fenced: number }> {
    const before = this.adminState();
    if (before === null) throw new BeachballError("NOT_FOUND", "no such host");
    if (before === "disabled" && state !== "disabled")
      throw new BeachballError(
        "HOST_DISABLED",
        `host ${this.state.name} is disabled (fenced for good); enroll it again to use it`,
      );
    const admission = this.env.Admission.get(GLOBAL);
    try {
      if (state === "active") await admission.admitActiveHost(this.state.name, maxActive);
      return this.setAdminState(state);
    } finally {
      await admission.setHostActive(this.state.name, this.adminState() === "active");
    }
  }

  /** True if `credentialDigest` is this host's current credential. */
  authenticate(credentialDigest: string): boolean {
    const r = this.row();
    return !!r && r.adminState !== "disabled" && r.credentialDigest === credentialDigest;
  }

  private freeCapacity(r: HostRow): Resources {
    const allocatable = sub(toRes(parsed<Capacity>(r.capacityJson)), toRes(parsed<Capacity>(r.reserveJson)));
    return sub(
      allocatable,
      used(
        [...this.placements().values()].map((p) => ({ state: p.state, resources: parsed<Resources>(p.resourcesJson) })),
      ),
    );
  }

  /** Reserves capacity for one placement (idempotent by `key`). Rejects with a stable code. */
  reserve(req: ReserveRequest): ReserveResult {
    const prior = this.q.byKey.get({ obj: this.state.name, key: req.key });
    if (prior) return { accepted: true, placementId: prior.placementId };
    const r = this.row();
    if (!r) return { accepted: false, code: "HOST_NOT_ACTIVE" };
    const now = this.env.clock.now();
    const blocked = unschedulableReasons(this.facts(r), now);
    if (blocked.length) return { accepted: false, code: blocked[0]! };
    const request: Resources = {
      cpuMillis: req.spec.cpuMillis,
      memoryMiB: req.spec.memoryMiB,
      ephemeralDiskMiB: req.spec.ephemeralDiskMiB,
      slots: 1,
    };
    const misfit = fits(this.freeCapacity(r), request);
    if (misfit) return { accepted: false, code: misfit };
    const p: PlacementRow = {
      obj: this.state.name,
      placementId: req.placementId,
      allocationId: req.allocationId,
      generation: req.generation,
      state: "reserved",
      resourcesJson: JSON.stringify(request),
      specJson: JSON.stringify(req.spec),
      reservationKey: req.key,
      desired: "present",
      leaseExpiresAtMs: now + this.env.config.timeouts.leaseMs,
      errorCode: null,
      createdAtMs: now,
      updatedAtMs: now,
    };
    this.atomically(() => {
      this.sql.exec(
        "INSERT INTO host_placements (obj, placement_id, allocation_id, generation, state, resources_json, spec_json, reservation_key, desired, lease_expires_at_ms, error_code, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        p.obj,
        p.placementId,
        p.allocationId,
        p.generation,
        p.state,
        p.resourcesJson,
        p.specJson,
        p.reservationKey,
        p.desired,
        p.leaseExpiresAtMs,
        null,
        now,
        now,
      );
      this.placements().set(p.placementId, p);
      this.enqueue(req.placementId, "ensure_present", req.generation);
      this.publish(true);
    });
    this.wakePolls();
    return { accepted: true, placementId: req.placementId };
  }

  private facts(r: HostRow): HostFacts {
    const cap = JSON.parse(r.capacityJson) as Capacity;
    return {
      adminState: r.adminState,
      heartbeatAtMs: r.heartbeatAtMs,
      isolationHealthy: r.isolationHealthy,
      registered: cap,
      ...(JSON.parse(r.factsJson) as AgentFacts),
    };
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
  setAdminState(state: "active" | "draining" | "disabled"): {
    adminState: string;
    credentialVersion: number;
    fenced: number;
  } {
    const r = this.mustRow();
    if (r.adminState === "disabled") {
      if (state !== "disabled")
        throw new BeachballError(
          "HOST_DISABLED",
          `host ${r.obj} is disabled (fenced for good); enroll it again to use it`,
        );
      return { adminState: r.adminState, credentialVersion: r.credentialVersion, fenced: 0 };
    }
    const now = this.env.clock.now();
    let fenced = 0;
    this.atomically(() => {
      if (state !== "disabled") {
        this.setRow({ adminState: state });
      } else {
        this.setRow({
          adminState: "disabled",
          credentialDigest: null,
          credentialVersion: r.credentialVersion + 1,
          fencedAtMs: now,
        });
        for (const p of [...this.placements().values()]) {
          fenced++;
          this.setPlacement(p, { state: "absent", desired: "absent", errorCode: "HOST_FENCED", updatedAtMs: now });
          this.state.post(this.env.Allocation, p.allocationId, `fence:${r.obj}:${p.placementId}`, {
            kind: "observation",
            hostId: r.obj,
            placementId: p.placementId,
            generation: p.generation,
            state: "absent",
            errorCode: "HOST_FENCED",
            workloadExitCode: null,
            at: new Date(now).toISOString(),
          });
        }
        this.sql.exec(
          "UPDATE host_commands SET status = 'superseded' WHERE obj = ? AND status = 'pending'",
          this.state.name,
        );
        const alertId = `alert:host_disabled:${r.obj}:${now}`;
        this.state.post(this.env.Operations, GLOBAL, alertId, {
          kind: "alert",
          alertId,
          type: "host.disabled",
          subject: r.obj,
          reason: "HOST_FENCED",
          atMs: now,
        });
      }
      this.publish(true);
    });
    if (fenced) this.wakePolls();
    const after = this.mustRow();
    return { adminState: after.adminState, credentialVersion: after.credentialVersion, fenced };
  }

  /** Where a placement stands and how healthy this host is (for an allocation's host-loss check). */
  placementStatus(placementId: string): PlacementStatus {
    const r = this.row();
    const p = this.placement(placementId);
    return {
      exists: !!p,
      state: p?.state ?? null,
      leaseExpiresAtMs: p?.leaseExpiresAtMs ?? 0,
      hostHealth: r ? healthFromHeartbeat(r.heartbeatAtMs, this.env.clock.now()) : "unknown",
      fenced: r?.adminState === "disabled",
    };
  }

  /** Asks the agent to make the placement absent (idempotent). Returns true once absence was observed. */
  requestAbsent(placementId: string, generation: number): boolean {
    const p = this.placement(placementId);
    if (!p || p.generation !== generation) return !p;
    if (p.state === "absent") return true;
    if (this.env.config.debug.releaseCapacityOnLeaseExpiry && p.leaseExpiresAtMs < this.env.clock.now()) {
      this.setPlacement(p, { state: "absent", desired: "absent" });
      return true;
    }
    if (p.desired !== "absent") {
      this.atomically(() => {
        this.setPlacement(p, { desired: "absent", updatedAtMs: this.env.clock.now() });
        this.sql.exec(
          "UPDATE host_commands SET status = 'superseded' WHERE obj = ? AND placement_id = ? AND status = 'pending'",
          this.state.name,
          placementId,
        );
        this.enqueue(placementId, "ensure_absent", generation);
      });
      this.wakePolls();
    }
    return false;
  }

  /**
   * The host endpoint's public key and candidates for a grant to placement
   * `placementId` of `generation` (spec "Data path" step 2). Throws
   * STALE_GENERATION when that placement is not this host's current,
   * running one (replaced, absent, or going), CONNECTIVITY_UNAVAILABLE
   * before the endpoint's first connectivity_update, HOST_DISABLED for a
   * fenced host.
   */
  connectionEndpoint(placementId: string, generation: number): HostEndpointFacts {
    const r = this.mustRow();
    if (r.adminState === "disabled") throw new BeachballError("HOST_DISABLED", "the allocation's host is fenced");
    const p = this.placement(placementId);
    if (!p || p.generation !== generation || p.state !== "running" || p.desired !== "running")
      throw new BeachballError("STALE_GENERATION", "the placement is not this host's current running one");
    const ep = this.conn.endpoint();
    if (!ep)
      throw new BeachballError("CONNECTIVITY_UNAVAILABLE", "the host has not reported its WireGuard endpoint yet", {
        retryAfterSeconds: 5,
      });
    return ep;
  }

  /** True when `placementId` is this host's placement at `generation` and the scheduler still wants it (not absent, not going). */
  private wantedPlacement(placementId: string, generation: number): boolean {
    const p = this.placement(placementId);
    return (
      !!p &&
      p.generation === generation &&
      p.state !== "absent" &&
      p.desired !== "absent" &&
      this.row()?.adminState !== "disabled"
    );
  }

  /** The client of grant `grantId` posted candidates to its Connection: they go to the host with the grant's apply (see HostConnections.clientCandidates). */
  clientCandidates(grantId: string, candidates: Candidate[]): void {
    if (!this.row()) return;
    if (this.atomically(() => this.conn.clientCandidates(grantId, candidates))) this.wakePolls();
  }

  /** Queues a configure_connection for the agent (idempotent; see HostConnections.enqueue) and wakes its parked poll. */
  configureConnection(c: ConnectionCommandRequest): void {
    if (!this.row()) throw new BeachballError("NOT_FOUND", "host is not registered");
    if (this.atomically(() => this.conn.enqueue(c))) this.wakePolls();
  }

  private enqueue(placementId: string, type: AgentCommand["type"], generation: number): void {
    this.sql.exec(
      "INSERT OR IGNORE INTO host_commands (obj, command_id, placement_id, type, generation, status, created_at_ms) VALUES (?, ?, ?, ?, ?, 'pending', ?)",
      this.state.name,
      commandIdFor(placementId, type, generation),
      placementId,
      type,
      generation,
      this.env.clock.now(),
    );
  }

  /**
   * One agent envelope (poll or messages) and, for a poll with nothing to
   * hand out, a park of up to `waitMs` (≤ POLL_PARK_MS) until work arrives.
   * Throws STALE_AGENT_EPOCH for an older epoch.
   */
  async poll(env: Envelope, waitMs: number): Promise<PollResponse> {
    const first = this.handleEnvelope(env);
    const park = Math.min(waitMs, POLL_PARK_MS);
    if (
      env.type !== "poll" ||
      first.commands.length > 0 ||
      first.deliveries.length > 0 ||
      (first.connections?.length ?? 0) > 0 ||
      park <= 0 ||
      this.draining
    )
      return first;
    const wokenAtMs = await this.park(park);
    const answer = this.work(first.agentEpoch);
    // Wake-up latency: from the work that woke the poll to its answer (a park that timed out is not a wake-up).
    if (
      wokenAtMs !== null &&
      (answer.commands.length > 0 || answer.deliveries.length > 0 || (answer.connections?.length ?? 0) > 0)
    ) {
      this.env.metrics.observe(
        "bb_agent_poll_wakeup_seconds",
        "From work for a host to its parked poll answering with it",
        (this.env.clock.now() - wokenAtMs) / 1000,
      );
    }
    return answer;
  }

  /** Parks until woken (resolves with the wake time, ms) or `ms` passes (resolves null). */
  private park(ms: number): Promise<number | null> {
    if (this.parked.size >= MAX_PARKED_POLLS) return Promise.resolve(null);
    return new Promise((resolve) => {
      const done = (wokenAtMs: number | null) => {
        clearTimeout(timer);
        this.parked.delete(done);
        resolve(wokenAtMs);
      };
      const timer = setTimeout(() => done(null), ms);
      this.parked.add(done);
    });
  }

  /** Wakes every parked poll of this host. */
  private wakePolls(): void {
    const now = this.env.clock.now();
    for (const w of [...this.parked]) w(now);
  }

  /** Ends parked polls at once (the embedded host calls this before it stops). */
  override drain(): void {
    this.draining = true;
    this.wakePolls();
  }

  /**
   * Applies one agent envelope: epoch fencing, heartbeat, lease renewal,
   * observations, acks. Returns the poll response body. Throws
   * STALE_AGENT_EPOCH for an older epoch.
   */
  handleEnvelope(env: Envelope): PollResponse {
    const r = this.mustRow();
    const now = this.env.clock.now();
    let epoch = r.agentEpoch;
    const newSession = env.agentEpoch === "" && env.type === "poll";
    if (newSession) {
      epoch = Buffer.from(this.env.random.bytes(16)).toString("hex");
    } else if (env.agentEpoch !== r.agentEpoch) {
      throw new BeachballError("STALE_AGENT_EPOCH", "the agent epoch is not the current session", {
        currentEpochKnown: r.agentEpoch !== "",
      });
    }
    const prevFacts = JSON.parse(r.factsJson) as AgentFacts;
    const sentAtMs = Date.parse(env.sentAt);
    const overlapping =
      newSession &&
      r.bootId !== "" &&
      r.bootId !== env.payload.bootId &&
      r.heartbeatAtMs !== null &&
      now - r.heartbeatAtMs < HEALTHY_HEARTBEAT_AGE_MS;
    const facts: AgentFacts = {
      clockSkewMs: Number.isFinite(sentAtMs) ? Math.abs(sentAtMs - now) : prevFacts.clockSkewMs,
      inventory: env.payload.health?.inventory ?? prevFacts.inventory,
      volumesNearlyFull: env.payload.health?.volumesNearlyFull ?? prevFacts.volumesNearlyFull,
      overlapUntilMs: overlapping ? now + OVERLAP_SUSPECT_MS : prevFacts.overlapUntilMs,
      vmmStartFailing: env.payload.health?.vmmStartFailing ?? prevFacts.vmmStartFailing ?? false,
      cachedImages: env.payload.health?.cachedImages ?? prevFacts.cachedImages ?? [],
    };
    const factsJson = JSON.stringify(facts);
    const isolationHealthy = env.payload.health?.isolationHealthy ?? r.isolationHealthy;
    const rejected: UpdateRejection[] = [];
    this.atomically(() => {
      if (overlapping) {
        const alertId = `alert:overlap:${r.obj}:${now}`;
        this.state.post(this.env.Operations, GLOBAL, alertId, {
          kind: "alert",
          alertId,
          type: "host.overlapping_agent_session",
          subject: r.obj,
          reason: "OVERLAPPING_AGENT_SESSION",
          atMs: now,
        });
      }
      if (facts.vmmStartFailing && !prevFacts.vmmStartFailing) {
        const alertId = `alert:vmm:${r.obj}:${now}`;
        this.state.post(this.env.Operations, GLOBAL, alertId, {
          kind: "alert",
          alertId,
          type: "host.vmm_start_failing",
          subject: r.obj,
          reason: "VMM_START_FAILING",
          atMs: now,
        });
      }
      if (newSession) this.sql.exec("DELETE FROM host_update_seqs WHERE obj = ?", this.state.name);
      let lastSeq = newSession ? 0 : r.lastSeq;
      let material = newSession || factsJson !== r.factsJson || isolationHealthy !== r.isolationHealthy;
      for (const u of env.payload.updates) {
        const outcome = this.applyUpdate(r.obj, epoch, u);
        if (typeof outcome === "string") {
          rejected.push({ seq: u.seq, placementId: u.placementId, code: outcome });
          continue;
        }
        lastSeq = Math.max(lastSeq, u.seq);
        if (outcome.material) material = true;
      }
      this.setRow({
        heartbeatAtMs: now,
        agentEpoch: epoch,
        bootId: env.payload.bootId,
        lastSeq,
        isolationHealthy,
        factsJson,
        adRevision: this.row()!.adRevision,
        adPublishedAtMs: this.row()!.adPublishedAtMs,
      });
      for (const a of env.payload.acks) {
        this.sql.exec(
          "UPDATE host_commands SET status = ? WHERE obj = ? AND command_id = ? AND status = 'pending'",
          a.result === "rejected" ? "rejected" : "acked",
          this.state.name,
          a.commandId,
        );
      }
      for (const d of env.payload.deliveryAcks) this.applyDeliveryAck(r.obj, d);
      this.conn.applyAcks(env.payload.acks);
      if (env.payload.connectivity)
        this.conn.applyConnectivity(epoch, env.payload.connectivity, (placementId, generation) =>
          this.wantedPlacement(placementId, generation),
        );
      // Leases are renewed by heartbeats, but never for a placement the scheduler wants gone.
      const lease = now + this.env.config.timeouts.leaseMs;
      const renew = [...this.placements().values()].filter(
        (p) => p.desired !== "absent" && p.leaseExpiresAtMs !== lease,
      );
      if (renew.length > 0) {
        this.sql.exec(
          "UPDATE host_placements SET lease_expires_at_ms = ? WHERE obj = ? AND state != 'absent' AND desired != 'absent'",
          lease,
          this.state.name,
        );
        for (const p of renew) this.placements().set(p.placementId, { ...p, leaseExpiresAtMs: lease });
      }
      this.publish(material || now - r.adPublishedAtMs > AD_REFRESH_MS);
    });
    if (newSession) for (const p of this.deliveries.values()) p.handedOut = false;
    // A messages envelope may have enqueued work (prepared ⇒ ensure_running): wake the parked poll.
    // Commands and deliveries ride only in poll responses, so each is handed out once per poll.
    const withRejections = (res: PollResponse): PollResponse =>
      rejected.length ? { ...res, rejectedUpdates: rejected } : res;
    if (env.type === "messages") {
      if (this.hasWork()) this.wakePolls();
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
    const p = this.placement(u.placementId);
    if (!p) return "UNKNOWN_PLACEMENT";
    if (p.generation !== u.generation) return "STALE_GENERATION";
    const seen = this.sql
      .exec<{ last_seq: number }>(
        "SELECT last_seq FROM host_update_seqs WHERE obj = ? AND placement_id = ?",
        this.state.name,
        p.placementId,
      )
      .next();
    if (u.seq <= (seen.done ? 0 : seen.value.last_seq)) return "SEQUENCE_NOT_INCREASING";
    if (p.state === "absent") return "INVALID_STATE";
    this.sql.exec(
      "INSERT INTO host_update_seqs (obj, placement_id, last_seq) VALUES (?, ?, ?) ON CONFLICT (obj, placement_id) DO UPDATE SET last_seq = excluded.last_seq",
      this.state.name,
      p.placementId,
      u.seq,
    );
    const now = this.env.clock.now();
    let state: HostPlacementState = p.state;
    if (u.state === "accepted" || u.state === "preparing" || u.state === "prepared") state = "preparing";
    else if (u.state === "starting" || u.state === "running") state = "running";
    else if (u.state === "stopping") state = "stopping";
    else if (u.state === "error") state = "cleanup_pending";
    else if (u.state === "absent") state = "absent";
    let cur = this.setPlacement(p, { state, errorCode: u.errorCode ?? p.errorCode, updatedAtMs: now });
    if (u.state === "prepared" && cur.desired === "present") {
      cur = this.setPlacement(cur, { desired: "running" });
      this.enqueue(p.placementId, "ensure_running", p.generation);
    }
    if (u.state === "absent")
      this.sql.exec(
        "UPDATE host_commands SET status = 'superseded' WHERE obj = ? AND placement_id = ? AND status = 'pending'",
        this.state.name,
        p.placementId,
      );
    this.state.post(this.env.Allocation, p.allocationId, `obs:${hostId}:${epoch}:${p.placementId}:${u.seq}`, {
      kind: "observation",
      hostId,
      placementId: p.placementId,
      generation: p.generation,
      state: u.state,
      errorCode: u.errorCode ?? null,
      workloadExitCode: u.workloadExitCode ?? null,
      ...(u.exit ? { exit: u.exit } : {}),
      at: u.at,
    });
    return { material: state === "absent" };
  }

  private applyDeliveryAck(hostId: string, d: Envelope["payload"]["deliveryAcks"][number]): void {
    if (d.result === "consumed" && d.digest) {
      const p = this.placement(d.placementId);
      this.sql.exec(
        "INSERT OR IGNORE INTO host_deliveries (obj, delivery_id, placement_id, generation, digest, consumed_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
        this.state.name,
        d.deliveryId,
        d.placementId,
        d.generation,
        d.digest,
        this.env.clock.now(),
      );
      if (p)
        this.state.post(this.env.Allocation, p.allocationId, `dlv:${d.deliveryId}`, {
          kind: "delivery_consumed",
          deliveryId: d.deliveryId,
          generation: d.generation,
          digest: d.digest,
        });
      this.deliveries.get(d.deliveryId)?.settle({ result: "consumed", digest: d.digest });
    } else {
      this.deliveries
        .get(d.deliveryId)
        ?.settle({ result: d.result === "guest_not_connected" ? "guest_not_connected" : "rejected" });
    }
    void hostId;
  }

  /** True if the agent has commands or deliveries waiting. */
  hasWork(): boolean {
    if (!this.row()) return false;
    for (const p of this.deliveries.values()) if (!p.handedOut) return true;
    return this.q.pending.all({ obj: this.state.name }).length > 0 || this.conn.hasPending();
  }

  /** Pending commands (≤ MAX_COMMANDS_PER_POLL) stamped with `epoch`, deliveries, and leases. */
  work(epoch: string): PollResponse {
    this.mustRow();
    const commands: AgentCommand[] = [];
    for (const c of this.q.pending.all({ obj: this.state.name })) {
      const p = this.placement(c.placementId);
      if (!p) continue;
      commands.push({
        commandId: c.commandId,
        type: c.type,
        allocationId: p.allocationId,
        placementId: p.placementId,
        generation: c.generation,
        agentEpoch: epoch,
        leaseExpiresAt: new Date(p.leaseExpiresAtMs).toISOString(),
        spec: JSON.parse(p.specJson) as CommandSpec,
      });
    }
    const deliveries: BootstrapDelivery[] = [];
    for (const p of this.deliveries.values()) {
      if (p.handedOut) continue;
      p.handedOut = true;
      deliveries.push(p.delivery);
    }
    const connections = this.conn.pending();
    return {
      agentEpoch: epoch,
      commands,
      deliveries,
      leases: this.leases(),
      ...(connections.length > 0 ? { connections } : {}),
    };
  }

  /** Authoritative lease expiry of every placement not yet absent. */
  private leases(): Record<string, string> {
    const leases: Record<string, string> = {};
    for (const p of this.placements().values()) leases[p.placementId] = new Date(p.leaseExpiresAtMs).toISOString();
    return leases;
  }

  /** Checks that a delivery may go to this placement now; returns an earlier digest for a repeated delivery ID. */
  checkDelivery(deliveryId: string, placementId: string, generation: number): { earlierDigest: string | null } {
    const prior = this.q.delivery.get({ obj: this.state.name, id: deliveryId });
    if (prior) return { earlierDigest: prior.digest };
    const p = this.placement(placementId);
    if (!p || p.generation !== generation)
      throw new BeachballError("STALE_GENERATION", "the placement generation is not current");
    if (p.state !== "running" || p.desired !== "running")
      throw new BeachballError("GUEST_NOT_CONNECTED", "the guest is not running");
    return { earlierDigest: null };
  }

  /**
   * Hands a bootstrap payload to the agent's next poll, in this instance's
   * memory only, and resolves with the agent's acknowledgement or `timeout`
   * after `timeoutMs`. Throws RATE_LIMITED past MAX_PENDING_DELIVERIES_PER_HOST.
   */
  deliver(delivery: BootstrapDelivery, timeoutMs: number): Promise<DeliveryOutcome> {
    if (this.deliveries.has(delivery.deliveryId)) return Promise.resolve({ result: "rejected" });
    if (this.deliveries.size >= MAX_PENDING_DELIVERIES_PER_HOST)
      throw new BeachballError("RATE_LIMITED", "too many deliveries in flight for this host", { retryAfterSeconds: 5 });
    const outcome = new Promise<DeliveryOutcome>((resolve) => {
      const timer = setTimeout(() => finish({ result: "timeout" }), timeoutMs);
      const finish = (o: DeliveryOutcome) => {
        clearTimeout(timer);
        if (this.deliveries.get(delivery.deliveryId)?.settle === finish) this.deliveries.delete(delivery.deliveryId);
        resolve(o);
      };
      this.deliveries.set(delivery.deliveryId, { delivery, handedOut: false, settle: finish });
    });
    this.wakePolls();
    return outcome;
  }

  /** The operator's view with free capacity. */
  view(): HostView {
    const r = this.mustRow();
    const registered = toRes(JSON.parse(r.capacityJson) as Capacity);
    const allocatable = sub(registered, toRes(JSON.parse(r.reserveJson) as Capacity));
    return {
      hostId: r.obj,
      adminState: r.adminState,
      health: healthFromHeartbeat(r.heartbeatAtMs, this.env.clock.now()),
      registered,
      allocatable,
      free: this.freeCapacity(r),
      placements: [...this.placements().values()].map((p) => ({
        placementId: p.placementId,
        allocationId: p.allocationId,
        generation: p.generation,
        state: p.state,
      })),
      heartbeatAt: r.heartbeatAtMs ? new Date(r.heartbeatAtMs).toISOString() : null,
      vmmDriver: r.vmmDriver,
      unschedulable: unschedulableReasons(this.facts(r), this.env.clock.now()),
      credentialVersion: r.credentialVersion,
    };
  }

  /** Publishes an advertisement to the directory when `material` (or it is due). */
  private publish(material: boolean): void {
    const r = this.row();
    if (!r || !material) return;
    const now = this.env.clock.now();
    // At least the time: a restart that lost the last revisions still publishes newer ones (the row keeps one from the last heartbeat).
    const revision = Math.max(r.adRevision + 1, now);
    const ad: Advertisement = {
      hostId: r.obj,
      revision,
      adminState: r.adminState,
      heartbeatAtMs: r.heartbeatAtMs,
      region: r.region,
      architecture: r.architecture,
      labels: JSON.parse(r.labelsJson) as Record<string, string>,
      agentProtocolVersion: r.agentProtocolVersion,
      isolationHealthy: r.isolationHealthy,
      unschedulable: unschedulableReasons(this.facts(r), now).filter(
        (x) => x !== "HOST_NOT_ACTIVE" && x !== "HOST_NOT_HEALTHY",
      ),
      free: this.freeCapacity(r),
      cachedImages: (JSON.parse(r.factsJson) as AgentFacts).cachedImages ?? [],
    };
    this.cachedRow = { ...r, adRevision: revision, adPublishedAtMs: now };
    this.state.postLatest(this.env.HostDirectory, GLOBAL, `ad:${r.obj}`, { kind: "advertisement", ad });
    // The refresh alarm moves only when it would fire soon (not on every publish).
    const armed = this.state.getAlarm();
    if (armed === null || armed < now + AD_REFRESH_MS) this.state.setAlarm(now + AD_REFRESH_MS * 3);
  }

  /** Re-publishes the advertisement and prunes commands and absent placements older than an hour (spec "Observability and retention"). */
  override alarm(): void {
    if (!this.row()) return;
    const cutoff = this.env.clock.now() - COMMAND_RETENTION_MS;
    this.atomically(() => {
      this.sql.exec(
        "DELETE FROM host_commands WHERE obj = ? AND status != 'pending' AND created_at_ms < ?",
        this.state.name,
        cutoff,
      );
      this.sql.exec(
        "DELETE FROM host_placements WHERE obj = ? AND state = 'absent' AND updated_at_ms < ?",
        this.state.name,
        cutoff,
      );
      this.conn.prune(cutoff);
      this.publish(true);
    });
  }
}

const HOST_COLUMN: Record<keyof HostRow, string> = {
  obj: "obj",
  adminState: "admin_state",
  credentialDigest: "credential_digest",
  credentialVersion: "credential_version",
  enrollDigest: "enroll_digest",
  capacityJson: "capacity_json",
  reserveJson: "reserve_json",
  region: "region",
  architecture: "architecture",
  labelsJson: "labels_json",
  agentProtocolVersion: "agent_protocol_version",
  vmmDriver: "vmm_driver",
  heartbeatAtMs: "heartbeat_at_ms",
  agentEpoch: "agent_epoch",
  bootId: "boot_id",
  lastSeq: "last_seq",
  isolationHealthy: "isolation_healthy",
  adRevision: "ad_revision",
  adPublishedAtMs: "ad_published_at_ms",
  registeredAtMs: "registered_at_ms",
  factsJson: "facts_json",
  fencedAtMs: "fenced_at_ms",
};

const PLACEMENT_COLUMN: Record<keyof PlacementRow, string> = {
  obj: "obj",
  placementId: "placement_id",
  allocationId: "allocation_id",
  generation: "generation",
  state: "state",
  resourcesJson: "resources_json",
  specJson: "spec_json",
  reservationKey: "reservation_key",
  desired: "desired",
  leaseExpiresAtMs: "lease_expires_at_ms",
  errorCode: "error_code",
  createdAtMs: "created_at_ms",
  updatedAtMs: "updated_at_ms",
};

const parsedCache = new Map<string, unknown>();
/** JSON.parse of a small, often repeated column value (capacities, resources), memoised (bounded). */
function parsed<T>(text: string): T {
  let v = parsedCache.get(text);
  if (v === undefined) {
    if (parsedCache.size >= 4096) parsedCache.clear();
    v = JSON.parse(text) as unknown;
    parsedCache.set(text, v);
  }
  return v as T;
}

/** A value as SQLite stores it (booleans as 0/1, as drizzle's boolean mode does). */
function dbValue(v: unknown): unknown {
  return typeof v === "boolean" ? (v ? 1 : 0) : (v ?? null);
}
