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
import { prepared } from "../runtime/drizzle.ts";
import { BeachballError } from "../../protocol/errors.ts";
import type { ConnectionGrantResponse, GrantTransport } from "../../protocol/connection.ts";
import {
  checkGrantRequest,
  generationFenced,
  GRANT_EXPIRY_GRACE_MS,
  grantGone,
  grantStale,
} from "../../domain/grants.ts";
import { closedGrantRefusal, grantLimitRefusal, revokedWhileIssuedRefusal } from "../../domain/grantIssue.ts";
import type { SchedulerEnv } from "../env.ts";
import type { ConnectionSettings } from "../connectionSettings.ts";
import type { ConnectionSigner } from "../connectionSigner.ts";
import { NetworkMessage } from "./messages.ts";
import { NETWORK_TABLES } from "./networkSchema.ts";
import { networkQueries, type GrantRow } from "./networkQueries.ts";
import { relayTokens, signGrant } from "./grantDocuments.ts";
import { grantPayload, openAndApply, refuse, type GrantDocuments, type NewGrant } from "./networkGrantIssue.ts";
import { NetworkAddresses, type AllocRow } from "./networkAddresses.ts";

export { MAX_GRANTS_PER_NETWORK, MAX_LIVE_GRANTS_PER_ALLOCATION } from "../../domain/grantIssue.ts";
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

/** See the module header. */
export class NetworkObject extends AuthorityObject<SchedulerEnv, NetworkMessage> {
  static readonly className = "Network";
  static readonly messageSchema = NetworkMessage;
  static readonly tables = NETWORK_TABLES;

  /** Its row, allocation addresses and free list (./networkAddresses.ts). */
  private readonly book = new NetworkAddresses(this.state, this.env);
  private readonly q = prepared(this.state.storage, networkQueries);

  constructor(state: ObjectState<NetworkMessage>, env: SchedulerEnv) {
    super(state, env);
  }

  private get obj(): string {
    return this.state.name;
  }

  private get now(): number {
    return this.env.clock.wallMs();
  }

  private settings(): { settings: ConnectionSettings; signer: ConnectionSigner } {
    const settings = this.env.config.connections;
    const signer = this.env.signer;
    if (!settings || !signer)
      throw new BeachballError("FORBIDDEN", "private networking is not configured in this deployment's manifest");
    return { settings, signer };
  }

  private grant(grantId: string): GrantRow | null {
    return this.q.grant.get({ obj: this.obj, grantId }) ?? null;
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
    return { networkId: this.obj, address: this.book.reserve(allocationId, settings.ula) };
  }

  /** Throws the stable refusal when no grant may be issued for `generation` of `a` (src/domain/grantIssue.ts). */
  private refuseClosed(a: AllocRow | null, generation: number): AllocRow {
    refuse(closedGrantRefusal(a, generation));
    return a!;
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
    const ttlMs = this.admit(req, settings);
    const endpoint = await this.env.Host.get(req.hostId).connectionEndpoint(req.placementId, req.generation);
    // The Allocation may have closed the generation (or ended) while the Host answered.
    const a = this.refuseClosed(this.book.alloc(req.allocationId), req.generation);
    const now = this.now;
    const ids: NewGrant = {
      grantId: this.env.random.id("grt"),
      connectionId: this.env.random.id("con"),
      clientToken: `bbx_${Buffer.from(this.env.random.bytes(32)).toString("hex")}`,
      expiresAtMs: now + ttlMs,
    };
    const docs = this.state.storage.transactionSync(() =>
      this.recordGrant(req, a, endpoint.publicKey, ids, now, settings, signer),
    );
    await this.handToHost(req, ids, docs, signer);
    // Closed (replacement) or ended (release) while the grant was being handed to the host: it was revoked.
    const issued = this.grant(ids.grantId);
    refuse(revokedWhileIssuedRefusal(!issued || issued.revokedAtMs !== null, this.book.alloc(req.allocationId)));
    return {
      grant: docs.grant,
      relayMap: docs.relayMap,
      relayTokens: relayTokens(signer, settings, ids.grantId, "client", ids.expiresAtMs, now),
      connectionId: ids.connectionId,
      endpointToken: ids.clientToken,
      hostCandidates: endpoint.candidates,
      stunServers: [...settings.stunServers],
    };
  }

  /** Checks `req` before the Host is asked: open generation, the grant bounds, the policy; returns the grant's lifetime, ms. */
  private admit(req: IssueGrant, settings: ConnectionSettings): number {
    this.refuseClosed(this.book.alloc(req.allocationId), req.generation);
    const live = this.q.liveOfAllocation.get({ obj: this.obj, id: req.allocationId, now: this.now })!.n;
    refuse(grantLimitRefusal(live, this.q.held.get({ obj: this.obj })!.n));
    const policy = checkGrantRequest(settings.policyFor(req.workloadClass), req, settings);
    if (!policy.ok) throw new BeachballError(policy.refusal.code, policy.refusal.message);
    return policy.ttlMs;
  }

  /** Takes the client address, signs the grant and relay map, stores the grant and arms its expiry. Call inside a transaction. */
  private recordGrant(
    req: IssueGrant,
    a: AllocRow,
    hostPublicKey: string,
    ids: NewGrant,
    now: number,
    settings: ConnectionSettings,
    signer: ConnectionSigner,
  ): GrantDocuments {
    const { grantId, connectionId, expiresAtMs } = ids;
    const clientAddress = this.book.take("client", settings.ula);
    const payload = grantPayload(
      req,
      this.obj,
      { hostPublicKey, clientAddress, allocationAddress: a.address },
      ids,
      now,
      settings,
    );
    const signed = signGrant(signer, settings, payload);
    this.q.insert.run({
      obj: this.obj,
      grantId,
      id: req.allocationId,
      generation: req.generation,
      hostId: req.hostId,
      placementId: req.placementId,
      clientAddress,
      connectionId,
      now,
      expiresAtMs,
    });
    this.armAlarm(expiresAtMs + GRANT_EXPIRY_GRACE_MS);
    return signed;
  }

