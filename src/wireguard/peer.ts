/**
 * One WireGuard peer inside a Device: its handshake, sessions, cookie jar,
 * timers, staged packets and endpoint (whitepaper §5.4 messages, §6 timers,
 * §2.1 roaming: the endpoint follows the source of the last authenticated
 * datagram).
 *
 * Owns: sending (stage → seal with the current session, or start a
 * handshake), and the state changes that follow an authenticated message.
 * The Device owns parsing, mac/cookie checks and dispatch to the right peer.
 * Must never: send with a session older than REJECT_AFTER_TIME or past
 * REJECT_AFTER_MESSAGES, deliver a packet whose source it does not own, or
 * throw on anything a remote party sent.
 */
import type { Aead } from "./aead/aead.ts";
import { writeTransportHeader, type Transport } from "./codec.ts";
import {
  INITIATION_MIN_INTERVAL_MS,
  MAX_STAGED_PACKETS,
  PADDING_MULTIPLE,
  TAG_BYTES,
  TRANSPORT_HEADER_BYTES,
} from "./constants.ts";
import { CookieJar } from "./cookie.ts";
import type { DeviceCounters, DropReason } from "./counters.ts";
import type { IndexTable } from "./indexTable.ts";
import { parseIpHeader } from "./ipPacket.ts";
import { decodePathControl, type PathControl } from "./pathProbe.ts";
import { Keypair, Keypairs } from "./keypair.ts";
import type { WgLimits } from "./limits.ts";
import {
  commitInitiation,
  createInitiation,
  createResponse,
  deriveSessionKeys,
  HandshakeState,
  type ConsumedInitiation,
  type NoiseContext,
  type RemoteStatic,
} from "./noise.ts";
import type { WgRandom } from "./ports.ts";
import { isLaterTimestamp, tai64n } from "./tai64n.ts";
import { PeerTimers } from "./timers.ts";
import type { Clock } from "../protocol/clock.ts";

/** A remote address as the transport knows it; `key` is its stable identity (e.g. "192.0.2.1:51820"). */
export interface Endpoint {
  readonly key: string;
}

/** What a Peer needs from its Device. */
export interface PeerHost<E extends Endpoint> {
  readonly clock: Clock;
  readonly random: WgRandom;
  readonly aead: Aead;
  readonly noise: NoiseContext;
  readonly limits: WgLimits;
  readonly counters: DeviceCounters;
  readonly indices: IndexTable<Peer<E>>;
  /** Hands a datagram to the transport (counts no-endpoint when `to` is null). */
  transmit(datagram: Uint8Array, to: E | null, peer: Peer<E> | null): void;
  /** Hands a decrypted IP packet whose source `peer` owns to the application. */
  deliver(peer: Peer<E>, packet: Uint8Array): void;
  /** The peer owning the longest allowed-IPs prefix containing the address of family `version` at `offset` in `bytes`. */
  routeOf(bytes: Uint8Array, offset: number, version: 4 | 6): Peer<E> | null;
  /** Counts a drop. */
  drop(reason: DropReason): void;
  /** An authenticated path probe or ack from `peer` that arrived from `from` (src/wireguard/pathProbe.ts); absent: dropped as not an IP packet. */
  control?(peer: Peer<E>, message: PathControl, from: E): void;
}

/** A peer's traffic figures. */
export interface PeerStats {
  /** Datagram bytes received on this peer's sessions and handshakes. */
  rxBytes: number;
  /** Datagram bytes sent to this peer. */
  txBytes: number;
  /** Wall-clock ms of the last completed handshake, 0 when none. */
  lastHandshakeWallMs: number;
}

/** One configured peer. Create through Device.addPeer. */
export class Peer<E extends Endpoint> {
  readonly handshake = new HandshakeState();
  readonly keypairs: Keypairs;
  readonly cookies: CookieJar;
  readonly timers: PeerTimers;
  readonly stats: PeerStats = { rxBytes: 0, txBytes: 0, lastHandshakeWallMs: 0 };
  /** Where datagrams to this peer go: configured, then the source of the last authenticated datagram. */
  endpoint: E | null;
  private staged: Uint8Array[] = [];
  private lastInitiationSentMs = Number.NEGATIVE_INFINITY;
  private removed = false;

