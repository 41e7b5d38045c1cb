/**
 * A Device whose peers are reachable over several paths at once (UDP
 * candidates and relays; spec "Coordination and path selection"), shared by
 * the host endpoint and the client proxy: one PathSelector per peer, the
 * check after each received datagram of which peer it authenticated for,
 * and per-candidate probes while no direct path is pinned.
 *
 * Owns: the Device<PathEndpoint>, the selectors, and the probe schedule
 * (deadlines on the clock port; the owner calls tickProbes()). A probe is a
 * WireGuard keepalive sealed separately for each candidate, so each copy
 * has its own counter and can authenticate on its own (a mirrored copy of
 * one datagram would be dropped as a replay wherever it arrives second).
 * Must never: throw from receive() or send paths (the Device drops and
 * counts), or probe a peer that has no session (the keepalive would start a
 * handshake; handshakes follow the Device's own timers).
 */
import type { Aead } from "./aead/aead.ts";
import { DROP_REASONS } from "./counters.ts";
import { Device, type Peer, type PeerOptions } from "./device.ts";
import type { WgLimits } from "./limits.ts";
import type { LoadPolicy } from "./load.ts";
import { PathSelector, unknownPath, type PathEndpoint, type PathIo } from "./paths.ts";
import type { WgClock, WgRandom } from "./ports.ts";

/** Options of a MultipathDevice. */
export interface MultipathOptions {
  privateKey: Uint8Array;
  clock: WgClock;
  random: WgRandom;
  aead: Aead;
  /** Where datagrams go (a shared UDP socket and the relay sessions). */
  io: PathIo;
  /** A decrypted, authenticated IP packet from `peer`. */
  deliver(packet: Uint8Array, peer: Peer<PathEndpoint>): void;
  /** Called when a peer's datagram from `from` authenticated (after the selector recorded it). */
  onAuthenticated?(peer: Peer<PathEndpoint>, from: PathEndpoint): void;
  load?: LoadPolicy;
  limits?: WgLimits;
}

/** The multipath Device. */
export class MultipathDevice {
  readonly device: Device<PathEndpoint>;
  private readonly selectors = new Map<Peer<PathEndpoint>, PathSelector>();
  private readonly nextProbe = new Map<Peer<PathEndpoint>, number>();
  private readonly lastPeerByKey = new Map<string, Peer<PathEndpoint>>();

  /** Throws only for a malformed private key. */
  constructor(private readonly o: MultipathOptions) {
    this.device = new Device<PathEndpoint>({
      privateKey: o.privateKey,
      clock: o.clock,
      random: o.random,
      aead: o.aead,
      io: {
        sendDatagram: (datagram, to, peer) => {
          if (peer) this.selectors.get(peer)?.send(datagram, to);
          else if (to.kind === "udp") o.io.sendUdp(datagram, to.address, to.port);
          else if (to.kind === "relay") o.io.sendRelay(to.relayId, datagram);
        },
        deliverPacket: (packet, peer) => o.deliver(packet, peer),
      },
      ...(o.load ? { load: o.load } : {}),
      ...(o.limits ? { limits: o.limits } : {}),
    });
  }

  /** Adds a peer with its own selector (candidates and relays set on the selector). Throws on malformed keys or prefixes. */
  addPeer(options: PeerOptions<PathEndpoint>): { peer: Peer<PathEndpoint>; selector: PathSelector } {
    const existing = this.device.peer(options.publicKey);
    if (existing) this.forget(existing);
    const selector = new PathSelector(this.o.io, this.o.clock);
    // Device.addPeer sends a keepalive at once when persistent keepalive is on, before the
    // selector could be found: add the peer without it, then turn it on.
    const peer = this.device.addPeer({ ...options, endpoint: options.endpoint ?? unknownPath(), persistentKeepaliveSec: 0 });
    this.selectors.set(peer, selector);
    this.nextProbe.set(peer, this.o.clock.nowMs());
    if (options.persistentKeepaliveSec) peer.timers.persistentKeepaliveMs = Math.max(0, options.persistentKeepaliveSec) * 1000;
    return { peer, selector };
  }

  /** Removes a peer and its selector. */
  removePeer(publicKey: Uint8Array): void {
    const p = this.device.peer(publicKey);
    if (p) this.forget(p);
    this.device.removePeer(publicKey);
  }

  private forget(p: Peer<PathEndpoint>): void {
    this.selectors.delete(p);
    this.nextProbe.delete(p);
    for (const [k, v] of this.lastPeerByKey) if (v === p) this.lastPeerByKey.delete(k);
  }

  /** The selector of `peer`. */
  selector(peer: Peer<PathEndpoint>): PathSelector | undefined {
    return this.selectors.get(peer);
  }

  /** A datagram from the transport. Never throws. */
  receive(datagram: Uint8Array, from: PathEndpoint): void {
    const before = this.dropTotal();
    this.device.receiveDatagram(datagram, from);
    if (this.dropTotal() !== before) return;
    let peer = this.lastPeerByKey.get(from.key);
    if (!peer || peer.endpoint !== from) {
      peer = undefined;
      for (const p of this.selectors.keys()) {
        if (p.endpoint === from) {
          peer = p;
          break;
        }
      }
      if (!peer) return;
      if (this.lastPeerByKey.size >= 4 * this.selectors.size + 16) this.lastPeerByKey.clear();
      this.lastPeerByKey.set(from.key, peer);
    }
    const selector = this.selectors.get(peer);
    if (selector) {
      selector.authenticated(from);
      // A session that came up over a relay: probe the candidates at once rather than a round later.
      if (from.kind === "relay" && selector.probeRounds === 0 && !selector.isDirect()) this.nextProbe.set(peer, this.o.clock.nowMs());
    }
    this.o.onAuthenticated?.(peer, from);
  }

  private dropTotal(): number {
    const d = this.device.counters.drops;
    let n = 0;
    for (const r of DROP_REASONS) n += d[r];
    return n;
  }

  /**
   * Sends each due peer's per-candidate probes (one keepalive per target)
   * when it has a session and no pinned direct path, and schedules its next
   * round. Never throws.
   */
  tickProbes(): void {
    const now = this.o.clock.nowMs();
    for (const [peer, selector] of this.selectors) {
      const due = this.nextProbe.get(peer) ?? now;
      if (due > now) continue;
      this.nextProbe.set(peer, now + selector.probeIntervalMs());
      if (selector.isDirect() || !peer.keypairs.current) continue;
      selector.probeRounds++;
      for (const target of selector.probeTargets()) selector.sendingOnlyTo(target, () => peer.sendKeepalive());
    }
  }

  /** The earliest probe deadline (monotonic ms), or null without peers. */
  nextProbeMs(): number | null {
    let m: number | null = null;
    for (const t of this.nextProbe.values()) if (m === null || t < m) m = t;
    return m;
  }

  /** The earliest of the Device's timers and the probe schedule. */
  nextDeadlineMs(): number | null {
    const a = this.device.nextDeadlineMs();
    const b = this.nextProbeMs();
    return a === null ? b : b === null ? a : Math.min(a, b);
  }

  /** Runs the Device's due timers and due probes. Never throws. */
  tick(): void {
    this.device.tick();
    try {
      this.tickProbes();
    } catch {
      this.device.counters.drops.internal++;
    }
  }
}
