/**
 * The scheduler's stateless front ("the Worker" in the spec): resolves the
 * caller, turns each API call into one command on the right authority
 * object, and parks agent polls. Routes call these methods and only
 * translate HTTP.
 *
 * Implements spec "Worker and Durable Objects", "Admission and limits",
 * "Enrollment", "Transport", "One allocation end to end".
 * Must never: persist a bootstrap payload or a raw token, or take an
 * identity from a request body.
 */
import { createHash } from "node:crypto";
import { BeachballError } from "../protocol/errors.ts";
import { MAX_PAYLOAD_BYTES, type AllocationView, type BootstrapBody, type CreateAllocationBody, type EnrollBody, type WellKnown } from "../protocol/api.ts";
import { POLL_PARK_MS, type EnrollResponse, type Envelope, type PollResponse } from "../protocol/agent.ts";
import { allocationIdFor, canonicalJson, digestOf } from "../domain/identifiers.ts";
import { DEFAULT_TIMEOUTS, type TimeoutPolicy } from "../domain/allocation.ts";
import { ObjectRuntime, type RuntimeOptions } from "./runtime/objectRuntime.ts";
import { systemClock, systemRandomness, type Clock, type Randomness } from "./runtime/ports.ts";
import { identify, tokenDigest, type DeploymentManifest, type Identity } from "./manifest.ts";
import { DeliveryHub, HostSignals, type SchedulerServices } from "./services.ts";
import { AllocationObject } from "./objects/allocationObject.ts";
import { AllocationIndexObject } from "./objects/allocationIndex.ts";
import { AdmissionObject } from "./objects/admissionObject.ts";
import { EnrollmentObject } from "./objects/enrollmentObject.ts";
import { HostDirectoryObject } from "./objects/hostDirectory.ts";
import { HostObject, type HostView } from "./objects/hostObject.ts";
import { OperationsObject } from "./objects/operationsObject.ts";
import type { AlertItem } from "../protocol/views.ts";
import { Metrics } from "./metrics.ts";

/** How long a controller's delivery request waits for the agent's acknowledgement, ms (spec: 30 s). */
export const DELIVERY_TIMEOUT_MS = 30_000;

const HOST_ID_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** Options for a scheduler instance. */
export interface WorkerOptions {
  dataDir: string;
  manifest: DeploymentManifest;
  /** Public URL agents and clients use, printed in join commands. */
  publicUrl: string;
  clock?: Clock;
  random?: Randomness;
  timeouts?: Partial<TimeoutPolicy>;
  /** Simulation fault hook (see RuntimeOptions). */
  faultHook?: RuntimeOptions["faultHook"];
  /** Deliberately injected bugs (see SchedulerServices.debug); tests only. */
  debug?: SchedulerServices["debug"];
}

/** See the module header. */
export class SchedulerWorker {
  readonly runtime: ObjectRuntime;
  private readonly services: SchedulerServices;
  /** Tail of the admin changes in flight per host (see underHostLock). */
  private readonly hostLocks = new Map<string, Promise<void>>();

  constructor(private readonly opts: WorkerOptions) {
    const clock = opts.clock ?? systemClock;
    const random = opts.random ?? systemRandomness;
    this.services = {
      hostSignals: new HostSignals(),
      deliveries: new DeliveryHub(),
      manifest: opts.manifest,
      timeouts: { ...DEFAULT_TIMEOUTS, ...opts.timeouts },
      clock,
      random,
      metrics: new Metrics(),
      debug: opts.debug ?? {},
    };
    if (opts.manifest.limits.retentionDays !== undefined && opts.timeouts?.retentionDays === undefined) this.services.timeouts.retentionDays = opts.manifest.limits.retentionDays;
    this.runtime = new ObjectRuntime(
      opts.dataDir,
      clock,
      random,
      [AllocationObject, AllocationIndexObject, AdmissionObject, EnrollmentObject, HostDirectoryObject, HostObject, OperationsObject],
      this.services,
      opts.faultHook ? { faultHook: opts.faultHook } : {},
    );
  }

  /** Re-arms alarms and drains outboxes left by a previous process. */
  start(): void {
    this.runtime.start();
  }

  /** Wakes parked polls and closes every object database. */
  async close(): Promise<void> {
    this.services.hostSignals.notifyAll();
    await this.runtime.close();
  }

  /** Resolves a bearer token to a principal; throws UNAUTHENTICATED. */
  authenticate(authorization: string | null | undefined): Identity {
    const token = bearer(authorization);
    const id = token ? identify(this.opts.manifest, token) : null;
    if (!id) throw new BeachballError("UNAUTHENTICATED", "missing or unknown bearer token");
    return id;
  }