  constructor(
    private readonly host: PeerHost<E>,
    readonly remote: RemoteStatic,
    endpoint: E | null,
    persistentKeepaliveMs: number,
  ) {
    this.endpoint = endpoint;
    this.keypairs = new Keypairs((k) => host.indices.release(k.localIndex));
    this.cookies = new CookieJar(remote.publicKey, host.clock, host.aead);
    this.timers = new PeerTimers(
      host.limits,
      () => host.random.fill(new Uint8Array(1))[0]! * (host.limits.jitterMaxMs / 256),
      persistentKeepaliveMs,
    );
  }

  /** Packets waiting for a session (for tests and stats). */
  get stagedCount(): number {
    return this.staged.length;
  }

  // ----- sending -----

  /** Queues an IP packet for this peer and sends what can be sent. */
  send(packet: Uint8Array): void {
    if (this.removed) return;
    if (this.staged.length >= MAX_STAGED_PACKETS) {
      this.staged.shift();
      this.host.drop("staged-overflow");
    }
    this.staged.push(packet);
    this.sendStaged();
  }

  /** Sends staged packets, or an empty keepalive when none are staged (whitepaper §6.5). */
  sendKeepalive(): void {
    if (this.removed) return;
    if (this.staged.length === 0) this.staged.push(new Uint8Array(0));
    this.sendStaged();
  }

  /**
   * Seals one path control plaintext (src/wireguard/pathProbe.ts) with the
   * current session and hands it to the transport like any datagram. Leaves
   * the timers alone (a probe to one path must not stand in for a keepalive
   * that goes to every path) and never starts a handshake: false when there
   * is no usable session.
   */
  sendControl(plaintext: Uint8Array): boolean {
    if (this.removed) return false;
    const now = this.host.clock.monoMs();
    const k = this.keypairs.current;
    if (
      !k ||
      now - k.createdMs >= this.host.limits.rejectAfterTimeMs ||
      k.sendCounter >= this.host.limits.rejectAfterMessages
    )
      return false;
    const counter = k.takeCounter();
    if (counter === null) return false;
    this.transmitTransport(k, counter, plaintext);
    return true;
  }

  /** Seals and sends every staged packet with the current session; starts a handshake when there is no usable one. */
  private sendStaged(): void {
    const now = this.host.clock.monoMs();
    const k = this.keypairs.current;
    if (
      !k ||
      now - k.createdMs >= this.host.limits.rejectAfterTimeMs ||
      k.sendCounter >= this.host.limits.rejectAfterMessages
    ) {
      this.sendInitiation(false);
      return;
    }
    let sentData = false;
    let sentAny = false;
    while (this.staged.length > 0) {
      const counter = k.sendCounter < this.host.limits.rejectAfterMessages ? k.takeCounter() : null;
      if (counter === null) break;
      const packet = this.staged.shift()!;
      this.transmitTransport(k, counter, packet);
      sentAny = true;
      if (packet.length > 0) {
        sentData = true;
        this.host.counters.packetsSent++;
      } else {
        this.host.counters.keepalivesSent++;
      }
    }
    if (sentAny) {
      this.timers.anyAuthenticatedPacketTraversal(now);
      this.timers.anyAuthenticatedPacketSent();
      if (sentData) this.timers.dataSent(now);
    }
    if (this.staged.length > 0) {
      this.sendInitiation(false);
      return;
    }
    // Whitepaper §6.2: the initiator of a session rekeys after REKEY_AFTER_TIME; either side after REKEY_AFTER_MESSAGES.
    if (
      k.sendCounter > this.host.limits.rekeyAfterMessages ||
      (k.isInitiator && now - k.createdMs >= this.host.limits.rekeyAfterTimeMs)
    ) {
      this.sendInitiation(false);
    }
  }

