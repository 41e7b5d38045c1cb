/**
 * The scheduler's stateless front ("the Worker" in the spec), on either
 * host: resolves the caller, turns each API call into calls on the right
 * authority objects through typed stubs, and maps damaged or missing state
 * to stable errors. Routes call these methods and only translate HTTP.
 *
 * Implements spec "Worker and Durable Objects", "Admission and limits",
 * "Enrollment", "Transport", "One allocation end to end", "Data path"
 * (connection grants) and "Coordination and path selection" (the
 * Connection routes, authenticated by endpoint token).
 * Must never: persist a bootstrap payload or a raw token, take an identity
 * from a request body, or keep state between calls (a parked poll and a
 * pending delivery live in the Host object).
 */
import { createHash } from "node:crypto";
import { BeachballError } from "../protocol/errors.ts";
import {
  MAX_PAYLOAD_BYTES,
  type AllocationEvent,
  type AllocationView,
  type BootstrapBody,
  type CreateAllocationBody,
  type EnrollBody,
  type ForkAllocationBody,
  type WellKnown,
} from "../protocol/api.ts";
import type { EnrollResponse, Envelope, PollResponse } from "../protocol/agent.ts";
import type { AlertItem, HostView } from "../protocol/views.ts";
import type {
  ConnectionGrantBody,
  ConnectionGrantResponse,
  ConnectionMessagesBody,
  ConnectionPollBody,
  ConnectionPollResponse,
  ConnectionRelayTokensResponse,
  RelayRole,
} from "../protocol/connection.ts";
import type { LogPage, LogPushBody, LogPushResponse } from "../protocol/logs.ts";
import {
  MAX_RUN_SCRIPT_BYTES,
  type RunEvent,
  type RunPage,
  type RunView,
  type SubmitRunBody,
} from "../protocol/runs.ts";
import { runPayload } from "../domain/runs.ts";
import { MAX_USAGE_WINDOW_MS, type UsageGroup, type UsageReport } from "../protocol/usage.ts";
import { allocationIdFor, canonicalJson, digestOf, leaseIdFor, runIdFor } from "../domain/identifiers.ts";
import type { CreateLeaseBody, LeaseView } from "../protocol/leases.ts";
import {
  ALLOCATION_ID,
  CONNECTION_ID,
  ENDPOINT_TOKEN,
  GRANT_ID,
  HOST_CREDENTIAL,
  HOST_ID,
  HOST_ID_PATTERN,
} from "../protocol/ids.ts";
import { identify, tokenDigest, type Identity } from "./manifestSchema.ts";
import { classSpec, createAllocationOf, deliverPayload, workloadClassOf } from "./allocationRequests.ts";
import { GLOBAL, type SchedulerEnv } from "./env.ts";

export { DELIVERY_TIMEOUT_MS, KNOWN_CLASSES_IN_DETAIL } from "./allocationRequests.ts";

/** A page of the caller's allocations, from the index. `damaged` names entries whose stored view failed its checks. */
export interface AllocationPage {
  items: AllocationView[];
  nextCursor: string | null;
  damaged: string[];
}

/** See the module header. `env` holds the namespaces the front calls (on the embedded host: stubs behind the output gate). */
export class SchedulerFront {
  /** `publicUrl` is the URL agents and clients use (printed in join commands). */
  constructor(
    readonly env: SchedulerEnv,
    readonly publicUrl: string,
  ) {}

  private get manifest() {
    return this.env.config.manifest;
  }

  /** Resolves a bearer token to a principal; throws UNAUTHENTICATED. */
  authenticate(authorization: string | null | undefined): Identity {
    const token = bearer(authorization);
    const id = token ? identify(this.manifest, token) : null;
    if (!id) throw new BeachballError("UNAUTHENTICATED", "missing or unknown bearer token");
    return id;
  }

  /** Discovery document for agents and clients. */
  wellKnown(): WellKnown {
    const w: WellKnown = {
      apiVersion: "v1",
      agentProtocolVersion: "1.0",
      region: this.manifest.region,
      workloadClasses: Object.keys(this.manifest.workloadClasses),
    };
    const c = this.env.config.connections;
    if (c) w.connectionVerificationKeys = { ...c.verificationKeys };
    return w;
  }

