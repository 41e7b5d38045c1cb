/**
 * A Network: a tenant's routing and authorization boundary (spec "Networks,
 * addresses, and grants", "Revocation and replacement"). For now each
 * controller principal has one default Network (its ID is
 * `defaultNetworkIdFor(identity)`, src/domain/identifiers.ts).
 *
 * Owns: its /64 (a subnet index from the NetworkDirectory, asked once), a
 * /128 per allocation reserved when the allocation is created (before any
 * host is chosen) that survives replacement, a /128 per grant's client
 * peer, the grants it issued (public facts only) and which generations are
 * closed to new grants. Addresses come from counters (src/domain/network.ts),
 * never from identifiers, and return to a free list only when every grant
 * of their holder is gone from its host (revoke acknowledged, or expired)
 * and, for an allocation, its cleanup completed (it is terminal).
 *
 * Issuing a grant checks the policy, asks the allocation's Host for its
 * endpoint (public key and candidates), signs the grant and relay map,
 * mints the client's relay tokens and both endpoint tokens (the host's is
 * derived, so only its digest is kept), opens the Connection and queues
 * configure_connection apply at the Host. Fencing a generation closes it to
 * new grants, revokes its live grants and answers whether all are gone:
 * the Allocation does not replace its placement until they are
 * (CONNECTIONS_NOT_FENCED).
 * Calls NetworkDirectory, Host and Connection (none of which calls back);
 * posts `connections_fenced` to Allocations; receives a host's revoke
 * acknowledgement, and an Allocation's release (`close_generation`) and end
 * (`allocation_terminal`) as messages.
 * Must never: issue a grant for a closed generation or a terminal
 * allocation, reuse an address while a grant of its holder may be applied,
 * store a private key or a raw token.
 */
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { BeachballError } from "../../protocol/errors.ts";
import type { ConnectionGrantResponse, GrantPayload, GrantTransport } from "../../protocol/connection.ts";
import { checkGrantRequest, generationFenced, GRANT_EXPIRY_GRACE_MS, grantGone } from "../../domain/grants.ts";
import { tokenDigest } from "../manifestSchema.ts";
import type { SchedulerEnv } from "../env.ts";
import type { ConnectionSettings } from "../connectionSettings.ts";
import type { ConnectionSigner } from "../connectionSigner.ts";
import { NetworkMessage } from "./messages.ts";
import { NETWORK_TABLES } from "./networkSchema.ts";
import { relayTokens, signGrant } from "./grantDocuments.ts";
import { NetworkAddresses, type AllocRow } from "./networkAddresses.ts";

/** Most unrevoked, unexpired grants one allocation holds at once. */
export const MAX_LIVE_GRANTS_PER_ALLOCATION = 16;
/** Most grants one Network holds that may still be applied on a host (each holds a client address). */
export const MAX_GRANTS_PER_NETWORK = 4096;
/** How long a grant's facts are kept after it is gone (a late revoke still finds it), ms. */
export const GRANT_RETENTION_MS = 3600_000;
/** How often an unacknowledged revoke is sent again while its grant lives, ms. */
export const REVOKE_RESEND_MS = 60_000;

/** A grant request, already authorised by the Allocation (owner, state, generation). */
export interface IssueGrant {
  allocationId: string;
  tenant: string;
  workloadClass: string;
  generation: number;
  hostId: string;
  placementId: string;
  clientPublicKey: string;
  transport: GrantTransport;
  ports: number[];
  ttlSeconds?: number | undefined;
}

interface GrantRow {
  grant_id: string;
  allocation_id: string;
  generation: number;
  host_id: string;
  placement_id: string;
  client_address: string;
  connection_id: string;
  expires_at_ms: number;
  revoked_at_ms: number | null;
  revoke_observed_at_ms: number | null;
  gone_at_ms: number | null;
}

const GRANT_COLUMNS =
  "grant_id, allocation_id, generation, host_id, placement_id, client_address, connection_id, expires_at_ms, revoked_at_ms, revoke_observed_at_ms, gone_at_ms";
const facts = (g: GrantRow) => ({ expiresAtMs: g.expires_at_ms, revokeObservedAtMs: g.revoke_observed_at_ms });

/** See the module header. */
export class NetworkObject extends AuthorityObject<SchedulerEnv, NetworkMessage> {
  static readonly className = "Network";
  static readonly messageSchema = NetworkMessage;
  static readonly tables = NETWORK_TABLES;

