/**
 * The Host object: the only authority that admits work against a host's
 * capacity (spec "Design principles", "Reservation", "The agent protocol").
 *
 * Owns: the host row (admin state, credential digest, session epoch,
 * heartbeat), its placements, the agent command queue and consumed-delivery
 * digests, the host endpoint's public key and candidates and the
 * configure_connection queue; and, in memory only, the agent's parked polls
 * and the bootstrap deliveries waiting for it (spec "One allocation end to
 * end": a payload lives in this instance's memory until the agent
 * acknowledges it).
 *
 * This class is the shell and the whole public surface (every public method
 * is an RPC through a stub): each method loads, decides with the pure rules
 * of src/domain/host*.ts, and persists, through one part per idea:
 * enrollment and the admin chain (./hostAdmin.ts: every admin change runs
 * there, one at a time), the agent session and epochs (./hostSession.ts),
 * placements and leases (./hostPlacements.ts), the memory-only mailbox of
 * polls and deliveries (./hostDeliveries.ts), the advertisement and view
 * (./hostAdvertisement.ts), private networking (./hostConnections.ts), and
 * the rows (./hostStore.ts). The parts sit in a `#private` field, so no stub
 * can reach them by name.
 *
 * Calls only Admission (the active-host cap and count around an admin
 * change), which calls nobody; posts observations to Allocations, alerts to
 * Operations, advertisements to the HostDirectory and revoke
 * acknowledgements to Networks.
 * Must never: call an Allocation object (observations go out by `post`),
 * store a bootstrap payload, accept a message from an older epoch, or
 * change the admin state outside the admin chain.
 */
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { BeachballError } from "../../protocol/errors.ts";
import { isCurrentRunning } from "../../domain/hostPlacement.ts";
import type { BootstrapDelivery, Envelope, PollResponse } from "../../protocol/agent.ts";
import type { Candidate } from "../../protocol/connection.ts";
import type { SchedulerEnv } from "../env.ts";
import { HOST_TABLES } from "./hostSchema.ts";
import { HostConnections, type ConnectionCommandRequest, type HostEndpointFacts } from "./hostConnections.ts";
import type { HostContext } from "./hostContext.ts";
import { HostStore } from "./hostStore.ts";
import { HostMailbox } from "./hostDeliveries.ts";
import { HostAdminChain, register, type AdminChangeResult } from "./hostAdmin.ts";
import { hostView, publish } from "./hostAdvertisement.ts";
import * as placements from "./hostPlacements.ts";
import * as session from "./hostSession.ts";
import type {
  DeliveryOutcome,
  HostRegistration,
  HostView,
  PlacementStatus,
  ReserveRequest,
  ReserveResult,
  TransitionAnswer,
} from "./hostTypes.ts";

export type {
  DeliveryOutcome,
  HostRegistration,
  HostView,
  PlacementStatus,
  ReserveRequest,
  ReserveResult,
  TransitionAnswer,
} from "./hostTypes.ts";
export type { ConnectionCommandRequest, HostEndpointFacts } from "./hostConnections.ts";
export { AD_REFRESH_MS } from "./hostAdvertisement.ts";
export { MAX_PARKED_POLLS, MAX_PENDING_DELIVERIES_PER_HOST } from "./hostDeliveries.ts";

/** How long acknowledged or superseded commands (and absent placements) are kept, ms. */
export const COMMAND_RETENTION_MS = 3600_000;

/** See the module header. */
export class HostObject extends AuthorityObject<SchedulerEnv, never> {
  static readonly className = "Host";
  static readonly messageSchema = null;
  static readonly tables = HOST_TABLES;

  /** This instance's parts (private by language, not by convention: a stub cannot name them). */
  readonly #ctx: HostContext;
  readonly #admin: HostAdminChain;