  /**
   * Issues a connection grant for the caller's allocation (controllers;
   * spec "Data path" step 2). Throws FORBIDDEN without private networking
   * or against the grant policy, NOT_FOUND for an allocation the caller
   * does not own, INVALID_STATE (not ready, released), STALE_GENERATION
   * (another generation than `body.generation`, or replaced meanwhile),
   * RATE_LIMITED, CONNECTIVITY_UNAVAILABLE.
   */
  async createConnectionGrant(who: Identity, id: string, body: ConnectionGrantBody): Promise<ConnectionGrantResponse> {
    requireRole(who, "controller");
    if (!this.env.config.connections)
      throw new BeachballError("FORBIDDEN", "private networking is not configured in this deployment's manifest");
    return this.env.Allocation.get(checkAllocationIdShape(id)).requestConnectionGrant(who.id, body);
  }

  /**
   * Revokes a grant of the caller's allocation (idempotent). Throws
   * NOT_FOUND "no such allocation" for an allocation that does not exist or
   * is another caller's (whatever the grant ID), and NOT_FOUND "no such
   * grant for this allocation" for an unknown grant of the caller's own.
   */
  async revokeConnectionGrant(who: Identity, id: string, grantId: string): Promise<void> {
    requireRole(who, "controller");
    const allocation = this.env.Allocation.get(checkAllocationIdShape(id));
    if (!GRANT_ID.test(grantId)) {
      await allocation.get(who.id); // the allocation's NOT_FOUND comes first
      throw new BeachballError("NOT_FOUND", "no such grant for this allocation");
    }
    await allocation.revokeConnectionGrant(who.id, grantId);
  }

  /** The role of an endpoint token in Connection `connectionId`. Throws UNAUTHENTICATED for a malformed or unknown token, or an ended Connection. */
  async authenticateEndpoint(authorization: string | null | undefined, connectionId: string): Promise<RelayRole> {
    const token = bearer(authorization);
    if (!token || !ENDPOINT_TOKEN.test(token) || !CONNECTION_ID.test(connectionId))
      throw new BeachballError("UNAUTHENTICATED", "missing or malformed endpoint token");
    const role = await this.env.Connection.get(connectionId).authenticate(tokenDigest(token));
    if (!role) throw new BeachballError("UNAUTHENTICATED", "unknown endpoint token, or the connection has ended");
    return role;
  }

  /** A rendezvous poll of `role` (long-poll up to `body.waitMs`). */
  async connectionPoll(
    connectionId: string,
    role: RelayRole,
    body: ConnectionPollBody,
  ): Promise<ConnectionPollResponse> {
    return this.env.Connection.get(connectionId).poll(role, body.after, body.waitMs ?? 0);
  }

  /** Fresh relay tokens for `role` of the Connection's grant (ConnectionObject.relayTokens: UNAUTHENTICATED once ended, RATE_LIMITED). */
  async connectionRelayTokens(connectionId: string, role: RelayRole): Promise<ConnectionRelayTokensResponse> {
    return this.env.Connection.get(connectionId).relayTokens(role);
  }

  /** Rendezvous messages from `role`. */
  async connectionMessages(
    connectionId: string,
    role: RelayRole,
    body: ConnectionMessagesBody,
  ): Promise<ConnectionPollResponse> {
    return this.env.Connection.get(connectionId).messages(role, body.messages);
  }

  /**
   * Creates (or replays) an allocation. Throws UNKNOWN_WORKLOAD_CLASS,
   * QUOTA_*, RATE_LIMITED, IDEMPOTENCY_CONFLICT, and OBJECT_DAMAGED when an
   * allocation the index lists has lost its state (never a fresh start).
   */
  async createAllocation(
    who: Identity,
    body: CreateAllocationBody,
  ): Promise<{ created: boolean; view: AllocationView }> {
    requireRole(who, "controller");
    const cls = workloadClassOf(this.manifest, body.workloadClass);
    return createAllocationOf(this.env, who.id, body, cls, digestOf(canonicalJson(body)), classSpec(cls));
  }

