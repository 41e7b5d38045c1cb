/**
 * The Host object's part in private networking (spec "The agent protocol":
 * connectivity_update, configure_connection; "Revocation and replacement"):
 * the host endpoint's public key and candidates from its latest
 * connectivity_update (nothing else of it is stored), and the queue of
 * configure_connection commands, redelivered on every poll until the agent
 * acknowledges them. A revoke's acknowledgement is posted to the grant's
 * Network: it is what tells the scheduler the peer is gone from the host.
 * The host's relay tokens and endpoint token are minted when a command is
 * handed out (src/scheduler/objects/grantDocuments.ts, the signer's
 * derivation), never stored.
 *
 * The client's candidates (from the grant's Connection) ride in the apply:
 * each new list is stored with it and the apply goes back in the queue (at
 * most MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT times per grant), so the host
 * endpoint learns where to send to punch through its NAT.
 *
 * Reconciliation (src/domain/grantReconcile.ts): every connectivity_update
 * that is the newest of its session is compared with the grants handed out
 * here; an acknowledged, live grant the host no longer holds (its endpoint
 * restarted: grants live in the agent's memory) goes back in the queue as
 * the same apply, and a grant the host still holds after acknowledging its
 * revoke gets the revoke again, each at most
 * MAX_GRANT_REDELIVERIES_PER_SESSION times per agent session (counted in
 * this instance's memory). Commands are kept until their grant expired past
 * GRANT_EXPIRY_GRACE_MS, so a live grant is never forgotten here.
 *
 * A part of HostObject (it runs inside that instance, on its storage, in
 * its calls), kept in its own file: it loads the rows (./hostConnectionStore.ts),
 * decides by the rules in src/domain/connectionCommands.ts and
 * src/domain/grantReconcile.ts, and persists the outcome.
 * Must never: store a private key or a token, hand out an apply for a grant
 * that is revoked or expired (or whose placement was replaced), or report a
 * revoke as observed before the agent acknowledged it.
 */
import type { ObjectState } from "../runtime/api.ts";
import { BeachballError } from "../../protocol/errors.ts";
import type { CommandAck, ConfigureConnection, ConnectivityUpdate } from "../../protocol/agent.ts";
import type { Candidate, SignedGrant, SignedRelayMap } from "../../protocol/connection.ts";
import { connectionCommandIdFor } from "../../domain/identifiers.ts";
import { reconcileGrants } from "../../domain/grantReconcile.ts";
import {
  acceptClientCandidates,
  ackOutcome,
  handoutDecision,
  isNewerConnectivity,
} from "../../domain/connectionCommands.ts";
import type { SchedulerEnv } from "../env.ts";
import { relayTokens } from "./grantDocuments.ts";
import { HostConnectionStore, type ConnectionCommandRow } from "./hostConnectionStore.ts";

export { MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT } from "../../domain/connectionCommands.ts";

/** A configure_connection for the Host to queue (from the grant's Network). */
export interface ConnectionCommandRequest {
  action: "apply" | "revoke";
  grantId: string;
  networkId: string;
  allocationId: string;
  placementId: string;
  generation: number;
  connectionId: string;
  expiresAtMs: number;
  /** apply: the signed grant and relay map. */
  grant?: SignedGrant;
  relayMap?: SignedRelayMap;
}

/** The host endpoint as a grant needs it. */
export interface HostEndpointFacts {
  publicKey: string;
  candidates: Candidate[];
}

/** See the module header. */
export class HostConnections {
  /** Redeliveries per grant ID in the agent session `redeliveryEpoch` (memory only; bounded by the grants held here). */
  private readonly redeliveries = new Map<string, number>();
  private redeliveryEpoch = "";
  private readonly rows: HostConnectionStore;

  constructor(
    private readonly state: ObjectState<never>,
    private readonly env: SchedulerEnv,
  ) {
    this.rows = new HostConnectionStore(state.storage, state.name);
  }

  /** The endpoint's public key and candidates, or null before its first connectivity_update. */
  endpoint(): HostEndpointFacts | null {
    const r = this.rows.connectivity();
    return r ? { publicKey: r.publicKey, candidates: JSON.parse(r.candidatesJson) as Candidate[] } : null;
  }

