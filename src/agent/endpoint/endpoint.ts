/**
 * The host's private-networking endpoint (spec "Data path", host side;
 * docs/adr/0157-host-endpoint-routing.md): one userspace WireGuard Device
 * on one UDP socket (WireGuard, STUN and direct-path checks share it), a
 * peer per applied grant with an inner filter, a link into each placement
 * that has grants, grants removed at their expiry without a command, and
 * candidates refreshed every 20 s, and the grant's relays: for each relay of
 * the verified relay map with a host-role token (at most two), a relay
 * session of that grant (src/wireguard/multipathTunnel.ts; path ID
 * `<relayId>/<grantId>`), mirrored through until a direct path pins,
 * reconnected with bounded backoff, closed when the grant goes.
 *
 * Owns: the applied grants (verified here: src/agent/endpoint/grantCheck.ts),
 * their peers, filters, links and relay sessions, the recently revoked grant IDs (a late
 * apply of one is refused), the recent refusals, and the one alarm that
 * drives the Device's timers, probes, expiries and candidate refreshes
 * (the tunnel's, src/wireguard/multipathTunnel.ts).
 * Inbound packets reach a placement only through the link of the grant's
 * own placement; outbound packets leave a placement only to a peer whose
 * grant names that placement and the packet's destination.
 * Must never: apply an unverified grant, use a relay map or relay token
 * that failed its check, keep a peer or relay session past its grant's
 * expiry, send the private key anywhere, or throw from a packet path.
 */
import type { AppliedGrant, ConfigureConnection, ConnectivityUpdate, GrantRefusalCode } from "../../protocol/agent.ts";
import { MAX_APPLIED_GRANTS, MAX_REPORTED_GRANT_REFUSALS } from "../../protocol/agent.ts";
import type { Candidate, GrantPayload } from "../../protocol/connection.ts";
import {
  checkSignedRelayMap,
  checkSignedRelayToken,
  type ConnectionVerificationKeys,
} from "../../protocol/connectionSignature.ts";
import { canonicalIpv6, formatIpv6 } from "../../protocol/ipAddress.ts";
import type { StunServer } from "../../protocol/stunServers.ts";
import {
  CANDIDATE_REFRESH_MS,
  gatherCandidates,
  interfaceAddresses,
  MultipathTunnel,
  type Aead,
  type KeyPair25519,
  type Peer,
  type PathEndpoint,
  type PathState,
  type PeerRelay,
  type RelayConnector,
  type RelaySessionInfo,
  type WgRandom,
} from "../../wireguard/index.ts";
import { checkGrantForHost, type PlacementLookup, type PlacementTarget } from "./grantCheck.ts";
import { InnerFilter, type FilterCounters } from "./innerFilter.ts";
import type { PlacementLink, PlacementLinkPort } from "./placementLink.ts";
import type { Clock } from "../../protocol/clock.ts";

/** Revoked grant IDs remembered so a late apply is refused (older ones are forgotten; their grants expire anyway). */
export const MAX_REMEMBERED_REVOCATIONS = 4096;

/** Everything an endpoint is built from (ports for every side effect). */
export interface HostEndpointOptions {
  hostId: string;
  /** The host's X25519 key pair (src/agent/endpoint/hostKey.ts). */
  keyPair: KeyPair25519;
  verificationKeys: ConnectionVerificationKeys;
  /** Where the shared UDP socket binds (default port: DEFAULT_ENDPOINT_PORT). */
  listen: { hostname: string; port: number };
  stunServers: readonly StunServer[];
  clock: Clock;
  random: WgRandom;
  aead: Aead;
  placements: PlacementLookup;
  links: PlacementLinkPort;
  /** The interface list for local candidates (os.networkInterfaces in production). */
  interfaces: () => NodeJS.Dict<import("node:os").NetworkInterfaceInfo[]>;
  /** Opens relay sessions (src/relayclient relayConnector); without it relay maps are ignored. */
  relayConnector?: RelayConnector;
  /** Receives warnings (constant message, fields): a failed interface enumeration, once per distinct error. */
  onWarning?: (msg: string, fields: Record<string, string>) => void;
  /** Called after anything a connectivity_update reports changed. */
  onChange?: () => void;
}