  /**
   * Forks a suspended allocation (issue 21, "Fork"): `body.count` new
   * allocations of its class, each restored from its snapshot on its host
   * with its own identity, address and lifetime. Fork `i` is the allocation
   * of clientRequestId `<clientRequestId>:fork:<i>`, so a repeated request
   * answers the same forks (created false) even after the parent moved on,
   * and a partly made one (a quota reached midway) is completed by a retry.
   * Throws NOT_FOUND; INVALID_STATE (the parent is not suspended);
   * PAYLOAD_CONSUMED (it consumed a payload and allowConsumedPayload is not
   * set); UNKNOWN_WORKLOAD_CLASS (its class left the manifest);
   * IDEMPOTENCY_CONFLICT; RATE_LIMITED and QUOTA_* (the forks made before
   * stay, and the retry makes the rest).
   */
  async forkAllocation(
    who: Identity,
    id: string,
    body: ForkAllocationBody,
  ): Promise<{ created: boolean; items: AllocationView[] }> {
    requireRole(who, "controller");
    const parentId = checkAllocationIdShape(id);
    const { allowConsumedPayload = false, count, clientRequestId, ...rest } = body;
    const bodies = Array.from({ length: count }, (_, i) => ({
      ...rest,
      clientRequestId: `${clientRequestId}:fork:${i}`,
    }));
    // The digest names the parent and the whole request: another body under the key conflicts, a create with a fork's key too.
    const digests = bodies.map((_, i) => digestOf(canonicalJson({ forkOf: parentId, index: i, ...body })));
    const replayed = await this.forkReplay(who, bodies, digests);
    if (replayed) return { created: false, items: replayed };
    const parent = await this.env.Allocation.get(parentId).forkSource(who.id, allowConsumedPayload);
    const cls = workloadClassOf(this.manifest, parent.workloadClass); // a class gone from the manifest takes no new allocations
    const items: AllocationView[] = [];
    for (const [i, b] of bodies.entries())
      items.push(
        (
          await createAllocationOf(
            this.env,
            who.id,
            { ...b, workloadClass: parent.workloadClass },
            cls,
            digests[i]!,
            parent.spec,
          )
        ).view,
      );
    return { created: true, items };
  }

  /** The views of every fork of a repeated fork request, or null unless all exist with these digests (IDEMPOTENCY_CONFLICT for one with another). */
  private async forkReplay(
    who: Identity,
    bodies: { clientRequestId: string }[],
    digests: string[],
  ): Promise<AllocationView[] | null> {
    const views: AllocationView[] = [];
    for (const [i, b] of bodies.entries()) {
      const a = this.env.Allocation.get(allocationIdFor(who.id, b.clientRequestId));
      const digest = await a.peekDigest();
      if (digest === null) return null;
      if (digest !== digests[i])
        throw new BeachballError("IDEMPOTENCY_CONFLICT", "clientRequestId was used with a different request body");
      views.push(await a.get(who.id));
    }
    return views;
  }

  /** One allocation. Throws NOT_FOUND, or OBJECT_DAMAGED when the index lists it but its state is gone. */
  async getAllocation(who: Identity, id: string): Promise<AllocationView> {
    const alloc = this.env.Allocation.get(checkAllocationIdShape(id));
    try {
      return await alloc.get(who.id);
    } catch (e) {
      if (!(e instanceof BeachballError) || e.code !== "NOT_FOUND") throw e;
      if (await this.env.AllocationIndex.get(GLOBAL).has(who.id, id)) return alloc.get(who.id, true);
      throw e;
    }
  }

  /** A page of the caller's allocations, read from the index (no allocation is called). */
  async listAllocations(who: Identity, cursor: string | null, limit: number): Promise<AllocationPage> {
    const entries = await this.env.AllocationIndex.get(GLOBAL).list(who.id, cursor, limit);
    const items: AllocationView[] = [];
    const damaged: string[] = [];
    for (const e of entries) {
      if (e.view) items.push(e.view);
      else damaged.push(e.allocationId);
    }
    return {
      items,
      nextCursor: entries.length === limit ? (entries[entries.length - 1]?.allocationId ?? null) : null,
      damaged,
    };
  }

  /** Requests release. Throws NOT_FOUND. */
  async releaseAllocation(who: Identity, id: string): Promise<AllocationView> {
    return this.env.Allocation.get(checkAllocationIdShape(id)).release(who.id);
  }

  /** Requests a pause (issue 21; AllocationObject.pause). Throws NOT_FOUND, INVALID_STATE. */
  async pauseAllocation(who: Identity, id: string): Promise<AllocationView> {
    return this.env.Allocation.get(checkAllocationIdShape(id)).pause(who.id);
  }

  /** Requests a suspend (issue 21; AllocationObject.suspend). Throws NOT_FOUND, NOT_SUSPENDABLE, INVALID_STATE. */
  async suspendAllocation(who: Identity, id: string): Promise<AllocationView> {
    return this.env.Allocation.get(checkAllocationIdShape(id)).suspend(who.id);
  }