  constructor(state: ObjectState<never>, env: SchedulerEnv) {
    super(state, env);
    this.#ctx = {
      state,
      env,
      store: new HostStore(state.storage, state.name),
      mailbox: new HostMailbox(env.clock),
      conn: new HostConnections(state, env),
    };
    this.#admin = new HostAdminChain(this.#ctx);
  }

  /**
   * Creates the host on first enrollment (draining, or active with autoActivate).
   * A repeat with the same enrollment digest returns the existing row's version;
   * another configuration is ENROLLMENT_CONFLICT.
   */
  register(reg: HostRegistration): { created: boolean; adminState: string; credentialVersion: number } {
    return register(this.#ctx, reg);
  }

  /** True once the host was enrolled. */
  isRegistered(): boolean {
    return !!this.#ctx.store.row();
  }

  /** The administrative state, or null before enrollment. */
  adminState(): "active" | "draining" | "disabled" | null {
    return this.#ctx.store.row()?.adminState ?? null;
  }

  /**
   * An operator's admin change, one at a time per host (the only way to
   * change the admin state; ./hostAdmin.ts). `disabled` fences the host for
   * good: credential cleared, every placement absent and its allocation
   * told. Throws NOT_FOUND, HOST_DISABLED, QUOTA_ACTIVE_HOSTS.
   */
  changeAdminState(state: "active" | "draining" | "disabled", maxActive: number): Promise<AdminChangeResult> {
    return this.#admin.change(state, maxActive);
  }

  /** True if `credentialDigest` is this host's current credential. */
  authenticate(credentialDigest: string): boolean {
    const r = this.#ctx.store.row();
    return !!r && r.adminState !== "disabled" && r.credentialDigest === credentialDigest;
  }

  /** Reserves capacity for one placement (idempotent by `key`). Rejects with a stable code. */
  reserve(req: ReserveRequest): ReserveResult {
    return placements.reserve(this.#ctx, req);
  }

  /** Where a placement stands and how healthy this host is (for an allocation's host-loss check). */
  placementStatus(placementId: string): PlacementStatus {
    return placements.placementStatus(this.#ctx, placementId);
  }

  /** Asks the agent to make the placement absent (idempotent). Returns true once absence was observed. */
  requestAbsent(placementId: string, generation: number): boolean {
    return placements.requestAbsent(this.#ctx, placementId, generation);
  }

  /** Asks the agent to pause the placement (issue 21; idempotent): hostPlacements.requestPause. */
  requestPause(placementId: string, generation: number): TransitionAnswer {
    return placements.requestPause(this.#ctx, placementId, generation);
  }

  /** Asks the agent to suspend the placement (issue 21; idempotent): hostPlacements.requestSuspend. */
  requestSuspend(placementId: string, generation: number): TransitionAnswer {
    return placements.requestSuspend(this.#ctx, placementId, generation);
  }

  /** Takes capacity back and asks the agent to run a paused or suspended placement (issue 21): hostPlacements.requestResume. */
  requestResume(placementId: string, generation: number, nextGeneration: number): TransitionAnswer {
    return placements.requestResume(this.#ctx, placementId, generation, nextGeneration);
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
    const { store, conn } = this.#ctx;
    const r = store.mustRow();
    if (r.adminState === "disabled") throw new BeachballError("HOST_DISABLED", "the allocation's host is fenced");
    if (!isCurrentRunning(store.placement(placementId), generation))
      throw new BeachballError("STALE_GENERATION", "the placement is not this host's current running one");
    const ep = conn.endpoint();
    if (!ep)
      throw new BeachballError("CONNECTIVITY_UNAVAILABLE", "the host has not reported its WireGuard endpoint yet", {
        retryAfterSeconds: 5,
      });
    return ep;
  }

  /** The client of grant `grantId` posted candidates to its Connection: they go to the host with the grant's apply (see HostConnections.clientCandidates). */
  clientCandidates(grantId: string, candidates: Candidate[]): void {
    const { store, conn, mailbox } = this.#ctx;
    if (!store.row()) return;
    if (store.atomically(() => conn.clientCandidates(grantId, candidates))) mailbox.wakePolls();
  }

  /** Queues a configure_connection for the agent (idempotent; see HostConnections.enqueue) and wakes its parked poll. */
  configureConnection(c: ConnectionCommandRequest): void {
    const { store, conn, mailbox } = this.#ctx;
    if (!store.row()) throw new BeachballError("NOT_FOUND", "host is not registered");
    if (store.atomically(() => conn.enqueue(c))) mailbox.wakePolls();
  }

  /**
   * One agent envelope (poll or messages) and, for a poll with nothing to
   * hand out, a park of up to `waitMs` (≤ POLL_PARK_MS) until work arrives.
   * Throws STALE_AGENT_EPOCH for an older epoch.
   */
  poll(env: Envelope, waitMs: number): Promise<PollResponse> {
    return session.poll(this.#ctx, env, waitMs);
  }

  /** Checks that a delivery may go to this placement now; returns an earlier digest for a repeated delivery ID. */
  checkDelivery(deliveryId: string, placementId: string, generation: number): { earlierDigest: string | null } {
    return placements.checkDelivery(this.#ctx, deliveryId, placementId, generation);
  }

  /**
   * Hands a bootstrap payload to the agent's next poll, in this instance's
   * memory only, and resolves with the agent's acknowledgement or `timeout`
   * after `timeoutMs`. Throws RATE_LIMITED past MAX_PENDING_DELIVERIES_PER_HOST.
   */
  deliver(delivery: BootstrapDelivery, timeoutMs: number): Promise<DeliveryOutcome> {
    return this.#ctx.mailbox.deliver(delivery, timeoutMs);
  }

  /** The operator's view with free capacity. Throws NOT_FOUND before enrollment. */
  view(): HostView {
    return hostView(this.#ctx);
  }

  /** Ends parked polls at once (the embedded host calls this before it stops). */
  override drain(): void {
    this.#ctx.mailbox.drain();
  }

  /** Re-publishes the advertisement and prunes commands and absent placements older than an hour (spec "Observability and retention"). */
  override alarm(): void {
    const { store, conn, env } = this.#ctx;
    if (!store.row()) return;
    const cutoff = env.clock.wallMs() - COMMAND_RETENTION_MS;
    store.atomically(() => {
      store.prune(cutoff);
      conn.prune(cutoff);
      publish(this.#ctx, true);
    });
  }
}