  /** Its row, allocation addresses and free list (./networkAddresses.ts). */
  private readonly book = new NetworkAddresses(this.state, this.env);

  constructor(state: ObjectState<NetworkMessage>, env: SchedulerEnv) {
    super(state, env);
  }

  private get sql() {
    return this.state.storage.sql;
  }

  private get now(): number {
    return this.env.clock.now();
  }

  private settings(): { settings: ConnectionSettings; signer: ConnectionSigner } {
    const settings = this.env.config.connections;
    const signer = this.env.signer;
    if (!settings || !signer)
      throw new BeachballError("FORBIDDEN", "private networking is not configured in this deployment's manifest");
    return { settings, signer };
  }

  private grant(grantId: string): GrantRow | null {
    const r = this.sql
      .exec<GrantRow>(
        `SELECT ${GRANT_COLUMNS} FROM network_grants WHERE obj = ? AND grant_id = ?`,
        this.state.name,
        grantId,
      )
      .next();
    return r.done ? null : r.value;
  }

  private grantsWhere(where: string, ...args: unknown[]): GrantRow[] {
    return this.sql
      .exec<GrantRow>(
        `SELECT ${GRANT_COLUMNS} FROM network_grants WHERE obj = ? AND ${where}`,
        this.state.name,
        ...args,
      )
      .toArray();
  }

  /**
   * Reserves the /128 of allocation `allocationId` (idempotent: the same
   * address on every call), owned by `tenant`. Called when the allocation
   * is created, before any host is chosen. Throws FORBIDDEN without private
   * networking or for another tenant's Network.
   */
  async reserveAllocationAddress(
    allocationId: string,
    tenant: string,
  ): Promise<{ networkId: string; address: string }> {
    const { settings } = this.settings();
    await this.book.ensure(tenant);
    return { networkId: this.state.name, address: this.book.reserve(allocationId, settings.ula) };
  }

  /** Throws the stable refusal when no grant may be issued for `generation` of `a`. */
  private refuseClosed(a: AllocRow | null, generation: number): AllocRow {
    if (!a)
      throw new BeachballError(
        "INVALID_STATE",
        "allocation has no private address (created before private networking was configured)",
      );
    if (a.terminal_at_ms !== null) throw new BeachballError("INVALID_STATE", "allocation is released");
    if (generation <= a.closed_generation)
      throw new BeachballError("STALE_GENERATION", `generation ${generation} was replaced; no grant is issued for it`);
    return a;
  }