  /** Requests a resume (issue 21; AllocationObject.resume). Throws NOT_FOUND, INVALID_STATE. */
  async resumeAllocation(who: Identity, id: string): Promise<AllocationView> {
    return this.env.Allocation.get(checkAllocationIdShape(id)).resume(who.id);
  }

  /**
   * Events after `after`; `follow` parks a read that finds none (bounded,
   * src/protocol/eventFollow.ts). Throws NOT_FOUND, RATE_LIMITED.
   */
  async events(who: Identity, id: string, after: number, limit: number, follow = false): Promise<AllocationEvent[]> {
    return this.env.Allocation.get(checkAllocationIdShape(id)).events(who.id, after, limit, follow);
  }

  /**
   * The owner's read of an allocation's workload output from log offset
   * `offset` (src/protocol/logs.ts); `follow` parks a read that finds
   * nothing new (bounded). Throws NOT_FOUND (also for another identity's
   * allocation), LOG_OFFSET_PAST_END, RATE_LIMITED.
   */
  async readLog(who: Identity, id: string, offset: number, follow: boolean): Promise<LogPage> {
    return this.env.Allocation.get(checkAllocationIdShape(id)).readLog(who.id, offset, follow);
  }

  /**
   * Chunks of workload output pushed by host `hostId`: each goes to its
   * allocation, which accepts it only from the host of its current
   * placement. Throws FORBIDDEN when the body names another host.
   */
  async pushLogs(hostId: string, body: LogPushBody): Promise<LogPushResponse> {
    if (body.hostId !== hostId) throw new BeachballError("FORBIDDEN", "push hostId does not match the credential");
    const results: LogPushResponse["results"] = [];
    for (const c of body.chunks) {
      if (!ALLOCATION_ID.test(c.allocationId))
        results.push({ placementId: c.placementId, streamEnd: 0, code: "UNKNOWN_PLACEMENT" });
      else results.push(await this.env.Allocation.get(c.allocationId).appendLog(hostId, c));
    }
    return { results };
  }

  /**
   * Hands a bootstrap payload to the guest through the host agent, in memory
   * only; resolves when the agent reports it consumed. Throws
   * STALE_GENERATION / DELIVERY_CONFLICT (409), GUEST_NOT_CONNECTED /
   * DELIVERY_TIMEOUT (503), PAYLOAD_TOO_LARGE (413), RATE_LIMITED (429).
   */
  async deliverBootstrap(
    who: Identity,
    id: string,
    body: BootstrapBody,
  ): Promise<{ deliveryId: string; digest: string; replayed: boolean }> {
    requireRole(who, "controller");
    const bytes = Buffer.from(body.payloadBase64, "base64");
    if (bytes.length > MAX_PAYLOAD_BYTES)
      throw new BeachballError(
        "PAYLOAD_TOO_LARGE",
        `payload is ${bytes.length} bytes; the limit is ${MAX_PAYLOAD_BYTES}`,
        { limitBytes: MAX_PAYLOAD_BYTES },
      );
    if (bytes.toString("base64") !== body.payloadBase64.replace(/\s+/g, ""))
      throw new BeachballError("VALIDATION_FAILED", "payloadBase64 is not canonical base64");
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    return deliverPayload(this.env, who.id, checkAllocationIdShape(id), body, digest);
  }

