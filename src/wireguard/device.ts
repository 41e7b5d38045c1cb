/**
 * A transport-agnostic WireGuard Device (whitepaper §2 cryptokey routing,
 * §5 protocol, §6 timers): datagrams in from any transport, IP packets in
 * from the application; datagrams and decrypted IP packets out through the
 * DeviceIo port. Time and randomness come from ports, so the same code runs
 * over UDP, a relay, or an in-memory pipe on a fake clock.
 *
 * Owns: the static identity, the peers (by public key), cryptokey routing,
 * the session index table, mac1/mac2 and cookie replies under load, drop
 * counters, and the earliest timer deadline (the caller re-arms one alarm
 * from nextDeadlineMs() and calls tick()).
 * Must never: throw from receiveDatagram, sendPacket or tick (bad input is
 * dropped and counted by reason; an unexpected exception counts as
 * "internal"), or deliver a packet that did not authenticate.
 */
import type { Aead } from "./aead/aead.ts";
import { AllowedIps } from "./allowedIps.ts";
import { decodeMessage, type CookieReply, type Initiation, type Response, type Transport } from "./codec.ts";
import {
  MAX_PACKET_BYTES,
  MESSAGE_COOKIE_REPLY,
  MESSAGE_INITIATION,
  MESSAGE_RESPONSE,
  MESSAGE_TRANSPORT,
} from "./constants.ts";
import { CookieChecker } from "./cookie.ts";
import { newCounters, type DeviceCounters, type DropReason } from "./counters.ts";
import { equalBytes } from "./hash.ts";
import { IndexTable } from "./indexTable.ts";
import { parseIpHeader } from "./ipPacket.ts";
import { DEFAULT_LIMITS, type WgLimits } from "./limits.ts";
import { HandshakeLoadMeter, type LoadPolicy } from "./load.ts";
import {
  DEFAULT_HANDSHAKE_RATE_LIMITS,
  rateLimitSource,
  SourceRateLimiter,
  TokenBucket,
  type HandshakeRateLimits,
} from "./ratelimit.ts";
import {
  consumeInitiation,
  consumeResponse,
  localStatic,
  remoteStatic,
  type NoiseContext,
  type RemoteStatic,
} from "./noise.ts";
import { Peer, type Endpoint, type PeerHost } from "./peer.ts";
import type { PathControl } from "./pathProbe.ts";
import type { WgRandom } from "./ports.ts";
import { keyPairFromPrivate } from "./x25519.ts";
import type { Clock } from "../protocol/clock.ts";

export type { Endpoint } from "./peer.ts";
export { Peer } from "./peer.ts";

/** Where a Device's output goes. Implementations must not call back into the Device synchronously. */
export interface DeviceIo<E extends Endpoint> {
  /** Sends `datagram` to `to`; `peer` is null for cookie replies to unauthenticated sources. */
  sendDatagram(datagram: Uint8Array, to: E, peer: Peer<E> | null): void;
  /** A decrypted, authenticated IP packet from `peer` (padding removed, source checked against its allowed IPs). */
  deliverPacket(packet: Uint8Array, peer: Peer<E>): void;
  /** An authenticated path probe or ack (src/wireguard/pathProbe.ts) from `peer`, arrived from `from`. Without it such a plaintext is dropped as "invalid-ip-packet". */
  deliverControl?(message: PathControl, peer: Peer<E>, from: E): void;
}

/** Everything a Device is built from. */
export interface DeviceOptions<E extends Endpoint> {
  /** This Device's Curve25519 private key (32 bytes). */
  privateKey: Uint8Array;
  clock: Clock;
  random: WgRandom;
  aead: Aead;
  io: DeviceIo<E>;
  /** When cookies are demanded; default HandshakeLoadMeter (200 handshake messages per second). */
  load?: LoadPolicy;
  /** Protocol limits; default DEFAULT_LIMITS (whitepaper §6.1). Tests may shorten one and must say so. */
  limits?: WgLimits;
  /** Ceilings on cookie replies and handshake work under load; default DEFAULT_HANDSHAKE_RATE_LIMITS (ratelimit.ts). Tests and bench/ may change them and must say so. */
  rateLimits?: HandshakeRateLimits;
}

/** One peer's configuration (as `wg set … peer`). */
export interface PeerOptions<E extends Endpoint> {
  /** The peer's Curve25519 public key (32 bytes). */
  publicKey: Uint8Array;
  /** Optional pre-shared key (32 bytes, whitepaper §5.2). */
  presharedKey?: Uint8Array;
  /** Initial endpoint; it then follows the peer's authenticated datagrams. */
  endpoint?: E | null;
  /** Prefixes routed to this peer and accepted as sources from it, e.g. ["10.0.0.2/32", "fd00::2/128"]. */
  allowedIps?: string[];
  /** Persistent keepalive interval in seconds (0 or absent: off). */
  persistentKeepaliveSec?: number;
}