  /**
   * Stores a connectivity_update's public key and candidates when it is
   * newer than the stored one (a new session, or a higher `seq` in this
   * one); counts its applied grants, paths and refusals; then reconciles
   * the grants it reports with those handed out here (see the module
   * header). `current(placementId, generation)` is true when that
   * placement is this host's at that generation and still wanted. Returns
   * true when a command went back in the queue (the caller wakes parked
   * polls). Call inside the envelope's transaction.
   */
  applyConnectivity(
    epoch: string,
    u: ConnectivityUpdate,
    current: (placementId: string, generation: number) => boolean,
  ): boolean {
    if (!isNewerConnectivity(this.rows.connectivity(), epoch, u.seq)) return false;
    this.rows.setConnectivity({
      publicKey: u.hostPublicKey,
      candidatesJson: JSON.stringify(u.candidates),
      agentEpoch: epoch,
      seq: u.seq,
      updatedAtMs: this.env.clock.wallMs(),
    });
    const m = this.env.metrics;
    for (const g of u.appliedGrants)
      m.inc("bb_connection_paths_total", "Applied grants by path, per connectivity_update", {
        phase: g.path,
        host: this.state.name,
      });
    for (const r of u.refusedGrants)
      m.inc("bb_connection_grant_refusals_total", "Grants a host endpoint refused", {
        reason: r.code,
        host: this.state.name,
      });
    return this.reconcile(epoch, u, current);
  }

  /** Puts back in the queue the applies and revokes `u` shows the host lacks (see the module header). */
  private reconcile(
    epoch: string,
    u: ConnectivityUpdate,
    current: (placementId: string, generation: number) => boolean,
  ): boolean {
    if (epoch !== this.redeliveryEpoch) {
      this.redeliveries.clear();
      this.redeliveryEpoch = epoch;
    }
    const now = this.env.clock.wallMs();
    const held = this.rows.heldGrants(now);
    if (held.length === 0) return false;
    const plan = reconcileGrants(
      held,
      new Set(u.appliedGrants.map((g) => g.grantId)),
      now,
      current,
      (id) => this.redeliveries.get(id) ?? 0,
    );
    const again = (grantId: string, action: "apply" | "revoke") => {
      this.rows.setStatus(connectionCommandIdFor(grantId, action), "pending");
      this.redeliveries.set(grantId, (this.redeliveries.get(grantId) ?? 0) + 1);
      this.env.metrics.inc(
        "bb_connection_grant_redeliveries_total",
        "configure_connection commands handed out again because the host's connectivity_update disagreed",
        { phase: action, host: this.state.name },
      );
    };
    for (const id of plan.reapply) again(id, "apply");
    for (const id of plan.rerevoke) again(id, "revoke");
    return plan.reapply.length + plan.rerevoke.length > 0;
  }

  /**
   * Queues a configure_connection (idempotent by its deterministic command
   * ID). A revoke supersedes the grant's apply if it is still pending; an
   * apply for a grant already revoked is dropped. Returns true when
   * something new is pending (the caller wakes parked polls). Call inside a
   * transaction. Throws INTERNAL for an apply without its signed grant and
   * relay map.
   */
  enqueue(c: ConnectionCommandRequest): boolean {
    if (c.action === "apply") {
      if (!c.grant || !c.relayMap)
        throw new BeachballError("INTERNAL", "an apply needs the signed grant and relay map");
      if (this.rows.has(connectionCommandIdFor(c.grantId, "revoke"))) return false;
    } else {
      this.rows.supersedeIfPending(connectionCommandIdFor(c.grantId, "apply"));
    }
    return this.rows.insert({
      commandId: connectionCommandIdFor(c.grantId, c.action),
      grantId: c.grantId,
      action: c.action,
      networkId: c.networkId,
      allocationId: c.allocationId,
      placementId: c.placementId,
      generation: c.generation,
      connectionId: c.connectionId,
      grantJson: c.grant ? JSON.stringify(c.grant) : null,
      relayMapJson: c.relayMap ? JSON.stringify(c.relayMap) : null,
      expiresAtMs: c.expiresAtMs,
      createdAtMs: this.env.clock.wallMs(),
    });
  }