  /** Discovery document for agents and clients. */
  wellKnown(): WellKnown {
    return { apiVersion: "v1", agentProtocolVersion: "1.0", region: this.opts.manifest.region, workloadClasses: Object.keys(this.opts.manifest.workloadClasses) };
  }

  /** Creates (or replays) an allocation. Throws UNKNOWN_WORKLOAD_CLASS, QUOTA_*, IDEMPOTENCY_CONFLICT. */
  async createAllocation(who: Identity, body: CreateAllocationBody): Promise<{ created: boolean; view: AllocationView }> {
    requireRole(who, "controller");
    const cls = this.opts.manifest.workloadClasses[body.workloadClass];
    if (!cls) throw new BeachballError("UNKNOWN_WORKLOAD_CLASS", `unknown workload class ${JSON.stringify(body.workloadClass)}`);
    const allocationId = allocationIdFor(who.id, body.clientRequestId);
    const ttlSeconds = Math.min(body.ttlSeconds ?? Math.floor(this.services.timeouts.defaultTtlMs / 1000), cls.maxTtlSeconds ?? Number.MAX_SAFE_INTEGER);
    const bodyDigest = digestOf(canonicalJson(body));
    const existing = this.runtime.exists(AllocationObject.className, allocationId) ? await this.runtime.call(AllocationObject, allocationId, (a) => a.peekDigest()) : null;
    if (existing !== null) {
      if (existing !== bodyDigest) throw new BeachballError("IDEMPOTENCY_CONFLICT", "clientRequestId was used with a different request body");
      return { created: false, view: await this.runtime.call(AllocationObject, allocationId, (a) => a.get(who.id)) };
    }
    const l = this.opts.manifest.limits;
    await this.runtime.call(AdmissionObject, "global", (a) =>
      a.admit(who.id, allocationId, {
        perControllerConcurrent: l.maxConcurrentAllocationsPerController,
        perControllerRps: l.controllerRequestsPerSecond ?? 50,
        deploymentRps: l.deploymentRequestsPerSecond ?? 500,
        maxAllocations: l.maxAllocations ?? 10_000,
        maxRetained: l.maxRetainedAllocations ?? 100_000,
      }),
    );
    this.services.metrics.inc("bb_allocations_admitted_total", "Allocations admitted", { workload_class: body.workloadClass });
    return this.runtime.call(AllocationObject, allocationId, (a) =>
      a.create({
        allocationId,
        identity: who.id,
        body,
        bodyDigest,
        spec: { cpuMillis: cls.cpuMillis, memoryMiB: cls.memoryMiB, ephemeralDiskMiB: cls.ephemeralDiskMiB, imageDigest: cls.imageDigest },
        ttlMs: ttlSeconds * 1000,
      }),
    );
  }

  /** One allocation. Throws NOT_FOUND. */
  async getAllocation(who: Identity, id: string): Promise<AllocationView> {
    return this.runtime.call(AllocationObject, this.known(id), (a) => a.get(who.id));
  }

  /** A page of the caller's allocations. */
  async listAllocations(who: Identity, cursor: string | null, limit: number): Promise<{ items: AllocationView[]; nextCursor: string | null }> {
    const entries = await this.runtime.call(AllocationIndexObject, "global", (x) => x.list(who.id, cursor, limit));
    const items = await Promise.all(entries.map((e) => this.runtime.call(AllocationObject, e.allocationId, (a) => a.get(who.id))));
    return { items, nextCursor: entries.length === limit ? (entries[entries.length - 1]?.allocationId ?? null) : null };
  }

  /** Requests release. Throws NOT_FOUND. */
  async releaseAllocation(who: Identity, id: string): Promise<AllocationView> {
    return this.runtime.call(AllocationObject, this.known(id), (a) => a.release(who.id));
  }

  /** Events after `after`. Throws NOT_FOUND. */
  async events(who: Identity, id: string, after: number, limit: number) {
    return this.runtime.call(AllocationObject, this.known(id), (a) => a.events(who.id, after, limit));
  }