const keyId = (k: Uint8Array) => Buffer.from(k).toString("base64");

/** The Device. */
export class Device<E extends Endpoint> {
  /** Counters by kind and drop reason (never reset by the Device). */
  readonly counters: DeviceCounters = newCounters();
  /** This Device's public key (32 bytes). */
  readonly publicKey: Uint8Array;
  private readonly peers = new Map<string, Peer<E>>();
  private readonly routes = new AllowedIps<Peer<E>>();
  private readonly host: PeerHost<E>;
  private readonly noise: NoiseContext;
  private readonly checker: CookieChecker;
  private readonly load: LoadPolicy;
  private readonly handshakeLimiter: SourceRateLimiter;
  private readonly cookieLimiter: SourceRateLimiter;
  private readonly mac1Budget: TokenBucket;

  /** Throws only on a malformed private key (local configuration). */
  constructor(private readonly opts: DeviceOptions<E>) {
    const keyPair = keyPairFromPrivate(opts.privateKey);
    this.publicKey = keyPair.publicKey;
    this.noise = { aead: opts.aead, random: opts.random, local: localStatic(keyPair) };
    this.checker = new CookieChecker(keyPair.publicKey, opts.clock, opts.random, opts.aead);
    this.load = opts.load ?? new HandshakeLoadMeter();
    const rl = opts.rateLimits ?? DEFAULT_HANDSHAKE_RATE_LIMITS;
    this.handshakeLimiter = new SourceRateLimiter(rl.handshakesPerSource, rl.handshakes, rl.maxSources);
    this.cookieLimiter = new SourceRateLimiter(rl.cookieRepliesPerSource, rl.cookieReplies, rl.maxSources);
    this.mac1Budget = new TokenBucket(rl.mac1Checks, opts.clock.monoMs());
    const counters = this.counters;
    this.host = {
      clock: opts.clock,
      random: opts.random,
      aead: opts.aead,
      noise: this.noise,
      limits: opts.limits ?? DEFAULT_LIMITS,
      counters,
      indices: new IndexTable<Peer<E>>(opts.random),
      transmit: (datagram, to, peer) => this.transmit(datagram, to, peer),
      deliver: (peer, packet) => {
        counters.packetsDelivered++;
        opts.io.deliverPacket(packet, peer);
      },
      routeOf: (bytes, offset, version) => this.routes.lookupIn(bytes, offset, version),
      drop: (reason) => this.drop(reason),
      ...(opts.io.deliverControl
        ? { control: (peer: Peer<E>, message: PathControl, from: E) => opts.io.deliverControl!(message, peer, from) }
        : {}),
    };
  }

  /** Adds a peer (or replaces the one with the same public key). Throws on malformed keys or prefixes (local configuration). */
  addPeer(o: PeerOptions<E>): Peer<E> {
    const remote: RemoteStatic = remoteStatic(this.noise.local, o.publicKey, o.presharedKey);
    if (equalBytes(remote.publicKey, this.publicKey))
      throw new Error("a peer cannot have this Device's own public key");
    this.removePeer(o.publicKey);
    const peer = new Peer<E>(this.host, remote, o.endpoint ?? null, Math.max(0, o.persistentKeepaliveSec ?? 0) * 1000);
    for (const cidr of o.allowedIps ?? []) this.routes.insert(cidr, peer);
    this.peers.set(keyId(remote.publicKey), peer);
    if (peer.timers.persistentKeepaliveMs > 0) peer.sendKeepalive();
    return peer;
  }

  /** Removes a peer: its sessions, routes, timers and staged packets. */
  removePeer(publicKey: Uint8Array): void {
    const p = this.peers.get(keyId(publicKey));
    if (!p) return;
    p.remove();
    this.routes.removePeer(p);
    this.peers.delete(keyId(publicKey));
  }

  /** The peer with this public key, if configured. */
  peer(publicKey: Uint8Array): Peer<E> | undefined {
    return this.peers.get(keyId(publicKey));
  }

  /** All peers. */
  allPeers(): Peer<E>[] {
    return [...this.peers.values()];
  }

  /** The peer that `address` (4 or 16 bytes) routes to. */
  route(address: Uint8Array): Peer<E> | null {
    return this.routes.lookup(address);
  }

  /** An IP packet from the application: routed by destination to a peer and sealed (or staged for a handshake). Never throws. */
  sendPacket(packet: Uint8Array): void {
    try {
      const ip = packet.length <= MAX_PACKET_BYTES ? parseIpHeader(packet) : null;
      if (!ip) return this.drop("packet-invalid");
      const peer = this.routes.lookupIn(packet, ip.destinationOffset, ip.version);
      if (!peer) return this.drop("no-route");
      peer.send(ip.length === packet.length ? packet : packet.subarray(0, ip.length));
    } catch {
      this.drop("internal");
    }
  }