  /** Writes header ‖ zero-padded packet into one fresh datagram and seals the payload in place (whitepaper §5.4.6). */
  private transmitTransport(k: Keypair, counter: number, packet: Uint8Array): void {
    const paddedLength = Math.ceil(packet.length / PADDING_MULTIPLE) * PADDING_MULTIPLE;
    const datagram = new Uint8Array(TRANSPORT_HEADER_BYTES + paddedLength + TAG_BYTES);
    writeTransportHeader(datagram, k.remoteIndex, counter);
    datagram.set(packet, TRANSPORT_HEADER_BYTES);
    const body = datagram.subarray(TRANSPORT_HEADER_BYTES);
    this.host.aead.sealInto(body, k.sendKey, counter, body.subarray(0, paddedLength), null);
    this.transmit(datagram);
  }

  private transmit(datagram: Uint8Array): void {
    this.stats.txBytes += datagram.length;
    this.host.transmit(datagram, this.endpoint, this);
  }

  /**
   * Sends a handshake initiation unless one went out less than REKEY_TIMEOUT
   * ago (whitepaper §6.4); `isRetry` false restarts the attempt count.
   */
  sendInitiation(isRetry: boolean): void {
    if (this.removed) return;
    if (!isRetry) this.timers.handshakeAttempts = 0;
    const now = this.host.clock.monoMs();
    if (now - this.lastInitiationSentMs < this.host.limits.rekeyTimeoutMs) return;
    this.lastInitiationSentMs = now;
    if (this.handshake.localIndex) this.host.indices.release(this.handshake.localIndex);
    const index = this.host.indices.allocate(this);
    const msg = createInitiation(this.host.noise, this.remote, this.handshake, index, tai64n(this.host.clock.wallMs()));
    if (!msg) {
      this.host.indices.release(index);
      this.host.drop("handshake-invalid");
      return;
    }
    this.cookies.addMacs(msg);
    this.timers.anyAuthenticatedPacketTraversal(now);
    this.timers.anyAuthenticatedPacketSent();
    this.host.counters.initiationsSent++;
    this.transmit(msg);
    this.timers.handshakeInitiated(now);
  }

  // ----- receiving (called by the Device after parsing and mac checks) -----

  /**
   * A valid initiation from this peer: checks its timestamp and the flood
   * limit, answers with a response and installs the responder session in `next`.
   */
  receiveInitiation(c: ConsumedInitiation, from: E, datagramBytes: number): void {
    const now = this.host.clock.monoMs();
    if (!isLaterTimestamp(c.timestamp, this.handshake.lastTimestamp)) return this.host.drop("timestamp-replayed");
    if (now - this.handshake.lastInitiationConsumedMs < INITIATION_MIN_INTERVAL_MS)
      return this.host.drop("initiation-flood");
    if (this.handshake.localIndex) this.host.indices.release(this.handshake.localIndex);
    commitInitiation(this.handshake, c, now);
    this.stats.rxBytes += datagramBytes;
    this.endpoint = from;
    this.timers.anyAuthenticatedPacketTraversal(now);
    this.timers.anyAuthenticatedPacketReceived();
    const index = this.host.indices.allocate(this);
    const msg = createResponse(this.host.noise, this.remote, this.handshake, index);
    if (!msg) {
      this.host.indices.release(index);
      this.handshake.clear();
      return this.host.drop("handshake-invalid");
    }
    const keys = deriveSessionKeys(this.handshake)!;
    const keypair = new Keypair(keys, now);
    this.host.indices.attach(index, keypair);
    this.keypairs.install(keypair);
    this.timers.sessionDerived(now);
    this.cookies.addMacs(msg);
    this.timers.anyAuthenticatedPacketTraversal(now);
    this.timers.anyAuthenticatedPacketSent();
    this.host.counters.responsesSent++;
    this.transmit(msg);
  }

  /** A response that completed our handshake (consumeResponse succeeded): the session becomes current at once. */
  completeInitiatorHandshake(from: E, datagramBytes: number): void {
    const now = this.host.clock.monoMs();
    this.stats.rxBytes += datagramBytes;
    this.endpoint = from;
    this.timers.anyAuthenticatedPacketTraversal(now);
    this.timers.anyAuthenticatedPacketReceived();
    const keys = deriveSessionKeys(this.handshake);
    if (!keys) return this.host.drop("unexpected-response");
    const keypair = new Keypair(keys, now);
    this.host.indices.attach(keys.localIndex, keypair);
    this.keypairs.install(keypair);
    this.timers.sessionDerived(now);
    this.handshakeCompleted();
    this.sendKeepalive();
  }