  /**
   * Hands a bootstrap payload to the guest through the host agent, in memory
   * only; resolves when the agent reports it consumed. Throws
   * STALE_GENERATION / DELIVERY_CONFLICT (409), GUEST_NOT_CONNECTED /
   * DELIVERY_TIMEOUT (503), PAYLOAD_TOO_LARGE (413).
   */
  async deliverBootstrap(who: Identity, id: string, body: BootstrapBody): Promise<{ deliveryId: string; digest: string; replayed: boolean }> {
    requireRole(who, "controller");
    const bytes = Buffer.from(body.payloadBase64, "base64");
    if (bytes.length > MAX_PAYLOAD_BYTES) throw new BeachballError("PAYLOAD_TOO_LARGE", `payload is ${bytes.length} bytes; the limit is ${MAX_PAYLOAD_BYTES}`, { limitBytes: MAX_PAYLOAD_BYTES });
    if (bytes.toString("base64") !== body.payloadBase64.replace(/\s+/g, "")) throw new BeachballError("VALIDATION_FAILED", "payloadBase64 is not canonical base64");
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    const target = await this.runtime.call(AllocationObject, this.known(id), (a) => a.deliveryTarget(who.id, body.generation));
    const check = await this.runtime.call(HostObject, target.hostId, (h) => h.checkDelivery(body.deliveryId, target.placementId, body.generation));
    if (check.earlierDigest) {
      if (check.earlierDigest !== digest) throw new BeachballError("DELIVERY_CONFLICT", "deliveryId was used with a different payload");
      return { deliveryId: body.deliveryId, digest, replayed: true };
    }
    let outcomeP;
    try {
      outcomeP = this.services.deliveries.offer(
        target.hostId,
        { deliveryId: body.deliveryId, allocationId: target.allocationId, placementId: target.placementId, generation: body.generation, contentType: body.contentType, payloadBase64: body.payloadBase64 },
        DELIVERY_TIMEOUT_MS,
      );
    } catch {
      throw new BeachballError("RATE_LIMITED", "too many deliveries in flight for this host", { retryAfterSeconds: 5 });
    }
    this.services.hostSignals.notify(target.hostId);
    const outcome = await outcomeP;
    if (outcome.result === "consumed") {
      if (outcome.digest !== digest) throw new BeachballError("DELIVERY_CONFLICT", "the guest consumed a payload with another digest");
      return { deliveryId: body.deliveryId, digest, replayed: false };
    }
    if (outcome.result === "timeout") throw new BeachballError("DELIVERY_TIMEOUT", "the agent did not confirm the delivery within 30 s", { retryAfterSeconds: 5 });
    if (outcome.result === "guest_not_connected") throw new BeachballError("GUEST_NOT_CONNECTED", "the guest is not connected", { retryAfterSeconds: 2 });
    throw new BeachballError("DELIVERY_CONFLICT", "the guest rejected the delivery (a payload was already consumed or the content type is unsupported)");
  }

  /** Mints a one-use enrollment token bound to `hostId`. Operators only. */
  async createEnrollmentToken(who: Identity, hostId: string, ttlSeconds: number): Promise<{ token: string; hostId: string; expiresAt: string; joinCommand: string }> {
    requireRole(who, "operator");
    if (!HOST_ID_PATTERN.test(hostId)) throw new BeachballError("VALIDATION_FAILED", "host ID must match ^[a-z0-9][a-z0-9-]{0,62}$");
    const token = `bbe_${Buffer.from(this.services.random.bytes(24)).toString("hex")}`;
    const expires = await this.runtime.call(EnrollmentObject, "global", (e) => e.mint(tokenDigest(token), hostId, ttlSeconds * 1000, who.id));
    return { token, hostId, expiresAt: new Date(expires).toISOString(), joinCommand: `bb agent join --scheduler ${this.opts.publicUrl} --token ${token}` };
  }

  /**
   * Enrolls a host with a one-use token. Throws ENROLLMENT_TOKEN_INVALID,
   * ENROLLMENT_CONFLICT. Runs under the host's admin lock, and leaves
   * Admission's active count matching the host's state whatever happens.
   */
  async enroll(body: EnrollBody): Promise<EnrollResponse> {
    const { token, ...config } = body;
    const configDigest = digestOf(canonicalJson(config));
    const { hostId, replay } = await this.runtime.call(EnrollmentObject, "global", (e) => e.consume(tokenDigest(token), configDigest));
    if (replay) throw new BeachballError("ENROLLMENT_TOKEN_INVALID", "enrollment token was already used; keep the credential from the first enrollment");
    return this.underHostLock(hostId, async () => {
      try {
        return await this.register(hostId, body, configDigest);
      } finally {
        await this.syncActiveCount(hostId);
      }
    });
  }