  /** A datagram from the transport, with its source. Never throws. */
  receiveDatagram(datagram: Uint8Array, from: E): void {
    this.counters.datagramsReceived++;
    this.counters.bytesReceived += datagram.length;
    try {
      const d = decodeMessage(datagram);
      if (!d.ok) return this.drop("malformed");
      const m = d.message;
      switch (m.type) {
        case MESSAGE_INITIATION:
          return this.receiveInitiation(m, datagram, from);
        case MESSAGE_RESPONSE:
          return this.receiveResponse(m, datagram, from);
        case MESSAGE_COOKIE_REPLY:
          return this.receiveCookieReply(m);
        case MESSAGE_TRANSPORT:
          return this.receiveTransport(m, datagram, from);
      }
    } catch {
      this.drop("internal");
    }
  }

  /** Runs every peer's expired timers. Never throws. */
  tick(): void {
    for (const p of this.peers.values()) {
      try {
        p.tick();
      } catch {
        this.drop("internal");
      }
    }
  }

  /** The earliest timer deadline of any peer (monotonic ms), or null when no timer is set. */
  nextDeadlineMs(): number | null {
    let m: number | null = null;
    for (const p of this.peers.values()) {
      const d = p.timers.earliest();
      if (d !== null && (m === null || d < m)) m = d;
    }
    return m;
  }

  /** Starts a handshake with `peer` now (subject to the REKEY_TIMEOUT rate limit). */
  initiateHandshake(peer: Peer<E>): void {
    try {
      peer.sendInitiation(false);
    } catch {
      this.drop("internal");
    }
  }

  private drop(reason: DropReason): void {
    this.counters.drops[reason]++;
  }

  private transmit(datagram: Uint8Array, to: E | null, peer: Peer<E> | null): void {
    if (!to) return this.drop("no-endpoint");
    this.counters.datagramsSent++;
    this.counters.bytesSent += datagram.length;
    this.opts.io.sendDatagram(datagram, to, peer);
  }

  /**
   * The mac1-check budget, mac1, then under load mac2 (else a cookie reply,
   * within the cookie-reply limits) and the handshake limits (whitepaper §5.3; ratelimit.ts). Limits
   * count per source address (rateLimitSource: port ignored, IPv6 by /64).
   * `sender` is the index a cookie reply goes to.
   */
  private admitHandshake(datagram: Uint8Array, sender: number, from: E): boolean {
    const now = this.opts.clock.monoMs();
    if (!this.mac1Budget.take(now)) return (this.drop("handshake-overload"), false);
    if (!this.checker.checkMac1(datagram)) return (this.drop("mac1-invalid"), false);
    this.load.note(now);
    if (!this.load.underLoad(now)) return true;
    if (this.checker.mac2Absent(datagram) || !this.checker.checkMac2(datagram, from.key)) {
      if (!this.cookieLimiter.allow(rateLimitSource(from.key), now)) return (this.drop("cookie-reply-limited"), false);
      this.counters.cookieRepliesSent++;
      this.transmit(this.checker.createReply(datagram, sender, from.key), from, null);
      return (this.drop("cookie-required"), false);
    }
    if (!this.handshakeLimiter.allow(rateLimitSource(from.key), now)) return (this.drop("rate-limited"), false);
    return true;
  }

  private receiveInitiation(m: Initiation, datagram: Uint8Array, from: E): void {
    if (!this.admitHandshake(datagram, m.sender, from)) return;
    const r = consumeInitiation(this.noise, m, (key) => this.peers.get(keyId(key))?.remote ?? null);
    if (!r.ok) return this.drop(r.error);
    this.peers.get(keyId(r.value.initiatorStatic))!.receiveInitiation(r.value, from, datagram.length);
  }

  private receiveResponse(m: Response, datagram: Uint8Array, from: E): void {
    if (!this.admitHandshake(datagram, m.sender, from)) return;
    const entry = this.host.indices.get(m.receiver);
    if (!entry || entry.keypair) return this.drop("unexpected-response");
    const peer = entry.peer;
    const err = consumeResponse(this.noise, peer.remote, peer.handshake, m);
    if (err) return this.drop(err);
    peer.completeInitiatorHandshake(from, datagram.length);
  }

  private receiveCookieReply(m: CookieReply): void {
    const entry = this.host.indices.get(m.receiver);
    if (!entry || !entry.peer.cookies.consumeReply(m)) return this.drop("cookie-invalid");
    this.counters.cookieRepliesAccepted++;
  }

  private receiveTransport(m: Transport, datagram: Uint8Array, from: E): void {
    const entry = this.host.indices.get(m.receiver);
    if (!entry || !entry.keypair) return this.drop("unknown-index");
    entry.peer.receiveTransport(entry.keypair, m, from, datagram.length);
  }
}