  /**
   * Issues a grant (see the module header). Throws FORBIDDEN (policy, or no
   * private networking), STALE_GENERATION (generation closed, or the
   * placement is not the host's current running one), INVALID_STATE
   * (allocation released), RATE_LIMITED (too many live grants),
   * CONNECTIVITY_UNAVAILABLE (the host endpoint has not reported yet).
   */
  async issueGrant(req: IssueGrant): Promise<ConnectionGrantResponse> {
    const { settings, signer } = this.settings();
    this.refuseClosed(this.book.alloc(req.allocationId), req.generation);
    const now0 = this.now;
    const live = this.grantsWhere(
      "allocation_id = ? AND revoked_at_ms IS NULL AND expires_at_ms > ?",
      req.allocationId,
      now0,
    ).length;
    if (live >= MAX_LIVE_GRANTS_PER_ALLOCATION)
      throw new BeachballError(
        "RATE_LIMITED",
        `an allocation holds at most ${MAX_LIVE_GRANTS_PER_ALLOCATION} live grants; revoke one first`,
        { retryAfterSeconds: 5 },
      );
    const held = this.sql
      .exec<{ n: number }>(
        "SELECT COUNT(*) AS n FROM network_grants WHERE obj = ? AND gone_at_ms IS NULL",
        this.state.name,
      )
      .one().n;
    if (held >= MAX_GRANTS_PER_NETWORK)
      throw new BeachballError(
        "RATE_LIMITED",
        `a Network holds at most ${MAX_GRANTS_PER_NETWORK} grants that may still be applied`,
        { retryAfterSeconds: 30 },
      );
    const policy = checkGrantRequest(settings.policyFor(req.workloadClass), req, settings);
    if (!policy.ok) throw new BeachballError(policy.refusal.code, policy.refusal.message);

    const endpoint = await this.env.Host.get(req.hostId).connectionEndpoint(req.placementId, req.generation);

    // The Allocation may have closed the generation (or ended) while the Host answered.
    const a = this.refuseClosed(this.book.alloc(req.allocationId), req.generation);
    const now = this.now;
    const grantId = this.env.random.id("grt");
    const connectionId = this.env.random.id("con");
    const clientToken = `bbx_${Buffer.from(this.env.random.bytes(32)).toString("hex")}`;
    const expiresAtMs = now + policy.ttlMs;
    const docs = this.state.storage.transactionSync(() => {
      const clientAddress = this.book.take("client", settings.ula);
      const payload: GrantPayload = {
        v: 1,
        grantId,
        tenant: req.tenant,
        networkId: this.state.name,
        allocationId: req.allocationId,
        generation: req.generation,
        hostId: req.hostId,
        clientPublicKey: req.clientPublicKey,
        hostPublicKey: endpoint.publicKey,
        clientAddress,
        allocationAddress: a.address,
        transport: req.transport,
        ports: [...req.ports],
        policyRevision: settings.policyRevision,
        issuedAtMs: now,
        expiresAtMs,
      };
      const signed = signGrant(signer, settings, payload);
      this.sql.exec(
        `INSERT INTO network_grants (obj, ${GRANT_COLUMNS}, issued_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, ?)`,
        this.state.name,
        grantId,
        req.allocationId,
        req.generation,
        req.hostId,
        req.placementId,
        clientAddress,
        connectionId,
        expiresAtMs,
        now,
      );
      this.armAlarm(expiresAtMs + GRANT_EXPIRY_GRACE_MS);
      return signed;
    });
    try {
      await this.env.Connection.get(connectionId).open({
        grantId,
        expiresAtMs,
        clientTokenDigest: tokenDigest(clientToken),
        hostTokenDigest: tokenDigest(signer.hostEndpointToken(connectionId)),
        hostId: req.hostId,
      });
      await this.env.Host.get(req.hostId).configureConnection({
        action: "apply",
        grantId,
        networkId: this.state.name,
        allocationId: req.allocationId,
        placementId: req.placementId,
        generation: req.generation,
        connectionId,
        expiresAtMs,
        grant: docs.grant,
        relayMap: docs.relayMap,
      });
    } catch (e) {
      await this.revoke(this.grantsWhere("grant_id = ?", grantId)).catch(() => undefined);
      throw e;
    }
    // Closed (replacement) or ended (release) while the grant was being handed to the host: it was revoked.
    const issued = this.grant(grantId);
    if (!issued || issued.revoked_at_ms !== null) {
      const cur = this.book.alloc(req.allocationId);
      if (!cur || cur.terminal_at_ms !== null)
        throw new BeachballError("INVALID_STATE", "the allocation was released while the grant was issued");
      throw new BeachballError("STALE_GENERATION", "the allocation was replaced while the grant was issued");
    }
    return {
      grant: docs.grant,
      relayMap: docs.relayMap,
      relayTokens: relayTokens(signer, settings, grantId, "client", expiresAtMs, now),
      connectionId,
      endpointToken: clientToken,
      hostCandidates: endpoint.candidates,
      stunServers: [...settings.stunServers],
    };
  }

  /**
   * Revokes grant `grantId` of allocation `allocationId` (spec "Revocation
   * and replacement": marks it revoked, sends configure_connection revoke
   * to the host, ends its Connection). Idempotent; returns false when it
   * was already revoked. Throws NOT_FOUND for a grant of another
   * allocation (or one forgotten after GRANT_RETENTION_MS).
   */
  async revokeGrant(allocationId: string, grantId: string): Promise<boolean> {
    const g = this.grant(grantId);
    if (!g || g.allocation_id !== allocationId)
      throw new BeachballError("NOT_FOUND", "no such grant for this allocation");
    if (g.revoked_at_ms !== null) return false;
    await this.revoke([g]);
    return true;
  }