  /** The registration half of enroll (under the host's admin lock). */
  private async register(hostId: string, body: EnrollBody, configDigest: string): Promise<EnrollResponse> {
    await this.runtime.call(AdmissionObject, "global", (a) => a.admitHost(hostId, this.opts.manifest.limits.maxRegisteredHosts));
    let autoActivate = this.opts.manifest.hostEnrollment.autoActivate;
    if (autoActivate) {
      autoActivate = await this.runtime
        .call(AdmissionObject, "global", (a) => a.admitActiveHost(hostId, this.opts.manifest.limits.maxActiveHosts ?? this.opts.manifest.limits.maxRegisteredHosts))
        .then(() => true)
        .catch(() => false);
    }
    const secret = Buffer.from(this.services.random.bytes(32)).toString("hex");
    const zero = { cpuMillis: 0, memoryMiB: 0, ephemeralDiskMiB: 0, maxPlacements: 0 };
    const reg = await this.runtime.call(HostObject, hostId, (h) =>
      h.register({
        hostId,
        credentialDigest: tokenDigest(secret),
        enrollDigest: configDigest,
        capacity: body.capacity,
        reserve: body.reserve ?? zero,
        region: body.region,
        architecture: body.architecture,
        labels: body.labels ?? {},
        agentProtocolVersion: body.agentProtocolVersion,
        vmmDriver: body.vmmDriver,
        autoActivate,
      }),
    );
    if (!reg.created) throw new BeachballError("ENROLLMENT_CONFLICT", "host is already enrolled");
    return { hostId, credential: `bbh_${hostId}.${secret}`, credentialVersion: reg.credentialVersion, adminState: reg.adminState as EnrollResponse["adminState"] };
  }

  /** Authenticates a host credential; returns the host ID. Throws UNAUTHENTICATED. */
  async authenticateHost(authorization: string | null | undefined): Promise<string> {
    const m = /^bbh_([a-z0-9][a-z0-9-]{0,62})\.([0-9a-f]{64})$/.exec(bearer(authorization) ?? "");
    if (!m) throw new BeachballError("UNAUTHENTICATED", "missing or malformed host credential");
    const hostId = m[1]!;
    if (!this.runtime.exists(HostObject.className, hostId)) throw new BeachballError("UNAUTHENTICATED", "unknown host credential");
    const ok = await this.runtime.call(HostObject, hostId, (h) => h.authenticate(tokenDigest(m[2]!)));
    if (!ok) throw new BeachballError("UNAUTHENTICATED", "unknown host credential");
    return hostId;
  }

  /** Applies an agent envelope; a poll with nothing to do parks up to `waitMs` (≤ 25 s). */
  async agentEnvelope(hostId: string, env: Envelope): Promise<PollResponse> {
    if (env.hostId !== hostId) throw new BeachballError("FORBIDDEN", "envelope hostId does not match the credential");
    const first = await this.runtime.call(HostObject, hostId, (h) => h.handleEnvelope(env));
    const waitMs = Math.min(env.payload.waitMs ?? 0, POLL_PARK_MS);
    if (env.type !== "poll" || first.commands.length > 0 || first.deliveries.length > 0 || waitMs === 0) return first;
    await this.services.hostSignals.wait(hostId, waitMs);
    return this.runtime.call(HostObject, hostId, (h) => h.work(first.agentEpoch));
  }

  /** Certifies revocation of the workload's external authority so a blocked replacement may proceed (controllers). */
  async authorizeReplacement(who: Identity, id: string, generation: number): Promise<AllocationView> {
    requireRole(who, "controller");
    return this.runtime.call(AllocationObject, this.known(id), (a) => a.authorizeReplacement(who.id, generation));
  }

  /**
   * Changes a host's administrative state (operators). Activation is gated
   * by the active-host cap; `disabled` fences the host for good. Throws
   * NOT_FOUND, QUOTA_ACTIVE_HOSTS, HOST_DISABLED (activating or draining a
   * disabled host). Admission's active count matches the host's state after
   * every call, failed ones included.
   */
  async setHostState(who: Identity, hostId: string, state: "active" | "draining" | "disabled"): Promise<HostView> {
    requireRole(who, "operator");
    if (!HOST_ID_PATTERN.test(hostId) || !this.runtime.exists(HostObject.className, hostId)) throw new BeachballError("NOT_FOUND", "no such host");
    const l = this.opts.manifest.limits;
    return this.underHostLock(hostId, async () => {
      const before = await this.runtime.call(HostObject, hostId, (h) => h.adminState());
      if (before === null) throw new BeachballError("NOT_FOUND", "no such host");
      if (before === "disabled" && state !== "disabled") throw new BeachballError("HOST_DISABLED", `host ${hostId} is disabled (fenced for good); enroll it again to use it`);
      try {
        if (state === "active") await this.runtime.call(AdmissionObject, "global", (a) => a.admitActiveHost(hostId, l.maxActiveHosts ?? l.maxRegisteredHosts));
        const r = await this.runtime.call(HostObject, hostId, (h) => h.setAdminState(state));
        this.services.metrics.inc("bb_host_admin_changes_total", "Host administrative state changes", { state: r.adminState, host: hostId });
        if (r.fenced) this.services.hostSignals.notify(hostId);
      } finally {
        await this.syncActiveCount(hostId);
      }
      return this.runtime.call(HostObject, hostId, (h) => h.view());
    });
  }