  /**
   * Applies the agent's acknowledgements of configure_connection commands:
   * each pending one becomes acked or rejected; an accepted (or duplicate)
   * revoke is posted to the grant's Network as observed. Acks naming other
   * commands are ignored here. Call inside the envelope's transaction.
   */
  applyAcks(acks: readonly CommandAck[]): void {
    const now = this.env.clock.wallMs();
    for (const a of acks) {
      if (!a.commandId.startsWith("grt_")) continue;
      const c = this.rows.command(a.commandId);
      const outcome = c ? ackOutcome(c.action, c.status, a.result) : null;
      if (!c || !outcome) continue;
      this.rows.setStatus(a.commandId, outcome.status);
      if (outcome.revokeObserved) {
        this.state.post(this.env.Network, c.networkId, `rvk:${c.grantId}`, {
          kind: "revoke_observed",
          grantId: c.grantId,
          hostId: this.state.name,
          atMs: now,
        });
      }
    }
  }

  /**
   * Stores the client's newest candidates with grant `grantId`'s apply and
   * puts the apply back in the queue (see the module header). Ignored (false)
   * when the grant was never applied here, was revoked, refused or expired,
   * the list is unchanged, or MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT lists
   * came already (src/domain/connectionCommands.ts, acceptClientCandidates).
   * True when the apply is pending again (the caller wakes parked polls).
   * Call inside a transaction.
   */
  clientCandidates(grantId: string, candidates: readonly Candidate[]): boolean {
    const now = this.env.clock.wallMs();
    const applyId = connectionCommandIdFor(grantId, "apply");
    const apply = this.rows.command(applyId);
    if (!apply) return false;
    const json = JSON.stringify(candidates);
    const revoked = this.rows.has(connectionCommandIdFor(grantId, "revoke"));
    if (!acceptClientCandidates(apply, revoked, json, now)) return false;
    this.rows.setClientCandidates(applyId, json);
    return true;
  }

  /** True if a configure_connection waits for the agent. */
  hasPending(): boolean {
    return this.rows.hasPending();
  }

  /**
   * The pending commands (≤ MAX_CONNECTION_COMMANDS_PER_POLL), oldest
   * first, each apply with fresh host relay tokens and the host's endpoint
   * token. An apply whose grant has expired is superseded instead (the host
   * would refuse it, and it removes expired peers itself), as is a revoke
   * whose grant expired more than GRANT_EXPIRY_GRACE_MS ago
   * (src/domain/connectionCommands.ts, handoutDecision).
   */
  pending(): ConfigureConnection[] {
    const now = this.env.clock.wallMs();
    const signer = this.env.signer;
    const settings = this.env.config.connections;
    const out: ConfigureConnection[] = [];
    for (const c of this.rows.pending()) {
      if (handoutDecision(c.action, c.expiresAtMs, now, !!signer && !!settings) === "supersede") {
        this.rows.setStatus(c.commandId, "superseded");
        continue;
      }
      if (c.action === "revoke") {
        out.push({ commandId: c.commandId, type: "configure_connection", action: "revoke", grantId: c.grantId });
        continue;
      }
      out.push(this.handedOutApply(c, signer!, settings!, now));
    }
    return out;
  }

  /** Apply `c` as handed out at `nowMs`: its stored documents with freshly minted host tokens. */
  private handedOutApply(
    c: ConnectionCommandRow,
    signer: NonNullable<SchedulerEnv["signer"]>,
    settings: NonNullable<SchedulerEnv["config"]["connections"]>,
    nowMs: number,
  ): ConfigureConnection {
    return {
      commandId: c.commandId,
      type: "configure_connection",
      action: "apply",
      grantId: c.grantId,
      grant: JSON.parse(c.grantJson!) as SignedGrant,
      relayMap: JSON.parse(c.relayMapJson!) as SignedRelayMap,
      relayTokens: relayTokens(signer, settings, c.grantId, "host", c.expiresAtMs, nowMs),
      ...(c.clientCandidatesJson ? { clientCandidates: JSON.parse(c.clientCandidatesJson) as Candidate[] } : {}),
      connectionId: c.connectionId,
      endpointToken: signer.hostEndpointToken(c.connectionId),
    };
  }

  /**
   * Deletes settled commands created before `cutoffMs` (retention) whose
   * grant expired more than GRANT_EXPIRY_GRACE_MS ago (until then
   * reconciliation needs them). Call inside a transaction.
   */
  prune(cutoffMs: number): void {
    this.rows.prune(cutoffMs, this.env.clock.wallMs());
    for (const id of [...this.redeliveries.keys()])
      if (!this.rows.has(connectionCommandIdFor(id, "apply"))) this.redeliveries.delete(id);
  }
}
