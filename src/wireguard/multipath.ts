/**
 * A Device whose peers are reachable over several paths at once (UDP
 * candidates and relays; spec "Coordination and path selection"), shared by
 * the host endpoint and the client proxy: one PathSelector per peer, the
 * check after each received datagram of which peer it authenticated for,
 * and path probes (src/wireguard/pathProbe.ts): to every candidate while no
 * direct path is pinned, to the pin while one is; each answered by an ack
 * sent only back where the probe came from (docs/adr/0158-proxy-paths.md).
 *
 * Owns: the Device<PathEndpoint>, the selectors, the probe schedule
 * (deadlines on the clock port; the owner calls tickProbes()) and the ack
 * budget. A probe is sealed separately for each target, so each copy has
 * its own counter and nonce and can authenticate on its own (a mirrored copy
 * of one datagram would be dropped as a replay wherever it arrives second).
 * Must never: throw from receive() or send paths (the Device drops and
 * counts), probe a peer that has no session (handshakes follow the Device's
 * own timers), or send more than MAX_ACKS_PER_SECOND acks per peer.
 */
import type { Aead } from "./aead/aead.ts";
import { DROP_REASONS } from "./counters.ts";
import { Device, type Peer, type PeerOptions } from "./device.ts";
import type { WgLimits } from "./limits.ts";
import type { LoadPolicy } from "./load.ts";
import { encodePathControl, PATH_ACK, PATH_PROBE, type PathControl } from "./pathProbe.ts";
import { PathSelector, unknownPath, type PathEndpoint, type PathIo } from "./paths.ts";
import type { WgRandom } from "./ports.ts";
import type { Clock } from "../protocol/clock.ts";

/** Most path acks a peer is sent per second (a peer controls how many probes it sends; ours send at most MAX_PATH_CANDIDATES + MAX_LEARNED_SOURCES a second). */
export const MAX_ACKS_PER_SECOND = 32;

/** Options of a MultipathDevice. */
export interface MultipathOptions {
  privateKey: Uint8Array;
  clock: Clock;
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
  private readonly ackBudget = new Map<Peer<PathEndpoint>, { windowMs: number; sent: number }>();
  /** Acks sent, and probes left unanswered because a peer exceeded MAX_ACKS_PER_SECOND. */
  readonly probeCounters = { acksSent: 0, acksRefused: 0 };

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
        deliverControl: (message, peer, from) => this.control(message, peer, from),
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
    const peer = this.device.addPeer({
      ...options,
      endpoint: options.endpoint ?? unknownPath(),
      persistentKeepaliveSec: 0,
    });
    this.selectors.set(peer, selector);
    this.nextProbe.set(peer, this.o.clock.monoMs());
    if (options.persistentKeepaliveSec)
      peer.timers.persistentKeepaliveMs = Math.max(0, options.persistentKeepaliveSec) * 1000;
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
    this.ackBudget.delete(p);
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
      // A session that came up (or a pin just lost): probe at once rather than a round later.
      if (selector.probeRounds === 0 && !selector.isDirect()) this.nextProbe.set(peer, this.o.clock.monoMs());
    }
    this.o.onAuthenticated?.(peer, from);
  }

  /** A path probe (answered with an ack to exactly where it came from, within the peer's budget) or an ack (to the peer's selector). */
  private control(message: PathControl, peer: Peer<PathEndpoint>, from: PathEndpoint): void {
    const selector = this.selectors.get(peer);
    if (!selector) return;
    if (message.kind === PATH_ACK) {
      selector.acked(from, message.nonce);
      return;
    }
    if (from.kind === "unknown") return;
    const now = this.o.clock.monoMs();
    let b = this.ackBudget.get(peer);
    if (!b || now - b.windowMs >= 1_000) this.ackBudget.set(peer, (b = { windowMs: now, sent: 0 }));
    if (b.sent >= MAX_ACKS_PER_SECOND) {
      this.probeCounters.acksRefused++;
      return;
    }
    b.sent++;
    selector.sendingOnlyTo(from, () => {
      if (peer.sendControl(encodePathControl(PATH_ACK, message.nonce))) this.probeCounters.acksSent++;
    });
  }

  private dropTotal(): number {
    const d = this.device.counters.drops;
    let n = 0;
    for (const r of DROP_REASONS) n += d[r];
    return n;
  }

  /**
   * Sends each due peer's path probes (one per target: every candidate and
   * learnt source while unpinned, the pin while pinned) when it has a
   * session, and schedules its next round. Never throws.
   */
  tickProbes(): void {
    const now = this.o.clock.monoMs();
    for (const [peer, selector] of this.selectors) {
      const direct = selector.isDirect();
      const due = this.nextProbe.get(peer) ?? now;
      // Unpinned with no round since the session came up or the pin was lost (just now, perhaps): probe at once.
      if (due > now && (direct || selector.probeRounds !== 0)) continue;
      this.nextProbe.set(peer, now + selector.probeIntervalMs());
      if (!peer.keypairs.current) continue;
      if (!direct) selector.probeRounds++;
      for (const target of selector.probeTargets()) {
        const nonce = Buffer.from(this.o.random.fill(new Uint8Array(8))).toString("hex");
        selector.probeSent(target, nonce);
        selector.sendingOnlyTo(target, () => peer.sendControl(encodePathControl(PATH_PROBE, nonce)));
      }
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