  /**
   * Admits a run (issue 22) for the calling controller, or answers the one a
   * repeated body made. Throws UNKNOWN_WORKLOAD_CLASS, PAYLOAD_TOO_LARGE
   * (the script with its environment is more than one payload),
   * VALIDATION_FAILED (not canonical base64; a budget past the class's
   * maxTtlSeconds), IDEMPOTENCY_CONFLICT,
   * RATE_LIMITED, QUOTA_QUEUED_RUNS.
   */
  async submitRun(who: Identity, body: SubmitRunBody): Promise<{ created: boolean; view: RunView }> {
    requireRole(who, "controller");
    const cls = workloadClassOf(this.manifest, body.workloadClass);
    // The run's VM lives at most the class's maxTtlSeconds: a longer budget could never be used.
    if (cls.maxTtlSeconds !== undefined && body.budgetSeconds > cls.maxTtlSeconds)
      throw new BeachballError(
        "VALIDATION_FAILED",
        `/budgetSeconds is ${body.budgetSeconds}; a VM of class ${body.workloadClass} lives at most ${cls.maxTtlSeconds} s (its maxTtlSeconds)`,
      );
    const script = Buffer.from(body.scriptBase64, "base64");
    if (script.toString("base64") !== body.scriptBase64)
      throw new BeachballError("VALIDATION_FAILED", "scriptBase64 is not canonical base64");
    const runId = runIdFor(who.id, body.clientRequestId);
    const size = runPayload(runId, body.env ?? {}, script).length;
    if (script.length > MAX_RUN_SCRIPT_BYTES || size > MAX_PAYLOAD_BYTES)
      throw new BeachballError(
        "PAYLOAD_TOO_LARGE",
        `the script is ${script.length} bytes and ${size} with its environment; the limits are ${MAX_RUN_SCRIPT_BYTES} and ${MAX_PAYLOAD_BYTES}`,
        { limitBytes: script.length > MAX_RUN_SCRIPT_BYTES ? MAX_RUN_SCRIPT_BYTES : MAX_PAYLOAD_BYTES },
      );
    return this.env.RunQueue.get(GLOBAL).submit({
      runId,
      tenant: who.id,
      body,
      bodyDigest: digestOf(canonicalJson(body)),
      scriptDigest: `sha256:${createHash("sha256").update(script).digest("hex")}`,
    });
  }

  /** One of the caller's runs. Throws NOT_FOUND. */
  getRun(who: Identity, id: string): Promise<RunView> {
    return this.env.RunQueue.get(GLOBAL).get(who.id, id);
  }

  /** The caller's runs, newest first, below `cursor`. */
  listRuns(who: Identity, cursor: number | null, limit: number): Promise<RunPage> {
    return this.env.RunQueue.get(GLOBAL).list(who.id, cursor, limit);
  }

  /** Cancels one of the caller's runs (idempotent). Throws NOT_FOUND. */
  cancelRun(who: Identity, id: string): Promise<RunView> {
    return this.env.RunQueue.get(GLOBAL).cancel(who.id, id);
  }

  /** A run's events after `after` (`follow` parks, bounded). Throws NOT_FOUND, RATE_LIMITED. */
  runEvents(who: Identity, id: string, after: number, limit: number, follow: boolean): Promise<RunEvent[]> {
    return this.env.RunQueue.get(GLOBAL).events(who.id, id, after, limit, follow);
  }

  /**
   * A run's output from `offset`: its allocation's log (kept RUN_LOG_RING_BYTES
   * after the VM is gone). Before dispatch the page is empty; with `follow`
   * it waits for the run's next event first. Throws NOT_FOUND,
   * LOG_OFFSET_PAST_END, RATE_LIMITED.
   */
  async readRunLog(who: Identity, id: string, offset: number, follow: boolean): Promise<LogPage> {
    const queue = this.env.RunQueue.get(GLOBAL);
    let src = await queue.logSource(who.id, id);
    if (!src.allocationId && offset > 0) throw new BeachballError("LOG_OFFSET_PAST_END", "the run has no output yet");
    if (!src.allocationId && follow && !src.ended) {
      await queue.events(who.id, id, src.lastEventSeq, 1, true);
      src = await queue.logSource(who.id, id);
    }
    if (!src.allocationId) {
      if (offset > 0) throw new BeachballError("LOG_OFFSET_PAST_END", "the run has no output yet");
      return { offset: 0, nextOffset: 0, droppedBytes: 0, text: "", complete: src.ended };
    }
    return this.env.Allocation.get(src.allocationId).readLog(who.id, offset, follow);
  }

  /**
   * Usage over [fromMs, toMs) grouped `by` (issue 22): a controller's own
   * VMs, or everyone's for an operator. Defaults: to now, from the start of
   * the current month (UTC). Throws VALIDATION_FAILED for an empty window
   * or one over MAX_USAGE_WINDOW_MS.
   */
  usage(who: Identity, fromMs: number | undefined, toMs: number | undefined, by: UsageGroup): Promise<UsageReport> {
    const now = this.env.clock.wallMs();
    const to = toMs ?? now;
    const d = new Date(now);
    const from = fromMs ?? Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
    if (to <= from) throw new BeachballError("VALIDATION_FAILED", "query parameter to must be after from");
    if (to - from > MAX_USAGE_WINDOW_MS)
      throw new BeachballError("VALIDATION_FAILED", `the window is at most ${MAX_USAGE_WINDOW_MS / 86_400_000} days`);
    return this.env.Usage.get(GLOBAL).report(who.role === "operator" ? null : who.id, from, to, by);
  }