  /** Marks `grants` revoked (if not yet), then queues their revokes at their hosts and ends their Connections. */
  private async revoke(grants: GrantRow[]): Promise<void> {
    const now = this.now;
    const live = grants.filter((g) => g.gone_at_ms === null);
    this.state.storage.transactionSync(() => {
      for (const g of live)
        if (g.revoked_at_ms === null)
          this.sql.exec(
            "UPDATE network_grants SET revoked_at_ms = ? WHERE obj = ? AND grant_id = ?",
            now,
            this.state.name,
            g.grant_id,
          );
      if (live.some((g) => g.expires_at_ms > now)) this.armAlarm(now + REVOKE_RESEND_MS);
    });
    for (const g of live) {
      await this.env.Host.get(g.host_id).configureConnection({
        action: "revoke",
        grantId: g.grant_id,
        networkId: this.state.name,
        allocationId: g.allocation_id,
        placementId: g.placement_id,
        generation: g.generation,
        connectionId: g.connection_id,
        expiresAtMs: g.expires_at_ms,
      });
      await this.env.Connection.get(g.connection_id).close();
    }
  }

  /**
   * Closes generations up to `generation` of `allocationId` to new grants,
   * revokes their live grants, and answers whether every one of them is
   * gone from its host (revoke acknowledged, or expired past the grace);
   * if not, `byMs` is when expiry alone fences them, and the allocation is
   * sent `connections_fenced` when the last one goes.
   */
  async fenceGeneration(allocationId: string, generation: number): Promise<{ fenced: boolean; byMs: number | null }> {
    const a = this.book.alloc(allocationId);
    if (!a) return { fenced: true, byMs: null };
    this.state.storage.transactionSync(() => {
      this.sql.exec(
        "UPDATE network_allocations SET closed_generation = MAX(closed_generation, ?), waiting_generation = ? WHERE obj = ? AND allocation_id = ?",
        generation,
        generation,
        this.state.name,
        allocationId,
      );
    });
    await this.revoke(
      this.grantsWhere(
        "allocation_id = ? AND generation <= ? AND revoked_at_ms IS NULL AND gone_at_ms IS NULL",
        allocationId,
        generation,
      ),
    );
    await this.settle();
    const open = this.grantsWhere(
      "allocation_id = ? AND generation <= ? AND gone_at_ms IS NULL",
      allocationId,
      generation,
    );
    const f = generationFenced(open.map(facts), this.now);
    return f.fenced ? { fenced: true, byMs: null } : { fenced: false, byMs: f.byMs };
  }

  override async onInbox(): Promise<void> {
    const msgs = this.state.readInbox();
    if (msgs.length === 0) return;
    this.state.storage.transactionSync(() => {
      for (const { message: m } of msgs) {
        if (m.kind === "revoke_observed") {
          this.sql.exec(
            "UPDATE network_grants SET revoke_observed_at_ms = ? WHERE obj = ? AND grant_id = ? AND host_id = ? AND revoke_observed_at_ms IS NULL",
            m.atMs,
            this.state.name,
            m.grantId,
            m.hostId,
          );
        } else if (m.kind === "close_generation") {
          this.sql.exec(
            "UPDATE network_allocations SET closed_generation = MAX(closed_generation, ?) WHERE obj = ? AND allocation_id = ?",
            m.generation,
            this.state.name,
            m.allocationId,
          );
        } else {
          this.sql.exec(
            "UPDATE network_allocations SET terminal_at_ms = ? WHERE obj = ? AND allocation_id = ? AND terminal_at_ms IS NULL",
            this.now,
            this.state.name,
            m.allocationId,
          );
        }
      }
      this.state.ackInbox(msgs[msgs.length - 1]!.seq);
    });
    await this.settle();
  }

  /** Resends revokes the hosts have not acknowledged, then settles. */
  override async alarm(): Promise<void> {
    const now = this.now;
    const unacked = this.grantsWhere(
      "revoked_at_ms IS NOT NULL AND revoke_observed_at_ms IS NULL AND gone_at_ms IS NULL AND expires_at_ms > ?",
      now,
    );
    for (const g of unacked) {
      await this.env.Host.get(g.host_id).configureConnection({
        action: "revoke",
        grantId: g.grant_id,
        networkId: this.state.name,
        allocationId: g.allocation_id,
        placementId: g.placement_id,
        generation: g.generation,
        connectionId: g.connection_id,
        expiresAtMs: g.expires_at_ms,
      });
    }
    await this.settle();
  }