/** The outcome of one configure_connection. */
export type ConfigureResult = { ok: true } | { ok: false; code: GrantRefusalCode; reason: string };

interface Applied {
  grant: GrantPayload;
  signature: string;
  placementKey: string;
  filter: InnerFilter;
  peer: Peer<PathEndpoint>;
  /** Canonical client address. */
  client: string;
  /** The selector's `changes` when last reported. */
  pathVersion: number;
  /** Relays of the apply whose map or token failed its check (not used). */
  relaysRejected: number;
}

interface LinkEntry {
  target: PlacementTarget;
  link: PlacementLink;
  grants: Set<string>;
}

/** Per-grant figures for stats(). */
export interface GrantStats {
  grantId: string;
  path: PathState;
  /** The client's candidates this host probes ("address:port"), as posted through the rendezvous. */
  candidates: string[];
  filter: FilterCounters;
  flows: number;
  /** Relays of the grant not used because their map or token failed its check. */
  relaysRejected: number;
}

/** The running endpoint. */
export class HostEndpoint {
  private readonly applied = new Map<string, Applied>();
  private readonly byPeer = new Map<Peer<PathEndpoint>, Applied>();
  private readonly links = new Map<string, LinkEntry>();
  private readonly revoked = new Set<string>();
  private refusals: Array<{ grantId: string; code: GrantRefusalCode }> = [];
  private candidates: Candidate[] = [];
  private nextRefreshMs = Number.POSITIVE_INFINITY;
  private interfaceError = "";
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;
  private t!: MultipathTunnel;
  /** Standard base64 of the endpoint's public key (reported; the private key never leaves). */
  readonly publicKey: string;

  private constructor(private readonly o: HostEndpointOptions) {
    this.publicKey = Buffer.from(o.keyPair.publicKey).toString("base64");
  }

  /** Binds the socket, gathers candidates once and starts the alarm. Rejects when the socket cannot be bound. */
  static async start(o: HostEndpointOptions): Promise<HostEndpoint> {
    const e = new HostEndpoint(o);
    e.t = await MultipathTunnel.open({
      privateKey: o.keyPair.privateKey,
      clock: o.clock,
      random: o.random,
      aead: o.aead,
      listen: o.listen,
      ...(o.relayConnector ? { relayConnector: o.relayConnector } : {}),
      deliver: (packet, peer) => e.inbound(packet, peer),
      onAuthenticated: (peer) => e.notePath(peer),
      onRelayChange: (i) => e.relayChanged(i),
      ownerDeadlineMs: () => e.ownerDeadline(),
      onAlarm: () => e.fire(),
    });
    await e.refreshCandidates();
    e.t.arm();
    return e;
  }

  private notePath(peer: Peer<PathEndpoint>): void {
    const a = this.byPeer.get(peer);
    const v = this.t.selector(peer)?.changes ?? 0;
    if (a && a.pathVersion !== v) {
      a.pathVersion = v;
      this.o.onChange?.();
    }
  }

  private relayChanged(i: RelaySessionInfo): void {
    // A relay session of a grant that opened: the peer's next handshake or keepalive may use it at once.
    if (i.state === "open") this.t.arm();
  }

  /** The bound UDP port. */
  get port(): number {
    return this.t.udp.port;
  }

  /** Applies or revokes one grant (serialised with every other change). Never rejects. */
  configure(cmd: ConfigureConnection): Promise<ConfigureResult> {
    const run = () => (cmd.action === "revoke" ? this.revoke(cmd.grantId) : this.apply(cmd));
    const p = this.queue.then(run, run);
    this.queue = p.catch(() => undefined);
    return p.catch((e) => this.refuse(cmd.grantId, "NETWORK_SETUP_FAILED", (e as Error).message));
  }

  private refuse(grantId: string, code: GrantRefusalCode, reason: string): ConfigureResult {
    this.refusals.push({ grantId: grantId.slice(0, 64), code });
    if (this.refusals.length > MAX_REPORTED_GRANT_REFUSALS)
      this.refusals = this.refusals.slice(-MAX_REPORTED_GRANT_REFUSALS);
    this.o.onChange?.();
    return { ok: false, code, reason };
  }

