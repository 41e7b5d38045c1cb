/**
 * The host's private-networking endpoint (spec "Data path", host side;
 * docs/adr/0157-host-endpoint-routing.md): one userspace WireGuard Device
 * on one UDP socket (WireGuard, STUN and direct-path checks share it), a
 * peer per applied grant with an inner filter, a link into each placement
 * that has grants, grants removed at their expiry without a command, and
 * candidates refreshed every 20 s.
 *
 * Owns: the applied grants (verified here: src/agent/endpoint/grantCheck.ts),
 * their peers, filters and links, the recently revoked grant IDs (a late
 * apply of one is refused), the recent refusals, and the one alarm that
 * drives the Device's timers, probes, expiries and candidate refreshes.
 * Inbound packets reach a placement only through the link of the grant's
 * own placement; outbound packets leave a placement only to a peer whose
 * grant names that placement and the packet's destination.
 * Must never: apply an unverified grant, keep a peer past its grant's
 * expiry, send the private key anywhere, or throw from a packet path.
 */
import type { AppliedGrant, ConfigureConnection, ConnectivityUpdate, GrantRefusalCode } from "../../protocol/agent.ts";
import { MAX_APPLIED_GRANTS, MAX_REPORTED_GRANT_REFUSALS } from "../../protocol/agent.ts";
import type { Candidate, GrantPayload } from "../../protocol/connection.ts";
import type { ConnectionVerificationKeys } from "../../protocol/connectionSignature.ts";
import { canonicalIpv6, formatIpv6 } from "../../protocol/ipAddress.ts";
import { MultipathDevice, openSharedSocket, type Aead, type KeyPair25519, type Peer, type PathEndpoint, type PathState, type SharedSocket, type WgClock, type WgRandom } from "../../wireguard/index.ts";
import { CANDIDATE_REFRESH_MS, localCandidates, mergeCandidates, stunCandidates, type StunServer } from "./candidates.ts";
import { checkGrantForHost, type PlacementLookup, type PlacementTarget } from "./grantCheck.ts";
import { InnerFilter, type FilterCounters } from "./innerFilter.ts";
import type { PlacementLink, PlacementLinkPort } from "./placementLink.ts";

/** Revoked grant IDs remembered so a late apply is refused (older ones are forgotten; their grants expire anyway). */
export const MAX_REMEMBERED_REVOCATIONS = 4096;
/** Longest single alarm sleep, ms. */
const MAX_ALARM_MS = 60_000;

/** Everything an endpoint is built from (ports for every side effect). */
export interface HostEndpointOptions {
  hostId: string;
  /** The host's X25519 key pair (src/agent/endpoint/hostKey.ts). */
  keyPair: KeyPair25519;
  verificationKeys: ConnectionVerificationKeys;
  /** Where the shared UDP socket binds (default port: DEFAULT_ENDPOINT_PORT). */
  listen: { hostname: string; port: number };
  stunServers: readonly StunServer[];
  clock: WgClock;
  random: WgRandom;
  aead: Aead;
  placements: PlacementLookup;
  links: PlacementLinkPort;
  /** The interface list for local candidates (os.networkInterfaces in production). */
  interfaces: () => NodeJS.Dict<import("node:os").NetworkInterfaceInfo[]>;
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
  filter: FilterCounters;
  flows: number;
}

/** The running endpoint. */
export class HostEndpoint {
  private readonly applied = new Map<string, Applied>();
  private readonly byPeer = new Map<Peer<PathEndpoint>, Applied>();
  private readonly links = new Map<string, LinkEntry>();
  private readonly revoked = new Set<string>();
  private refusals: Array<{ grantId: string; code: GrantRefusalCode }> = [];
  private candidates: Candidate[] = [];
  private nextRefreshMs = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;
  private readonly mp: MultipathDevice;
  private socket!: SharedSocket;
  /** Standard base64 of the endpoint's public key (reported; the private key never leaves). */
  readonly publicKey: string;