  /**
   * Brings everything up to date at the current time: revokes the live
   * grants of ended allocations and closed generations; marks grants gone
   * and frees their client addresses; tells waiting allocations their
   * generation is fenced; frees the address of an ended allocation once
   * its grants are gone; forgets old gone grants; re-arms the alarm.
   */
  private async settle(): Promise<void> {
    const stale = this.sql
      .exec<GrantRow>(
        `SELECT ${GRANT_COLUMNS.split(", ")
          .map((c) => `g.${c}`)
          .join(
            ", ",
          )} FROM network_grants g JOIN network_allocations a ON a.obj = g.obj AND a.allocation_id = g.allocation_id WHERE g.obj = ? AND g.revoked_at_ms IS NULL AND g.gone_at_ms IS NULL AND (a.terminal_at_ms IS NOT NULL OR g.generation <= a.closed_generation)`,
        this.state.name,
      )
      .toArray();
    if (stale.length > 0) await this.revoke(stale);
    const now = this.now;
    this.state.storage.transactionSync(() => {
      const open = this.grantsWhere("gone_at_ms IS NULL");
      for (const g of open) {
        if (!grantGone(facts(g), now)) continue;
        this.sql.exec(
          "UPDATE network_grants SET gone_at_ms = ? WHERE obj = ? AND grant_id = ?",
          now,
          this.state.name,
          g.grant_id,
        );
        this.book.free("client", g.client_address);
      }
      for (const a of this.book.unsettled()) {
        const remaining = this.grantsWhere("allocation_id = ? AND gone_at_ms IS NULL", a.allocation_id);
        if (a.waiting_generation > 0 && remaining.every((g) => g.generation > a.waiting_generation)) {
          this.sql.exec(
            "UPDATE network_allocations SET waiting_generation = 0 WHERE obj = ? AND allocation_id = ?",
            this.state.name,
            a.allocation_id,
          );
          this.state.post(this.env.Allocation, a.allocation_id, `fenced:${a.allocation_id}:${a.waiting_generation}`, {
            kind: "connections_fenced",
            generation: a.waiting_generation,
          });
        }
        if (a.terminal_at_ms !== null && remaining.length === 0) this.book.release(a);
      }
      this.sql.exec(
        "DELETE FROM network_grants WHERE obj = ? AND gone_at_ms IS NOT NULL AND gone_at_ms < ?",
        this.state.name,
        now - GRANT_RETENTION_MS,
      );
      this.state.setAlarm(this.nextAlarm(now));
    });
  }

  /** The earliest time something here changes on its own: a grant's expiry past the grace, a revoke to resend, a gone grant to forget. */
  private nextAlarm(now: number): number | null {
    const q = this.sql
      .exec<{ expiry: number | null; resend: number | null; forget: number | null }>(
        `SELECT MIN(CASE WHEN gone_at_ms IS NULL THEN expires_at_ms END) AS expiry,
                MIN(CASE WHEN gone_at_ms IS NULL AND revoked_at_ms IS NOT NULL AND revoke_observed_at_ms IS NULL AND expires_at_ms > ? THEN 1 END) AS resend,
                MIN(gone_at_ms) AS forget
         FROM network_grants WHERE obj = ?`,
        now,
        this.state.name,
      )
      .one();
    const at: number[] = [];
    if (q.expiry !== null) at.push(q.expiry + GRANT_EXPIRY_GRACE_MS);
    if (q.resend !== null) at.push(now + REVOKE_RESEND_MS);
    if (q.forget !== null) at.push(q.forget + GRANT_RETENTION_MS);
    return at.length ? Math.max(Math.min(...at), now + 1) : null;
  }

  private armAlarm(atMs: number): void {
    const cur = this.state.getAlarm();
    if (cur === null || atMs < cur) this.state.setAlarm(atMs);
  }

  /** Addresses and grants of this Network, for operators and tests. */
  describe(): {
    subnet: number | null;
    allocations: { allocationId: string; address: string; closedGeneration: number }[];
    grants: {
      grantId: string;
      allocationId: string;
      generation: number;
      clientAddress: string;
      revoked: boolean;
      gone: boolean;
    }[];
    free: string[];
  } {
    return {
      subnet: this.book.net()?.subnet ?? null,
      allocations: this.book
        .allocations()
        .map((a) => ({ allocationId: a.allocation_id, address: a.address, closedGeneration: a.closed_generation })),
      grants: this.grantsWhere("1 = 1 ORDER BY issued_at_ms, grant_id").map((g) => ({
        grantId: g.grant_id,
        allocationId: g.allocation_id,
        generation: g.generation,
        clientAddress: g.client_address,
        revoked: g.revoked_at_ms !== null,
        gone: g.gone_at_ms !== null,
      })),
      free: this.book.freeList(),
    };
  }
}