  /** Opens the grant's Connection and queues its apply at the Host; on failure revokes the grant and rethrows. */
  private async handToHost(
    req: IssueGrant,
    ids: NewGrant,
    docs: GrantDocuments,
    signer: ConnectionSigner,
  ): Promise<void> {
    try {
      await openAndApply(this.env, this.obj, req, ids, docs, signer);
    } catch (e) {
      const g = this.grant(ids.grantId);
      await this.revoke(g ? [g] : []).catch(() => undefined);
      throw e;
    }
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
    if (!g || g.allocationId !== allocationId)
      throw new BeachballError("NOT_FOUND", "no such grant for this allocation");
    if (g.revokedAtMs !== null) return false;
    await this.revoke([g]);
    return true;
  }

  /** Marks `grants` revoked (if not yet), then queues their revokes at their hosts and ends their Connections. */
  private async revoke(grants: GrantRow[]): Promise<void> {
    const now = this.now;
    const live = grants.filter((g) => g.goneAtMs === null);
    this.state.storage.transactionSync(() => {
      for (const g of live)
        if (g.revokedAtMs === null) this.q.markRevoked.run({ obj: this.obj, grantId: g.grantId, now });
      if (live.some((g) => g.expiresAtMs > now)) this.armAlarm(now + REVOKE_RESEND_MS);
    });
    for (const g of live) {
      await this.sendRevoke(g);
      await this.env.Connection.get(g.connectionId).close();
    }
  }

  /** Queues configure_connection revoke for grant `g` at its host. */
  private async sendRevoke(g: GrantRow): Promise<void> {
    await this.env.Host.get(g.hostId).configureConnection({
      action: "revoke",
      grantId: g.grantId,
      networkId: this.obj,
      allocationId: g.allocationId,
      placementId: g.placementId,
      generation: g.generation,
      connectionId: g.connectionId,
      expiresAtMs: g.expiresAtMs,
    });
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
    this.q.fence.run({ obj: this.obj, id: allocationId, generation });
    await this.revoke(this.q.unrevokedUpTo.all({ obj: this.obj, id: allocationId, generation }));
    await this.settle();
    const open = this.q.openUpTo.all({ obj: this.obj, id: allocationId, generation });
    const f = generationFenced(open, this.now);
    return f.fenced ? { fenced: true, byMs: null } : { fenced: false, byMs: f.byMs };
  }

  override async onInbox(): Promise<void> {
    const msgs = this.state.readInbox();
    if (msgs.length === 0) return;
    this.state.storage.transactionSync(() => {
      for (const { message: m } of msgs) {
        if (m.kind === "revoke_observed")
          this.q.markRevokeObserved.run({ obj: this.obj, grantId: m.grantId, hostId: m.hostId, atMs: m.atMs });
        else if (m.kind === "close_generation")
          this.q.closeGeneration.run({ obj: this.obj, id: m.allocationId, generation: m.generation });
        else this.q.markTerminal.run({ obj: this.obj, id: m.allocationId, now: this.now });
      }
      this.state.ackInbox(msgs[msgs.length - 1]!.seq);
    });
    await this.settle();
  }

  /** Resends revokes the hosts have not acknowledged, then settles. */
  override async alarm(): Promise<void> {
    const now = this.now;
    for (const g of this.q.unacknowledged.all({ obj: this.obj, now })) await this.sendRevoke(g);
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
    const stale = this.q.unrevokedWithAllocation
      .all({ obj: this.obj })
      .filter((r) => grantStale(r.grant, r.alloc))
      .map((r) => r.grant);
    if (stale.length > 0) await this.revoke(stale);
    const now = this.now;
    this.state.storage.transactionSync(() => {
      for (const g of this.q.open.all({ obj: this.obj })) {
        if (!grantGone(g, now)) continue;
        this.q.markGone.run({ obj: this.obj, grantId: g.grantId, now });
        this.book.free("client", g.clientAddress);
      }
      for (const a of this.book.unsettled()) {
        const remaining = this.q.openOfAllocation.all({ obj: this.obj, id: a.allocationId });
        if (a.waitingGeneration > 0 && remaining.every((g) => g.generation > a.waitingGeneration)) {
          this.q.stopWaiting.run({ obj: this.obj, id: a.allocationId });
          this.state.post(this.env.Allocation, a.allocationId, `fenced:${a.allocationId}:${a.waitingGeneration}`, {
            kind: "connections_fenced",
            generation: a.waitingGeneration,
          });
        }
        if (a.terminalAtMs !== null && remaining.length === 0) this.book.release(a);
      }
      this.q.forgetGoneBefore.run({ obj: this.obj, before: now - GRANT_RETENTION_MS });
      this.state.setAlarm(this.nextAlarm(now));
    });
  }

  /** The earliest time something here changes on its own: a grant's expiry past the grace, a revoke to resend, a gone grant to forget. */
  private nextAlarm(now: number): number | null {
    const q = this.q.alarmTimes.get({ obj: this.obj, now })!;
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
        .map((a) => ({ allocationId: a.allocationId, address: a.address, closedGeneration: a.closedGeneration })),
      grants: this.q.all.all({ obj: this.obj }).map((g) => ({
        grantId: g.grantId,
        allocationId: g.allocationId,
        generation: g.generation,
        clientAddress: g.clientAddress,
        revoked: g.revokedAtMs !== null,
        gone: g.goneAtMs !== null,
      })),
      free: this.book.freeList(),
    };
  }
}