  private constructor(private readonly o: HostEndpointOptions) {
    this.publicKey = Buffer.from(o.keyPair.publicKey).toString("base64");
    this.mp = new MultipathDevice({
      privateKey: o.keyPair.privateKey,
      clock: o.clock,
      random: o.random,
      aead: o.aead,
      io: {
        sendUdp: (d, address, port) => this.socket?.sendUdp(d, address, port),
        sendRelay: () => false,
      },
      deliver: (packet, peer) => this.inbound(packet, peer),
      onAuthenticated: (peer) => {
        const a = this.byPeer.get(peer);
        const v = this.mp.selector(peer)?.changes ?? 0;
        if (a && a.pathVersion !== v) {
          a.pathVersion = v;
          this.o.onChange?.();
        }
      },
    });
  }

  /** Binds the socket, gathers candidates once and starts the alarm. Rejects when the socket cannot be bound. */
  static async start(o: HostEndpointOptions): Promise<HostEndpoint> {
    const e = new HostEndpoint(o);
    e.socket = await openSharedSocket({
      hostname: o.listen.hostname,
      port: o.listen.port,
      random: o.random,
      onWireGuard: (d, from) => {
        e.mp.receive(d, from);
        e.arm();
      },
    });
    await e.refreshCandidates();
    e.arm();
    return e;
  }

  /** The bound UDP port. */
  get port(): number {
    return this.socket.port;
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
    if (this.refusals.length > MAX_REPORTED_GRANT_REFUSALS) this.refusals = this.refusals.slice(-MAX_REPORTED_GRANT_REFUSALS);
    this.o.onChange?.();
    return { ok: false, code, reason };
  }

  private async apply(cmd: ConfigureConnection): Promise<ConfigureResult> {
    if (this.closed) return this.refuse(cmd.grantId, "NETWORK_SETUP_FAILED", "the endpoint is closed");
    if (!cmd.grant) return this.refuse(cmd.grantId, "GRANT_SIGNATURE_INVALID", "configure_connection apply carries no grant");
    if (this.revoked.has(cmd.grantId)) return this.refuse(cmd.grantId, "GRANT_REVOKED", `grant ${cmd.grantId} was revoked`);
    const existing = this.applied.get(cmd.grantId);
    if (existing) {
      if (existing.signature !== cmd.grant.signature) return this.refuse(cmd.grantId, "GRANT_MISMATCH", `grant ${cmd.grantId} is applied with other content`);
      if (cmd.clientCandidates) this.learnClientCandidates(existing, cmd.clientCandidates);
      return { ok: true };
    }
    if (this.applied.size >= MAX_APPLIED_GRANTS) return this.refuse(cmd.grantId, "RATE_LIMITED", `this host holds ${MAX_APPLIED_GRANTS} grants`);
    const c = checkGrantForHost(cmd.grant, cmd.grantId, { hostId: this.o.hostId, hostPublicKey: this.publicKey, verificationKeys: this.o.verificationKeys }, this.o.placements, this.o.clock.wallMs());
    if (!c.ok) return this.refuse(cmd.grantId, c.code, c.reason);
    const g = c.grant;
    const client = canonicalIpv6(g.clientAddress);
    for (const a of this.applied.values()) {
      if (a.client === client && a.grant.clientPublicKey !== g.clientPublicKey) return this.refuse(g.grantId, "GRANT_MISMATCH", `client address ${client} belongs to another applied grant`);
      if (a.grant.clientPublicKey === g.clientPublicKey) await this.remove(a.grant.grantId); // a renewal replaces the older grant of the same key
    }
    const placementKey = c.placement.netns;
    let entry = this.links.get(placementKey);
    if (!entry) {
      const link = await this.o.links.open(c.placement, (packets) => this.outbound(placementKey, packets));
      entry = { target: c.placement, link, grants: new Set() };
      this.links.set(placementKey, entry);
    }
    const { peer } = this.mp.addPeer({ publicKey: new Uint8Array(Buffer.from(g.clientPublicKey, "base64")), allowedIps: [`${client}/128`] });
    const applied: Applied = { grant: g, signature: cmd.grant.signature, placementKey, filter: new InnerFilter(g), peer, client, pathVersion: 0 };
    this.applied.set(g.grantId, applied);
    this.byPeer.set(peer, applied);
    entry.grants.add(g.grantId);
    try {
      await entry.link.configure(this.flowsOf(entry));
    } catch (e) {
      await this.remove(g.grantId);
      return this.refuse(g.grantId, "NETWORK_SETUP_FAILED", (e as Error).message);
    }
    this.learnClientCandidates(applied, cmd.clientCandidates ?? []);
    this.arm();
    this.o.onChange?.();
    return { ok: true };
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
    const selector = this.mp.selector(a.peer);
    if (!selector) return;
    selector.setCandidates(list);
    if (list.length > 0 && !a.peer.keypairs.current) this.mp.device.initiateHandshake(a.peer);
    this.arm();
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
    this.mp.removePeer(a.peer.remote.publicKey);
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
    if (!a.filter.inbound(packet, this.o.clock.nowMs())) return;
    this.links.get(a.placementKey)?.link.write(packet);
  }