  private async apply(cmd: ConfigureConnection): Promise<ConfigureResult> {
    if (this.closed) return this.refuse(cmd.grantId, "NETWORK_SETUP_FAILED", "the endpoint is closed");
    if (!cmd.grant)
      return this.refuse(cmd.grantId, "GRANT_SIGNATURE_INVALID", "configure_connection apply carries no grant");
    if (this.revoked.has(cmd.grantId))
      return this.refuse(cmd.grantId, "GRANT_REVOKED", `grant ${cmd.grantId} was revoked`);
    const existing = this.applied.get(cmd.grantId);
    if (existing) {
      if (existing.signature !== cmd.grant.signature)
        return this.refuse(cmd.grantId, "GRANT_MISMATCH", `grant ${cmd.grantId} is applied with other content`);
      // A redelivery: its relay tokens are fresh (they are minted per delivery), the sessions keep running.
      this.attachRelays(existing, cmd);
      if (cmd.clientCandidates) this.learnClientCandidates(existing, cmd.clientCandidates);
      return { ok: true };
    }
    if (this.applied.size >= MAX_APPLIED_GRANTS)
      return this.refuse(cmd.grantId, "RATE_LIMITED", `this host holds ${MAX_APPLIED_GRANTS} grants`);
    const c = checkGrantForHost(
      cmd.grant,
      cmd.grantId,
      { hostId: this.o.hostId, hostPublicKey: this.publicKey, verificationKeys: this.o.verificationKeys },
      this.o.placements,
      this.o.clock.wallMs(),
    );
    if (!c.ok) return this.refuse(cmd.grantId, c.code, c.reason);
    const g = c.grant;
    const client = canonicalIpv6(g.clientAddress);
    for (const a of this.applied.values()) {
      if (a.client === client && a.grant.clientPublicKey !== g.clientPublicKey)
        return this.refuse(g.grantId, "GRANT_MISMATCH", `client address ${client} belongs to another applied grant`);
      if (a.grant.clientPublicKey === g.clientPublicKey) await this.remove(a.grant.grantId); // a renewal replaces the older grant of the same key
    }
    const placementKey = c.placement.netns;
    let entry = this.links.get(placementKey);
    if (!entry) {
      const link = await this.o.links.open(c.placement, (packets) => this.outbound(placementKey, packets));
      entry = { target: c.placement, link, grants: new Set() };
      this.links.set(placementKey, entry);
    }
    const { peer } = this.t.mp.addPeer({
      publicKey: new Uint8Array(Buffer.from(g.clientPublicKey, "base64")),
      allowedIps: [`${client}/128`],
    });
    const applied: Applied = {
      grant: g,
      signature: cmd.grant.signature,
      placementKey,
      filter: new InnerFilter(g),
      peer,
      client,
      pathVersion: 0,
      relaysRejected: 0,
    };
    this.applied.set(g.grantId, applied);
    this.byPeer.set(peer, applied);
    this.attachRelays(applied, cmd);
    entry.grants.add(g.grantId);
    try {
      await entry.link.configure(this.flowsOf(entry));
    } catch (e) {
      await this.remove(g.grantId);
      return this.refuse(g.grantId, "NETWORK_SETUP_FAILED", (e as Error).message);
    }
    this.learnClientCandidates(applied, cmd.clientCandidates ?? []);
    this.t.arm();
    this.o.onChange?.();
    return { ok: true };
  }

  /**
   * The relays of an apply that pass their checks (a relay map signed by a
   * verification key and fresh; a host-role token for this grant and that
   * relay), in map order, handed to the tunnel for the grant's peer. A relay
   * that fails is not used and is counted; the grant itself stands (its
   * direct path does not depend on relays).
   */
  private attachRelays(a: Applied, cmd: ConfigureConnection): void {
    if (!this.o.relayConnector || !cmd.relayMap || !cmd.relayTokens) return;
    const now = this.o.clock.wallMs();
    const m = checkSignedRelayMap(cmd.relayMap, this.o.verificationKeys, now);
    if (!m.ok) {
      a.relaysRejected += Object.keys(cmd.relayTokens).length;
      return;
    }
    const relays: PeerRelay[] = [];
    for (const entry of m.payload.relays) {
      // Own keys only: a relay ID such as "constructor" must not read Object.prototype's member.
      const token = Object.hasOwn(cmd.relayTokens, entry.relayId) ? cmd.relayTokens[entry.relayId] : undefined;
      if (!token) continue;
      const c = checkSignedRelayToken(
        token,
        this.o.verificationKeys,
        { relayId: entry.relayId, grantId: a.grant.grantId, role: "host" },
        now,
      );
      if (c.ok) relays.push({ entry, token });
      else a.relaysRejected++;
    }
    this.t.attachRelays(a.peer, relays, (relayId) => `${relayId}/${a.grant.grantId}`);
  }

