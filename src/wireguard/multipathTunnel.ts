/**
 * The one construction of a multipath tunnel, shared by the host endpoint
 * (src/agent/endpoint/endpoint.ts) and the client proxy
 * (src/proxy/tunnel.ts): a MultipathDevice on one shared UDP socket
 * (WireGuard, STUN and direct-path probes; spec "Data path"), the relay
 * sessions of its peers (src/wireguard/relaySessions.ts), and the one alarm
 * that drives the Device's timers and probes plus whatever deadline the
 * owner adds.
 *
 * A datagram from the socket enters the Device from its UDP source; one
 * from a relay session enters from that session's relay path, so the
 * selector (src/wireguard/paths.ts) sees both kinds of source and the Device
 * sees one peer: moving between relay and direct changes only the transport
 * address, and inner connections survive it.
 *
 * Owns: the socket, the Device, the relay session table and the alarm.
 * Must never: keep a timer, socket or relay connection after close(), or
 * throw from a receive path.
 */
import type { RelayEntry, SignedRelayToken } from "../protocol/connection.ts";
import type { Aead } from "./aead/aead.ts";
import type { Peer } from "./device.ts";
import type { LoadPolicy } from "./load.ts";
import { MultipathDevice } from "./multipath.ts";
import { relayPath, type PathEndpoint, type PathSelector } from "./paths.ts";
import type { WgRandom } from "./ports.ts";
import { MAX_RELAYS_PER_PEER, RelaySessions, type RelayConnector, type RelaySessionInfo } from "./relaySessions.ts";
import { openSharedSocket, type SharedSocket } from "./sharedSocket.ts";
import { SUSPEND_RECHECK_MS } from "./suspendClock.ts";
import type { Clock } from "../protocol/clock.ts";

/** Longest single alarm sleep, ms: a suspend is noticed within it (suspendClock.ts). */
export const MAX_ALARM_MS = SUSPEND_RECHECK_MS;

/** Options of MultipathTunnel.open. */
export interface MultipathTunnelOptions {
  privateKey: Uint8Array;
  clock: Clock;
  random: WgRandom;
  aead: Aead;
  /** Where the shared UDP socket binds (port 0 picks one). */
  listen: { hostname: string; port: number };
  /** Opens relay connections; without it relays are never used. */
  relayConnector?: RelayConnector;
  /** A decrypted, authenticated IP packet from `peer`. */
  deliver(packet: Uint8Array, peer: Peer<PathEndpoint>): void;
  /** A peer's datagram from `from` authenticated (after its selector recorded it). */
  onAuthenticated?(peer: Peer<PathEndpoint>, from: PathEndpoint): void;
  /** A relay session opened, dropped or gave up. */
  onRelayChange?(info: RelaySessionInfo): void;
  /** The owner's own next deadline (monotonic ms), folded into the alarm. */
  ownerDeadlineMs?(): number | null;
  /** Runs at each alarm after the Device's timers and probes. Must not throw. */
  onAlarm?(): void;
  load?: LoadPolicy;
}

/** One relay a peer may be reached through: the map entry and this role's token for it. */
export interface PeerRelay {
  entry: RelayEntry;
  token: SignedRelayToken;
}

/** The running tunnel. */
export class MultipathTunnel {
  readonly mp: MultipathDevice;
  readonly relays: RelaySessions;
  private socket!: SharedSocket;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  private readonly peerRelays = new Map<Peer<PathEndpoint>, string[]>();

  private constructor(private readonly o: MultipathTunnelOptions) {
    this.mp = new MultipathDevice({
      privateKey: o.privateKey,
      clock: o.clock,
      random: o.random,
      aead: o.aead,
      io: {
        sendUdp: (d, address, port) => this.socket?.sendUdp(d, address, port),
        sendRelay: (pathId, d) => this.relays.send(pathId, d),
      },
      deliver: (packet, peer) => o.deliver(packet, peer),
      ...(o.onAuthenticated ? { onAuthenticated: (peer, from) => o.onAuthenticated!(peer, from) } : {}),
      ...(o.load ? { load: o.load } : {}),
    });
    this.relays = new RelaySessions({
      connect: o.relayConnector ?? (() => Promise.reject(new Error("no relay connector"))),
      onDatagram: (pathId, d) => {
        if (this.closed) return;
        this.mp.receive(d, relayPath(pathId));
        this.arm();
      },
      ...(o.onRelayChange ? { onChange: (i: RelaySessionInfo) => o.onRelayChange!(i) } : {}),
      random: o.random,
      clock: o.clock,
    });
  }

  /** Binds the socket and starts the alarm. Rejects when the socket cannot be bound. */
  static async open(o: MultipathTunnelOptions): Promise<MultipathTunnel> {
    const t = new MultipathTunnel(o);
    t.socket = await openSharedSocket({
      hostname: o.listen.hostname,
      port: o.listen.port,
      random: o.random,
      onWireGuard: (d, from) => {
        t.mp.receive(d, from);
        t.arm();
      },
    });
    t.arm();
    return t;
  }

  /** The shared socket (STUN bindings, counters). */
  get udp(): SharedSocket {
    return this.socket;
  }

  /**
   * Opens a relay session per relay for `peer` (at most MAX_RELAYS_PER_PEER,
   * in map order) under path IDs made by `pathIdOf`, and points the peer's
   * selector at them. A peer already holding sessions keeps them and gets
   * the fresh tokens. No-op without a relay connector.
   */
  attachRelays(peer: Peer<PathEndpoint>, relays: readonly PeerRelay[], pathIdOf: (relayId: string) => string): void {
    if (!this.o.relayConnector || this.closed) return;
    const ids: string[] = [];
    for (const r of relays.slice(0, MAX_RELAYS_PER_PEER)) {
      const id = pathIdOf(r.entry.relayId);
      if (this.relays.open(id, r.entry, r.token)) ids.push(id);
    }
    const old = this.peerRelays.get(peer) ?? [];
    for (const id of old) if (!ids.includes(id)) this.relays.close(id);
    this.peerRelays.set(peer, ids);
    this.mp.selector(peer)?.setRelays(ids);
  }

  /** Removes `peer` from the Device and closes its relay sessions. */
  removePeer(peer: Peer<PathEndpoint>): void {
    for (const id of this.peerRelays.get(peer) ?? []) this.relays.close(id);
    this.peerRelays.delete(peer);
    this.mp.removePeer(peer.remote.publicKey);
  }

  /** The selector of `peer`. */
  selector(peer: Peer<PathEndpoint>): PathSelector | undefined {
    return this.mp.selector(peer);
  }

  /** Re-arms the one alarm to the earliest of the Device's and the owner's deadlines. */
  arm(): void {
    if (this.closed) return;
    const now = this.o.clock.monoMs();
    const cands = [this.mp.nextDeadlineMs(), this.o.ownerDeadlineMs?.() ?? null].filter((x): x is number => x !== null);
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (!cands.length) return;
    this.timer = setTimeout(
      () => this.fire(),
      Math.ceil(Math.min(MAX_ALARM_MS, Math.max(0, Math.min(...cands) - now))),
    );
  }

  private fire(): void {
    this.timer = null;
    if (this.closed) return;
    this.mp.tick();
    try {
      this.o.onAlarm?.();
    } catch {
      this.mp.device.counters.drops.internal++;
    }
    this.arm();
  }

  /** Stops the alarm, closes every relay session and the socket. Peers stay in the Device (the owner removes them first if it cares). Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.relays.closeAll();
    this.peerRelays.clear();
    this.socket?.close();
  }
}