  /**
   * Makes a lease (issue 22) for the calling controller, or answers the one a
   * repeated body made. Throws UNKNOWN_WORKLOAD_CLASS, IDEMPOTENCY_CONFLICT,
   * QUOTA_ACTIVE_LEASES, and what an allocation's create throws.
   */
  createLease(who: Identity, body: CreateLeaseBody): Promise<{ created: boolean; view: LeaseView }> {
    requireRole(who, "controller");
    return this.env.Leases.get(GLOBAL).create({
      leaseId: leaseIdFor(who.id, body.clientRequestId),
      owner: who.id,
      body,
      bodyDigest: digestOf(canonicalJson(body)),
    });
  }

  /** The Leases object, for the lease routes (each passes the caller's identity; NOT_FOUND for a lease it may not see). */
  get leases() {
    return this.env.Leases.get(GLOBAL);
  }

  /** Mints a one-use enrollment token bound to `hostId`. Operators only. */
  async createEnrollmentToken(
    who: Identity,
    hostId: string,
    ttlSeconds: number,
  ): Promise<{ token: string; hostId: string; expiresAt: string; joinCommand: string }> {
    requireRole(who, "operator");
    if (!HOST_ID.test(hostId)) throw new BeachballError("VALIDATION_FAILED", `host ID must match ${HOST_ID_PATTERN}`);
    const token = `bbe_${Buffer.from(this.env.random.bytes(24)).toString("hex")}`;
    const expires = await this.env.Enrollment.get(GLOBAL).mint(tokenDigest(token), hostId, ttlSeconds * 1000, who.id);
    return {
      token,
      hostId,
      expiresAt: new Date(expires).toISOString(),
      joinCommand: `bb agent join --scheduler ${this.publicUrl} --token ${token}`,
    };
  }

  /** Enrolls a host with a one-use token. Throws ENROLLMENT_TOKEN_INVALID, ENROLLMENT_CONFLICT, QUOTA_REGISTERED_HOSTS. */
  async enroll(body: EnrollBody): Promise<EnrollResponse> {
    const { token, ...config } = body;
    const configDigest = digestOf(canonicalJson(config));
    const { hostId, replay } = await this.env.Enrollment.get(GLOBAL).consume(tokenDigest(token), configDigest);
    if (replay)
      throw new BeachballError(
        "ENROLLMENT_TOKEN_INVALID",
        "enrollment token was already used; keep the credential from the first enrollment",
      );
    const admission = this.env.Admission.get(GLOBAL);
    const limits = this.manifest.limits;
    await admission.admitHost(hostId, limits.maxRegisteredHosts);
    let autoActivate = this.manifest.hostEnrollment.autoActivate;
    if (autoActivate) {
      autoActivate = await admission
        .admitActiveHost(hostId, limits.maxActiveHosts ?? limits.maxRegisteredHosts)
        .then(() => true)
        .catch(() => false);
    }
    const secret = Buffer.from(this.env.random.bytes(32)).toString("hex");
    const zero = { cpuMillis: 0, memoryMiB: 0, ephemeralDiskMiB: 0, maxPlacements: 0 };
    const registered = this.env.Host.get(hostId).register({
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
    });
    // Admission counts the host as active exactly when it is, whatever the registration's outcome.
    const reg = await registered.finally(async () =>
      admission.setHostActive(hostId, (await this.env.Host.get(hostId).adminState()) === "active"),
    );
    if (!reg.created) throw new BeachballError("ENROLLMENT_CONFLICT", "host is already enrolled");
    this.env.log.info("host enrolled", {
      hostId,
      adminState: reg.adminState,
      region: body.region,
      vmmDriver: body.vmmDriver,
    });
    return {
      hostId,
      credential: `bbh_${hostId}.${secret}`,
      credentialVersion: reg.credentialVersion,
      adminState: reg.adminState as EnrollResponse["adminState"],
    };
  }