  private handshakeCompleted(): void {
    this.timers.handshakeComplete();
    this.stats.lastHandshakeWallMs = this.host.clock.wallMs();
    this.host.counters.handshakesCompleted++;
  }

  /** A transport message for session `k` of this peer: replay check, decrypt, rotate, timers, then deliver. */
  receiveTransport(k: Keypair, msg: Transport, from: E, datagramBytes: number): void {
    const now = this.host.clock.monoMs();
    if (now - k.createdMs >= this.host.limits.rejectAfterTimeMs) return this.host.drop("session-expired");
    if (msg.counterTooLarge || !k.replay.wouldAccept(msg.counter)) return this.host.drop("counter-replayed");
    const plaintext = new Uint8Array(msg.encrypted.length - TAG_BYTES);
    if (!this.host.aead.openInto(plaintext, k.receiveKey, msg.counter, msg.encrypted, null))
      return this.host.drop("decrypt-failed");
    if (!k.replay.accept(msg.counter)) return this.host.drop("counter-replayed");
    this.stats.rxBytes += datagramBytes;
    this.endpoint = from;
    if (this.keypairs.confirm(k)) {
      this.handshakeCompleted();
      if (this.staged.length > 0) this.sendStaged();
    }
    this.keepKeyFreshReceiving(now);
    this.timers.anyAuthenticatedPacketTraversal(now);
    this.timers.anyAuthenticatedPacketReceived();
    if (plaintext.length === 0) {
      this.host.counters.keepalivesReceived++;
      return;
    }
    const control = this.host.control ? decodePathControl(plaintext) : null;
    // A probe or ack is not data: it arms no passive keepalive and reaches no application.
    if (control) return this.host.control!(this, control, from);
    this.timers.dataReceived(now);
    const ip = parseIpHeader(plaintext);
    if (!ip) return this.host.drop("invalid-ip-packet");
    if (this.host.routeOf(plaintext, ip.sourceOffset, ip.version) !== this) return this.host.drop("source-not-allowed");
    this.host.deliver(this, ip.length === plaintext.length ? plaintext : plaintext.subarray(0, ip.length));
  }

  /** Whitepaper §6.2: an initiator whose session nears REJECT_AFTER_TIME on receipt starts a handshake, once. */
  private keepKeyFreshReceiving(now: number): void {
    if (this.timers.sentLastMinuteHandshake) return;
    const k = this.keypairs.current;
    const l = this.host.limits;
    if (k && k.isInitiator && now - k.createdMs >= l.rejectAfterTimeMs - l.keepaliveTimeoutMs - l.rekeyTimeoutMs) {
      this.timers.sentLastMinuteHandshake = true;
      this.sendInitiation(false);
    }
  }

  // ----- timers -----

  /** Runs expired timers at the clock's now. */
  tick(): void {
    if (this.removed) return;
    this.timers.tick(this.host.clock.monoMs(), {
      sendInitiation: (isRetry) => this.sendInitiation(isRetry),
      sendKeepalive: () => this.sendKeepalive(),
      giveUp: () => {
        for (let i = 0; i < this.staged.length; i++) this.host.drop("handshake-gave-up");
        this.staged = [];
      },
      zeroKeyMaterial: () => this.zeroKeyMaterial(),
    });
  }

  /** Forgets sessions and the handshake transcript (whitepaper §6.3); keeps replay state of timestamps. */
  zeroKeyMaterial(): void {
    this.keypairs.clear();
    if (this.handshake.localIndex) this.host.indices.release(this.handshake.localIndex);
    this.handshake.clear();
  }

  /** Called by Device.removePeer: stops timers, drops sessions and staged packets. */
  remove(): void {
    this.zeroKeyMaterial();
    this.timers.stopAll();
    this.staged = [];
    this.removed = true;
  }
}
