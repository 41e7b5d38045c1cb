/**
 * A peer's timers (whitepaper §6 "Timers & Stateless UX": §6.2 rekey and
 * reject, §6.4 handshake retransmission, §6.5 passive keepalive, §6.3
 * zeroing; persistent keepalive from wg(8)), as deadlines rather than OS
 * timers: the Device asks for the earliest deadline and calls tick() when the
 * clock passes it, so tests drive them with a fake clock.
 *
 * Owns: the five deadlines, the retry count and the event rules that set and
 * clear them (named after wireguard-go's timers.go events).
 * Must never: read a clock or schedule anything itself.
 */
import type { WgLimits } from "./limits.ts";

/** What expiring timers make the peer do. */
export interface TimerActions {
  /** Sends an initiation; `isRetry` keeps the attempt count (§6.4). */
  sendInitiation(isRetry: boolean): void;
  /** Sends staged packets or an empty keepalive (§6.5). */
  sendKeepalive(): void;
  /** Gives up on the handshake: drops staged packets (§6.4, after REKEY_ATTEMPT_TIME). */
  giveUp(): void;
  /** Forgets all sessions and handshake state (§6.3). */
  zeroKeyMaterial(): void;
}

type Deadline = number | null;

/** The deadlines of one peer, in monotonic ms. */
export class PeerTimers {
  retransmitHandshake: Deadline = null;
  sendKeepalive: Deadline = null;
  newHandshake: Deadline = null;
  zeroKeyMaterial: Deadline = null;
  persistentKeepalive: Deadline = null;
  /** Initiations sent for the current handshake attempt. */
  handshakeAttempts = 0;
  /** Data arrived while a keepalive was already pending: send another after it. */
  needAnotherKeepalive = false;
  /** A handshake was already started because a received session neared REJECT_AFTER_TIME. */
  sentLastMinuteHandshake = false;

  constructor(
    private readonly limits: WgLimits,
    /** Random jitter in [0, jitterMaxMs). */
    private readonly jitter: () => number,
    /** Persistent keepalive interval in ms, 0 for off. */
    public persistentKeepaliveMs = 0,
  ) {}

  /** Most retransmissions before giving up: REKEY_ATTEMPT_TIME / REKEY_TIMEOUT (18). */
  get maxAttempts(): number {
    return Math.floor(this.limits.rekeyAttemptTimeMs / this.limits.rekeyTimeoutMs);
  }

  /** A data (non-keepalive) packet was sent: expect something back within KEEPALIVE + REKEY_TIMEOUT, else rehandshake (§6.5). */
  dataSent(now: number): void {
    if (this.newHandshake === null)
      this.newHandshake = now + this.limits.keepaliveTimeoutMs + this.limits.rekeyTimeoutMs + this.jitter();
  }

  /** A data packet arrived: answer within KEEPALIVE_TIMEOUT, with a keepalive if nothing else goes out (§6.5). */
  dataReceived(now: number): void {
    if (this.sendKeepalive === null) this.sendKeepalive = now + this.limits.keepaliveTimeoutMs;
    else this.needAnotherKeepalive = true;
  }

  /** Any authenticated packet (data, keepalive or handshake) was sent: no keepalive needed now. */
  anyAuthenticatedPacketSent(): void {
    this.sendKeepalive = null;
  }

  /** Any authenticated packet was received: the peer is alive. */
  anyAuthenticatedPacketReceived(): void {
    this.newHandshake = null;
  }

  /** Any authenticated packet went either way: re-arm the persistent keepalive. */
  anyAuthenticatedPacketTraversal(now: number): void {
    if (this.persistentKeepaliveMs > 0) this.persistentKeepalive = now + this.persistentKeepaliveMs;
  }

  /** An initiation was sent: retransmit after REKEY_TIMEOUT + jitter unless answered (§6.4). */
  handshakeInitiated(now: number): void {
    this.retransmitHandshake = now + this.limits.rekeyTimeoutMs + this.jitter();
  }

  /** A handshake finished (a response consumed, or a responder session confirmed). */
  handshakeComplete(): void {
    this.retransmitHandshake = null;
    this.handshakeAttempts = 0;
    this.sentLastMinuteHandshake = false;
  }

  /** A session was derived: zero everything if no newer one comes within 3 × REJECT_AFTER_TIME (§6.3). */
  sessionDerived(now: number): void {
    this.zeroKeyMaterial = now + 3 * this.limits.rejectAfterTimeMs;
  }

  /** Stops every timer (the peer is removed or zeroed). */
  stopAll(): void {
    this.retransmitHandshake =
      this.sendKeepalive =
      this.newHandshake =
      this.zeroKeyMaterial =
      this.persistentKeepalive =
        null;
  }

  /** The earliest deadline, or null when none is set. */
  earliest(): number | null {
    let m: number | null = null;
    for (const d of [
      this.retransmitHandshake,
      this.sendKeepalive,
      this.newHandshake,
      this.zeroKeyMaterial,
      this.persistentKeepalive,
    ]) {
      if (d !== null && (m === null || d < m)) m = d;
    }
    return m;
  }

  /** Runs the handlers of every deadline ≤ `now`, in the order wireguard-go would (each clears its deadline first). */
  tick(now: number, act: TimerActions): void {
    if (this.retransmitHandshake !== null && this.retransmitHandshake <= now) {
      this.retransmitHandshake = null;
      if (this.handshakeAttempts >= this.maxAttempts) {
        this.sendKeepalive = null;
        act.giveUp();
        if (this.zeroKeyMaterial === null) this.zeroKeyMaterial = now + 3 * this.limits.rejectAfterTimeMs;
      } else {
        this.handshakeAttempts++;
        act.sendInitiation(true);
      }
    }
    if (this.sendKeepalive !== null && this.sendKeepalive <= now) {
      this.sendKeepalive = null;
      act.sendKeepalive();
      if (this.needAnotherKeepalive) {
        this.needAnotherKeepalive = false;
        this.sendKeepalive = now + this.limits.keepaliveTimeoutMs;
      }
    }
    if (this.newHandshake !== null && this.newHandshake <= now) {
      this.newHandshake = null;
      act.sendInitiation(false);
    }
    if (this.zeroKeyMaterial !== null && this.zeroKeyMaterial <= now) {
      this.zeroKeyMaterial = null;
      act.zeroKeyMaterial();
    }
    if (this.persistentKeepalive !== null && this.persistentKeepalive <= now) {
      this.persistentKeepalive = null;
      if (this.persistentKeepaliveMs > 0) act.sendKeepalive();
    }
  }
}
