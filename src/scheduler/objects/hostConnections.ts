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
 * its calls), kept in its own file.
 * Must never: store a private key or a token, hand out an apply for a grant
 * that is revoked or expired (or whose placement was replaced), or report a
 * revoke as observed before the agent acknowledged it.
 */
import type { ObjectState } from "../runtime/api.ts";
import { BeachballError } from "../../protocol/errors.ts";
import {
  MAX_CONNECTION_COMMANDS_PER_POLL,
  type CommandAck,
  type ConfigureConnection,
  type ConnectivityUpdate,
} from "../../protocol/agent.ts";
import type { Candidate, SignedGrant, SignedRelayMap } from "../../protocol/connection.ts";
import { connectionCommandIdFor } from "../../domain/identifiers.ts";
import { GRANT_EXPIRY_GRACE_MS } from "../../domain/grants.ts";
import { reconcileGrants, type CommandStatus, type HeldGrant } from "../../domain/grantReconcile.ts";
import type { SchedulerEnv } from "../env.ts";
import { relayTokens } from "./grantDocuments.ts";

/** Most times a grant's apply goes back to the host with newer client candidates (later lists are ignored). */
export const MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT = 16;

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

interface CommandRow {
  command_id: string;
  grant_id: string;
  action: "apply" | "revoke";
  network_id: string;
  connection_id: string;
  grant_json: string | null;
  relay_map_json: string | null;
  expires_at_ms: number;
  client_candidates_json: string | null;
}

/** See the module header. */
export class HostConnections {
  /** Redeliveries per grant ID in the agent session `redeliveryEpoch` (memory only; bounded by the grants held here). */
  private readonly redeliveries = new Map<string, number>();
  private redeliveryEpoch = "";

  constructor(
    private readonly state: ObjectState<never>,
    private readonly env: SchedulerEnv,
  ) {}

  private get sql() {
    return this.state.storage.sql;
  }