  /**
   * The client's candidates from the grant's Connection (spec "Coordination
   * and path selection"): they become the peer's candidates, and without a
   * session yet a handshake initiation goes to each of them (at most
   * MAX_CANDIDATES; the Device limits initiations to one per REKEY_TIMEOUT),
   * opening this host's NAT towards the client so the client's own
   * initiations get in: hole punching, rather than waiting to learn the
   * client by roaming.
   */
  private learnClientCandidates(a: Applied, list: readonly Candidate[]): void {
    const selector = this.t.selector(a.peer);
    if (!selector) return;
    selector.setCandidates(list);
    if (list.length > 0 && !a.peer.keypairs.current) this.t.mp.device.initiateHandshake(a.peer);
    this.t.arm();
  }

  private flowsOf(entry: LinkEntry) {
    return [...entry.grants].map((id) => this.applied.get(id)!.grant);
  }

  private async revoke(grantId: string): Promise<ConfigureResult> {
    this.revoked.add(grantId);
    if (this.revoked.size > MAX_REMEMBERED_REVOCATIONS) this.revoked.delete(this.revoked.values().next().value!);
    await this.remove(grantId);
    this.o.onChange?.();
    return { ok: true };
  }

  /** Drops a grant's peer and flows; closes its placement link when no grant uses it. */
  private async remove(grantId: string): Promise<void> {
    const a = this.applied.get(grantId);
    if (!a) return;
    this.applied.delete(grantId);
    this.byPeer.delete(a.peer);
    this.t.removePeer(a.peer);
    const entry = this.links.get(a.placementKey);
    if (!entry) return;
    entry.grants.delete(grantId);
    if (entry.grants.size === 0) {
      this.links.delete(a.placementKey);
      await entry.link.close();
    } else {
      await entry.link.configure(this.flowsOf(entry)).catch(() => {});
    }
  }

  /** A decrypted packet from a client: through its grant's filter into its grant's placement. */
  private inbound(packet: Uint8Array, peer: Peer<PathEndpoint>): void {
    const a = this.byPeer.get(peer);
    if (!a || a.grant.expiresAtMs <= this.o.clock.wallMs()) return;
    if (!a.filter.inbound(packet, this.o.clock.monoMs())) return;
    this.links.get(a.placementKey)?.link.write(packet);
  }

  /** Packets leaving a placement: each to the peer of the grant on that placement whose client address it targets. */
  private outbound(placementKey: string, packets: Uint8Array[]): void {
    const entry = this.links.get(placementKey);
    if (!entry) return;
    const now = this.o.clock.monoMs();
    for (const p of packets) {
      if (p.length < 40 || p[0]! >> 4 !== 6) continue;
      const dst = formatIpv6(p.subarray(24, 40));
      for (const id of entry.grants) {
        const a = this.applied.get(id);
        if (!a || a.client !== dst) continue;
        // The ring's view is reused after this call; the Device may stage the packet for a handshake.
        if (a.filter.outbound(p, now)) a.peer.send(Uint8Array.from(p));
        break;
      }
    }
    this.t.arm();
  }

  /** Removes every grant at or past its expiry (spec: "The host also removes expired peers on its own"). */
  private async expire(): Promise<void> {
    const now = this.o.clock.wallMs();
    const due = [...this.applied.values()].filter((a) => a.grant.expiresAtMs <= now).map((a) => a.grant.grantId);
    if (!due.length) return;
    const run = async () => {
      for (const id of due) await this.remove(id);
    };
    const p = this.queue.then(run, run);
    this.queue = p.catch(() => undefined);
    await p.catch(() => undefined);
    this.o.onChange?.();
  }