  /** Packets leaving a placement: each to the peer of the grant on that placement whose client address it targets. */
  private outbound(placementKey: string, packets: Uint8Array[]): void {
    const entry = this.links.get(placementKey);
    if (!entry) return;
    const now = this.o.clock.nowMs();
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
    this.arm();
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
    this.nextRefreshMs = this.o.clock.nowMs() + CANDIDATE_REFRESH_MS;
    const local = localCandidates(this.o.listen.hostname, this.socket.port, this.o.interfaces());
    const stun = await stunCandidates(this.o.stunServers, (s) => this.socket.stunBinding(s)).catch(() => []);
    const next = mergeCandidates(stun, local);
    const changed = JSON.stringify(next) !== JSON.stringify(this.candidates);
    this.candidates = next;
    if (changed) this.o.onChange?.();
  }

  private nextExpiryMono(): number | null {
    let m: number | null = null;
    for (const a of this.applied.values()) if (m === null || a.grant.expiresAtMs < m) m = a.grant.expiresAtMs;
    return m === null ? null : this.o.clock.nowMs() + Math.max(0, m - this.o.clock.wallMs());
  }

  /** Re-arms the one alarm to the earliest deadline. */
  private arm(): void {
    if (this.closed) return;
    const now = this.o.clock.nowMs();
    const next = Math.min(...[this.mp.nextDeadlineMs(), this.nextExpiryMono(), this.nextRefreshMs].filter((x): x is number => x !== null));
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => this.fire(), Math.ceil(Math.min(MAX_ALARM_MS, Math.max(0, next - now))));
  }

  private fire(): void {
    this.timer = null;
    if (this.closed) return;
    this.mp.tick();
    void this.expire().then(() => this.arm());
    if (this.o.clock.nowMs() >= this.nextRefreshMs) void this.refreshCandidates().then(() => this.arm());
    this.arm();
  }

  /** What a connectivity_update reports now (without `seq` and `at`, which the agent's session assigns). */
  connectivity(): Omit<ConnectivityUpdate, "seq" | "at"> {
    const grants: AppliedGrant[] = [...this.applied.values()].map((a) => {
      const s = this.mp.selector(a.peer)?.state();
      const via = s?.path === "direct" ? s.direct : s?.path === "relay" ? s.relay : null;
      return { grantId: a.grant.grantId, allocationId: a.grant.allocationId, generation: a.grant.generation, expiresAtMs: a.grant.expiresAtMs, path: s?.path ?? "none", ...(via ? { via } : {}) };
    });
    return { hostPublicKey: this.publicKey, candidates: [...this.candidates], appliedGrants: grants, refusedGrants: [...this.refusals] };
  }

  /** Counters for tests and `bb agent doctor`. */
  stats() {
    return {
      device: this.mp.device.counters,
      socket: { ...this.socket.counters },
      grants: [...this.applied.values()].map((a): GrantStats => ({ grantId: a.grant.grantId, path: this.mp.selector(a.peer)!.state(), filter: a.filter.counters, flows: a.filter.flowCount(this.o.clock.nowMs()) })),
      links: [...this.links.entries()].map(([netns, e]) => ({ netns, grants: e.grants.size, ...e.link.stats() })),
    };
  }

  /** Removes every grant (closing links), stops the alarm and closes the socket. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.queue.catch(() => undefined);
    for (const id of [...this.applied.keys()]) await this.remove(id);
    this.socket.close();
  }
}