  /** The endpoint's public key and candidates, or null before its first connectivity_update. */
  endpoint(): HostEndpointFacts | null {
    const r = this.sql
      .exec<{ public_key: string; candidates_json: string }>(
        "SELECT public_key, candidates_json FROM host_connectivity WHERE obj = ?",
        this.state.name,
      )
      .next();
    return r.done
      ? null
      : { publicKey: r.value.public_key, candidates: JSON.parse(r.value.candidates_json) as Candidate[] };
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
    const prev = this.sql
      .exec<{ agent_epoch: string; seq: number }>(
        "SELECT agent_epoch, seq FROM host_connectivity WHERE obj = ?",
        this.state.name,
      )
      .next();
    if (!prev.done && prev.value.agent_epoch === epoch && prev.value.seq >= u.seq) return false;
    this.sql.exec(
      "INSERT INTO host_connectivity (obj, public_key, candidates_json, agent_epoch, seq, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (obj) DO UPDATE SET public_key = excluded.public_key, candidates_json = excluded.candidates_json, agent_epoch = excluded.agent_epoch, seq = excluded.seq, updated_at_ms = excluded.updated_at_ms",
      this.state.name,
      u.hostPublicKey,
      JSON.stringify(u.candidates),
      epoch,
      u.seq,
      this.env.clock.wallMs(),
    );
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
    const held = this.sql
      .exec<{
        grant_id: string;
        placement_id: string;
        generation: number;
        expires_at_ms: number;
        apply: CommandStatus | null;
        revoke: CommandStatus | null;
      }>(
        `SELECT grant_id, MAX(placement_id) AS placement_id, MAX(generation) AS generation, MAX(expires_at_ms) AS expires_at_ms,
                MAX(CASE WHEN action = 'apply' THEN status END) AS apply, MAX(CASE WHEN action = 'revoke' THEN status END) AS revoke
         FROM host_connection_commands WHERE obj = ? AND expires_at_ms > ? GROUP BY grant_id`,
        this.state.name,
        now,
      )
      .toArray()
      .map(
        (r): HeldGrant => ({
          grantId: r.grant_id,
          placementId: r.placement_id,
          generation: r.generation,
          expiresAtMs: r.expires_at_ms,
          apply: r.apply,
          revoke: r.revoke,
        }),
      );
    if (held.length === 0) return false;
    const plan = reconcileGrants(
      held,
      new Set(u.appliedGrants.map((g) => g.grantId)),
      now,
      current,
      (id) => this.redeliveries.get(id) ?? 0,
    );
    const again = (grantId: string, action: "apply" | "revoke") => {
      this.sql.exec(
        "UPDATE host_connection_commands SET status = 'pending' WHERE obj = ? AND command_id = ?",
        this.state.name,
        connectionCommandIdFor(grantId, action),
      );
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
   * transaction.
   */
  enqueue(c: ConnectionCommandRequest): boolean {
    const commandId = connectionCommandIdFor(c.grantId, c.action);
    if (c.action === "apply") {
      if (!c.grant || !c.relayMap)
        throw new BeachballError("INTERNAL", "an apply needs the signed grant and relay map");
      const revoked = this.sql
        .exec(
          "SELECT 1 FROM host_connection_commands WHERE obj = ? AND command_id = ?",
          this.state.name,
          connectionCommandIdFor(c.grantId, "revoke"),
        )
        .next();
      if (!revoked.done) return false;
    } else {
      this.sql.exec(
        "UPDATE host_connection_commands SET status = 'superseded' WHERE obj = ? AND command_id = ? AND status = 'pending'",
        this.state.name,
        connectionCommandIdFor(c.grantId, "apply"),
      );
    }
    const cur = this.sql.exec(
      "INSERT OR IGNORE INTO host_connection_commands (obj, command_id, grant_id, action, network_id, allocation_id, placement_id, generation, connection_id, grant_json, relay_map_json, expires_at_ms, status, created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
      this.state.name,
      commandId,
      c.grantId,
      c.action,
      c.networkId,
      c.allocationId,
      c.placementId,
      c.generation,
      c.connectionId,
      c.grant ? JSON.stringify(c.grant) : null,
      c.relayMap ? JSON.stringify(c.relayMap) : null,
      c.expiresAtMs,
      this.env.clock.wallMs(),
    );
    return cur.rowsWritten > 0;
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
      const r = this.sql
        .exec<{ grant_id: string; action: string; network_id: string; status: string }>(
          "SELECT grant_id, action, network_id, status FROM host_connection_commands WHERE obj = ? AND command_id = ?",
          this.state.name,
          a.commandId,
        )
        .next();
      if (r.done || r.value.status !== "pending") continue;
      const ok = a.result !== "rejected";
      this.sql.exec(
        "UPDATE host_connection_commands SET status = ? WHERE obj = ? AND command_id = ?",
        ok ? "acked" : "rejected",
        this.state.name,
        a.commandId,
      );
      if (r.value.action === "revoke" && ok) {
        this.state.post(this.env.Network, r.value.network_id, `rvk:${r.value.grant_id}`, {
          kind: "revoke_observed",
          grantId: r.value.grant_id,
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
   * came already. True when the apply is pending again (the caller wakes
   * parked polls). Call inside a transaction.
   */
  clientCandidates(grantId: string, candidates: readonly Candidate[]): boolean {
    const now = this.env.clock.wallMs();
    const apply = this.sql
      .exec<{
        status: CommandStatus;
        expires_at_ms: number;
        client_candidates_json: string | null;
        client_candidate_updates: number;
      }>(
        "SELECT status, expires_at_ms, client_candidates_json, client_candidate_updates FROM host_connection_commands WHERE obj = ? AND command_id = ?",
        this.state.name,
        connectionCommandIdFor(grantId, "apply"),
      )
      .next();
    if (apply.done) return false;
    const a = apply.value;
    const json = JSON.stringify(candidates);
    if (
      a.status === "rejected" ||
      a.status === "superseded" ||
      a.expires_at_ms <= now ||
      a.client_candidates_json === json
    )
      return false;
    if (a.client_candidate_updates >= MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT) return false;
    const revoked = !this.sql
      .exec(
        "SELECT 1 FROM host_connection_commands WHERE obj = ? AND command_id = ?",
        this.state.name,
        connectionCommandIdFor(grantId, "revoke"),
      )
      .next().done;
    if (revoked) return false;
    this.sql.exec(
      "UPDATE host_connection_commands SET client_candidates_json = ?, client_candidate_updates = client_candidate_updates + 1, status = 'pending' WHERE obj = ? AND command_id = ?",
      json,
      this.state.name,
      connectionCommandIdFor(grantId, "apply"),
    );
    return true;
  }

  /** True if a configure_connection waits for the agent. */
  hasPending(): boolean {
    return !this.sql
      .exec("SELECT 1 FROM host_connection_commands WHERE obj = ? AND status = 'pending' LIMIT 1", this.state.name)
      .next().done;
  }

  /**
   * The pending commands (≤ MAX_CONNECTION_COMMANDS_PER_POLL), oldest
   * first, each apply with fresh host relay tokens and the host's endpoint
   * token. An apply whose grant has expired is superseded instead (the host
   * would refuse it, and it removes expired peers itself), as is a revoke
   * whose grant expired more than GRANT_EXPIRY_GRACE_MS ago.
   */
  pending(): ConfigureConnection[] {
    const now = this.env.clock.wallMs();
    const rows = this.sql
      .exec<CommandRow>(
        "SELECT command_id, grant_id, action, network_id, connection_id, grant_json, relay_map_json, expires_at_ms, client_candidates_json FROM host_connection_commands WHERE obj = ? AND status = 'pending' ORDER BY created_at_ms, command_id LIMIT ?",
        this.state.name,
        MAX_CONNECTION_COMMANDS_PER_POLL,
      )
      .toArray();
    const out: ConfigureConnection[] = [];
    for (const c of rows) {
      if (c.action === "revoke") {
        // Long expired: the host removed the peer on its own (and the Network counts the grant gone by expiry).
        if (c.expires_at_ms + GRANT_EXPIRY_GRACE_MS <= now) {
          this.sql.exec(
            "UPDATE host_connection_commands SET status = 'superseded' WHERE obj = ? AND command_id = ?",
            this.state.name,
            c.command_id,
          );
          continue;
        }
        out.push({ commandId: c.command_id, type: "configure_connection", action: "revoke", grantId: c.grant_id });
        continue;
      }
      const signer = this.env.signer;
      const settings = this.env.config.connections;
      if (c.expires_at_ms <= now || !signer || !settings) {
        this.sql.exec(
          "UPDATE host_connection_commands SET status = 'superseded' WHERE obj = ? AND command_id = ?",
          this.state.name,
          c.command_id,
        );
        continue;
      }
      out.push({
        commandId: c.command_id,
        type: "configure_connection",
        action: "apply",
        grantId: c.grant_id,
        grant: JSON.parse(c.grant_json!) as SignedGrant,
        relayMap: JSON.parse(c.relay_map_json!) as SignedRelayMap,
        relayTokens: relayTokens(signer, settings, c.grant_id, "host", c.expires_at_ms, now),
        ...(c.client_candidates_json ? { clientCandidates: JSON.parse(c.client_candidates_json) as Candidate[] } : {}),
        connectionId: c.connection_id,
        endpointToken: signer.hostEndpointToken(c.connection_id),
      });
    }
    return out;
  }

  /**
   * Deletes settled commands created before `cutoffMs` (retention) whose
   * grant expired more than GRANT_EXPIRY_GRACE_MS ago (until then
   * reconciliation needs them). Call inside a transaction.
   */
  prune(cutoffMs: number): void {
    this.sql.exec(
      "DELETE FROM host_connection_commands WHERE obj = ? AND status != 'pending' AND created_at_ms < ? AND expires_at_ms + ? < ?",
      this.state.name,
      cutoffMs,
      GRANT_EXPIRY_GRACE_MS,
      this.env.clock.wallMs(),
    );
    for (const id of [...this.redeliveries.keys()]) {
      const kept = !this.sql
        .exec(
          "SELECT 1 FROM host_connection_commands WHERE obj = ? AND command_id = ?",
          this.state.name,
          connectionCommandIdFor(id, "apply"),
        )
        .next().done;
      if (!kept) this.redeliveries.delete(id);
    }
  }
}