  /** Authenticates a host credential; returns the host ID. Throws UNAUTHENTICATED. */
  async authenticateHost(authorization: string | null | undefined): Promise<string> {
    const m = HOST_CREDENTIAL.exec(bearer(authorization) ?? "");
    if (!m) throw new BeachballError("UNAUTHENTICATED", "missing or malformed host credential");
    const hostId = m[1]!;
    if (!(await this.env.Host.get(hostId).authenticate(tokenDigest(m[2]!))))
      throw new BeachballError("UNAUTHENTICATED", "unknown host credential");
    return hostId;
  }

  /** Applies an agent envelope; a poll with nothing to do parks in the Host object up to `waitMs` (≤ 25 s). */
  async agentEnvelope(hostId: string, env: Envelope): Promise<PollResponse> {
    if (env.hostId !== hostId) throw new BeachballError("FORBIDDEN", "envelope hostId does not match the credential");
    return this.env.Host.get(hostId).poll(env, env.payload.waitMs ?? 0);
  }

  /** Certifies revocation of the workload's external authority so a blocked replacement may proceed (controllers). */
  async authorizeReplacement(who: Identity, id: string, generation: number): Promise<AllocationView> {
    requireRole(who, "controller");
    return this.env.Allocation.get(checkAllocationIdShape(id)).authorizeReplacement(who.id, generation);
  }

  /**
   * Changes a host's administrative state (operators). Activation is gated
   * by the active-host cap; `disabled` fences the host for good. Throws
   * NOT_FOUND, QUOTA_ACTIVE_HOSTS, HOST_DISABLED (activating or draining a
   * disabled host). The Host object runs admin changes one at a time and
   * leaves Admission's active count matching its state, failed changes included.
   */
  async setHostState(who: Identity, hostId: string, state: "active" | "draining" | "disabled"): Promise<HostView> {
    requireRole(who, "operator");
    if (!HOST_ID.test(hostId)) throw new BeachballError("NOT_FOUND", "no such host");
    const host = this.env.Host.get(hostId);
    const l = this.manifest.limits;
    const r = await host.changeAdminState(state, l.maxActiveHosts ?? l.maxRegisteredHosts);
    this.env.metrics.inc("bb_host_admin_changes_total", "Host administrative state changes", {
      state: r.adminState,
      host: hostId,
    });
    this.env.log.info("host admin state", { hostId, adminState: r.adminState, by: who.id });
    return host.view();
  }

  /** The hosts Admission counts as active, sorted (checks that counters match states). */
  async activeHostIds(): Promise<string[]> {
    return this.env.Admission.get(GLOBAL).activeHostIds();
  }

  /** Prometheus text with counters and host gauges (operators). */
  async metrics(who: Identity): Promise<string> {
    requireRole(who, "operator");
    const hosts = await this.hosts(who);
    const byState = new Map<string, number>();
    for (const h of hosts)
      byState.set(`${h.adminState}/${h.health}`, (byState.get(`${h.adminState}/${h.health}`) ?? 0) + 1);
    return this.env.metrics.renderAll([
      {
        name: "bb_hosts",
        help: "Hosts by admin state and health",
        series: [...byState].map(([k, v]) => ({ labels: { state: k }, value: v })),
      },
      {
        name: "bb_host_free_cpu_millicores",
        help: "Free CPU per host",
        series: hosts.map((h) => ({ labels: { host: h.hostId }, value: h.free.cpuMillis })),
      },
      {
        name: "bb_host_free_memory_mib",
        help: "Free memory per host",
        series: hosts.map((h) => ({ labels: { host: h.hostId }, value: h.free.memoryMiB })),
      },
      {
        name: "bb_host_placements",
        help: "Capacity-consuming placements per host",
        series: hosts.map((h) => ({ labels: { host: h.hostId }, value: h.placements.length })),
      },
    ]);
  }

  /** Alerts after `after` (operators). */
  async alerts(who: Identity, after: number, limit: number): Promise<AlertItem[]> {
    requireRole(who, "operator");
    return this.env.Operations.get(GLOBAL).list(after, limit);
  }

  /** Every host's view (operators). */
  async hosts(who: Identity): Promise<HostView[]> {
    requireRole(who, "operator");
    const ids = await this.env.Admission.get(GLOBAL).hostIds();
    const views = await Promise.all(
      ids.map(async (id) => ((await this.env.Host.get(id).isRegistered()) ? this.env.Host.get(id).view() : null)),
    );
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
  if (!ALLOCATION_ID.test(id)) throw new BeachballError("NOT_FOUND", "no such allocation");
  return id;
}