  /**
   * Removes every grant whose placement this host no longer runs, or runs at
   * another generation (spec "Revocation and replacement": a grant never
   * spans a replacement; the scheduler's revoke may come later). Call when
   * placements change. Never rejects.
   */
  async prune(): Promise<void> {
    const run = async () => {
      let removed = 0;
      for (const a of [...this.applied.values()]) {
        const p = this.o.placements.byAllocation(a.grant.allocationId);
        if (p && p.generation === a.grant.generation && p.netns === a.placementKey) continue;
        await this.remove(a.grant.grantId);
        removed++;
      }
      return removed;
    };
    const p = this.queue.then(run, run);
    this.queue = p.catch(() => undefined);
    if ((await p.catch(() => 0)) > 0) this.o.onChange?.();
  }

  /** Gathers local and STUN candidates again. Never rejects. */
  async refreshCandidates(): Promise<void> {
    this.nextRefreshMs = this.o.clock.monoMs() + CANDIDATE_REFRESH_MS;
    const interfaces = interfaceAddresses(this.o.interfaces, (message) => {
      if (message !== this.interfaceError)
        this.o.onWarning?.("host endpoint: interface enumeration failed", { error: message });
      this.interfaceError = message;
    });
    const next = await gatherCandidates(this.t.udp, this.o.listen.hostname, interfaces, this.o.stunServers);
    const changed = JSON.stringify(next) !== JSON.stringify(this.candidates);
    this.candidates = next;
    if (changed) this.o.onChange?.();
  }

  private nextExpiryMono(): number | null {
    let m: number | null = null;
    for (const a of this.applied.values()) if (m === null || a.grant.expiresAtMs < m) m = a.grant.expiresAtMs;
    return m === null ? null : this.o.clock.monoMs() + Math.max(0, m - this.o.clock.wallMs());
  }

  /** The endpoint's own next deadline (grant expiries, candidate refresh), folded into the tunnel's alarm. */
  private ownerDeadline(): number {
    const e = this.nextExpiryMono();
    return e === null ? this.nextRefreshMs : Math.min(e, this.nextRefreshMs);
  }

  /** The tunnel's alarm, after the Device's timers and probes. */
  private fire(): void {
    if (this.closed) return;
    // A pin lost in this alarm's probe round (no datagram announces it): report it now.
    for (const a of this.applied.values()) this.notePath(a.peer);
    void this.expire().then(() => this.t.arm());
    if (this.o.clock.monoMs() >= this.nextRefreshMs) void this.refreshCandidates().then(() => this.t.arm());
  }

  /** What a connectivity_update reports now (without `seq` and `at`, which the agent's session assigns). */
  connectivity(): Omit<ConnectivityUpdate, "seq" | "at"> {
    const grants: AppliedGrant[] = [...this.applied.values()].map((a) => {
      const s = this.t.selector(a.peer)?.state();
      const via =
        s?.path === "direct" ? s.direct : s?.path === "relay" && s.relay ? this.t.relays.relayIdOf(s.relay) : null;
      return {
        grantId: a.grant.grantId,
        allocationId: a.grant.allocationId,
        generation: a.grant.generation,
        expiresAtMs: a.grant.expiresAtMs,
        path: s?.path ?? "none",
        ...(via ? { via } : {}),
      };
    });
    return {
      hostPublicKey: this.publicKey,
      candidates: [...this.candidates],
      appliedGrants: grants,
      refusedGrants: [...this.refusals],
    };
  }

  /** Counters for tests and `bb agent doctor`. */
  stats() {
    return {
      device: this.t.mp.device.counters,
      socket: { ...this.t.udp.counters },
      grants: [...this.applied.values()].map(
        (a): GrantStats => ({
          grantId: a.grant.grantId,
          path: this.t.selector(a.peer)!.state(),
          candidates: this.t.selector(a.peer)!.candidateKeys(),
          filter: a.filter.counters,
          flows: a.filter.flowCount(this.o.clock.monoMs()),
          relaysRejected: a.relaysRejected,
        }),
      ),
      relays: this.t.relays.list(),
      links: [...this.links.entries()].map(([netns, e]) => ({ netns, grants: e.grants.size, ...e.link.stats() })),
    };
  }

  /** Removes every grant (closing links and relay sessions), stops the alarm and closes the socket. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.queue.catch(() => undefined);
    for (const id of [...this.applied.keys()]) await this.remove(id);
    this.t.close();
  }
}