  /**
   * Runs `fn` after every earlier admin change of `hostId` in this process
   * finished: an admin change touches two objects (Admission, then Host), so
   * two changes of one host must not interleave between them.
   */
  private underHostLock<T>(hostId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.hostLocks.get(hostId) ?? Promise.resolve();
    const run = prev.then(fn, fn);
    const tail = run.then(
      () => undefined,
      () => undefined,
    );
    this.hostLocks.set(hostId, tail);
    void tail.then(() => {
      if (this.hostLocks.get(hostId) === tail) this.hostLocks.delete(hostId);
    });
    return run;
  }

  /** Makes Admission count `hostId` as active exactly when its Host object says it is active. */
  private async syncActiveCount(hostId: string): Promise<void> {
    const state = this.runtime.exists(HostObject.className, hostId) ? await this.runtime.call(HostObject, hostId, (h) => h.adminState()) : null;
    await this.runtime.call(AdmissionObject, "global", (a) => a.setHostActive(hostId, state === "active"));
  }

  /** The hosts Admission counts as active, sorted (checks that counters match states). */
  async activeHostIds(): Promise<string[]> {
    return this.runtime.call(AdmissionObject, "global", (a) => a.activeHostIds());
  }

  /** Prometheus text with counters and host gauges (operators). */
  async metrics(who: Identity): Promise<string> {
    requireRole(who, "operator");
    const hosts = await this.hosts(who);
    const byState = new Map<string, number>();
    for (const h of hosts) byState.set(`${h.adminState}/${h.health}`, (byState.get(`${h.adminState}/${h.health}`) ?? 0) + 1);
    return this.services.metrics.render([
      { name: "bb_hosts", help: "Hosts by admin state and health", series: [...byState].map(([k, v]) => ({ labels: { state: k }, value: v })) },
      { name: "bb_host_free_cpu_millicores", help: "Free CPU per host", series: hosts.map((h) => ({ labels: { host: h.hostId }, value: h.free.cpuMillis })) },
      { name: "bb_host_free_memory_mib", help: "Free memory per host", series: hosts.map((h) => ({ labels: { host: h.hostId }, value: h.free.memoryMiB })) },
      { name: "bb_host_placements", help: "Capacity-consuming placements per host", series: hosts.map((h) => ({ labels: { host: h.hostId }, value: h.placements.length })) },
    ]);
  }

  /** Alerts after `after` (operators). */
  async alerts(who: Identity, after: number, limit: number): Promise<AlertItem[]> {
    requireRole(who, "operator");
    return this.runtime.call(OperationsObject, "global", (o) => o.list(after, limit));
  }

  /** Validates an allocation ID and checks the object exists without creating it. Throws NOT_FOUND. */
  private known(id: string): string {
    if (!this.runtime.exists(AllocationObject.className, checkAllocationIdShape(id))) throw new BeachballError("NOT_FOUND", "no such allocation");
    return id;
  }

  /** Every host's view (operators). */
  async hosts(who: Identity): Promise<HostView[]> {
    requireRole(who, "operator");
    const names = this.runtime.listNames("Host");
    const views = await Promise.all(names.map((n) => this.runtime.call(HostObject, n, (h) => (h.isRegistered() ? h.view() : null))));
    return views.filter((v): v is HostView => v !== null);
  }
}

function bearer(h: string | null | undefined): string | null {
  const m = /^Bearer ([\x21-\x7e]{1,512})$/.exec(h ?? "");
  return m ? m[1]! : null;
}

function requireRole(who: Identity, role: Identity["role"]): void {
  if (who.role !== role) throw new BeachballError("FORBIDDEN", `this call needs the ${role} role`);
}

function checkAllocationIdShape(id: string): string {
  if (!/^alloc_[0-9a-f]{32}$/.test(id)) throw new BeachballError("NOT_FOUND", "no such allocation");
  return id;
}
