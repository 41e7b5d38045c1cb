/**
 * mac1, mac2 and cookies: WireGuard's defence against handshake floods
 * (whitepaper §5.3 "Denial of Service Mitigation and Cookies" and §5.4.4,
 * §5.4.7).
 *
 * - Every handshake message carries mac1 = MAC(HASH(LABEL_MAC1 ‖ Spub_recv),
 *   message up to mac1): a sender must know the receiver's public key.
 * - A responder under load answers a message without a valid mac2 with a
 *   cookie reply: cookie τ = MAC(Rm, source address), Rm a random secret
 *   replaced every 2 minutes, sealed with XChaCha20-Poly1305 under
 *   HASH(LABEL_COOKIE ‖ Spub_responder) with the message's mac1 as AD.
 * - The initiator then sets mac2 = MAC(τ, message up to mac2) on its next
 *   handshake messages, for 2 minutes minus a margin.
 *
 * Owns: CookieChecker (the receiving side, one per Device) and CookieJar (the
 * sending side, one per Peer). The source address is an opaque string (the
 * transport's endpoint key); only this Device ever reads its own cookies.
 * Must never: throw on peer input, or accept a cookie reply that does not
 * answer the last mac1 this side sent.
 */
import type { Aead } from "./aead/aead.ts";
import {
  COOKIE_NONCE_BYTES,
  COOKIE_SECRET_MAX_AGE_MS,
  LABEL_COOKIE,
  LABEL_MAC1,
  MAC_BYTES,
  REKEY_TIMEOUT_MS,
} from "./constants.ts";
import type { CookieReply } from "./codec.ts";
import { encodeCookieReply } from "./codec.ts";
import { equalBytes, hash, mac, utf8 } from "./hash.ts";
import type { WgRandom } from "./ports.ts";
import type { Clock } from "../protocol/clock.ts";

const MAC1_LABEL = utf8(LABEL_MAC1);
const COOKIE_LABEL = utf8(LABEL_COOKIE);
/** A received cookie is used only this long, so it expires before the responder's secret does (as wireguard-go: 2 min − 5 s − 2 × ≈ 333 ms jitter). */
export const COOKIE_USE_MAX_AGE_MS = COOKIE_SECRET_MAX_AGE_MS - REKEY_TIMEOUT_MS - 2 * 333;

/** The key of mac1 for messages sent to the holder of `publicKey`: HASH(LABEL_MAC1 ‖ Spub). */
export function mac1Key(publicKey: Uint8Array): Uint8Array {
  return hash(MAC1_LABEL, publicKey);
}

/** The key that seals cookie replies from the holder of `publicKey`: HASH(LABEL_COOKIE ‖ Spub). */
export function cookieKey(publicKey: Uint8Array): Uint8Array {
  return hash(COOKIE_LABEL, publicKey);
}

const mac1Of = (key: Uint8Array, msg: Uint8Array) => mac(key, msg.subarray(0, msg.length - 2 * MAC_BYTES));
const mac2Of = (cookie: Uint8Array, msg: Uint8Array) => mac(cookie, msg.subarray(0, msg.length - MAC_BYTES));
const mac1Field = (msg: Uint8Array) => msg.subarray(msg.length - 2 * MAC_BYTES, msg.length - MAC_BYTES);
const mac2Field = (msg: Uint8Array) => msg.subarray(msg.length - MAC_BYTES);

/** The receiving side's checks on handshake messages addressed to this Device's static key. */
export class CookieChecker {
  private readonly mac1KeyOwn: Uint8Array;
  private readonly cookieKeyOwn: Uint8Array;
  private secret: Uint8Array;
  private secretSetMs: number;

  /** `publicKey` is this Device's static public key. */
  constructor(
    publicKey: Uint8Array,
    private readonly clock: Clock,
    private readonly random: WgRandom,
    private readonly aead: Aead,
  ) {
    this.mac1KeyOwn = mac1Key(publicKey);
    this.cookieKeyOwn = cookieKey(publicKey);
    this.secret = random.fill(new Uint8Array(32));
    this.secretSetMs = clock.monoMs();
  }

  /** Whether a whole handshake message (initiation or response bytes) carries a valid mac1. */
  checkMac1(message: Uint8Array): boolean {
    return equalBytes(mac1Of(this.mac1KeyOwn, message), mac1Field(message));
  }

  /** Whether the message's mac2 field is all zeros (the sender holds no cookie: no need to compute one to compare). */
  mac2Absent(message: Uint8Array): boolean {
    return mac2Field(message).every((b) => b === 0);
  }

  /** Whether the message carries a valid mac2 for a cookie this Device would give `sourceKey` now. */
  checkMac2(message: Uint8Array, sourceKey: string): boolean {
    return equalBytes(mac2Of(this.cookieFor(sourceKey), message), mac2Field(message));
  }

  /** A cookie reply (64 bytes) to `message` (whose mac1 was verified), addressed to the sender's index `receiver`. */
  createReply(message: Uint8Array, receiver: number, sourceKey: string): Uint8Array {
    const nonce = this.random.fill(new Uint8Array(COOKIE_NONCE_BYTES));
    const encryptedCookie = this.aead.xseal(this.cookieKeyOwn, nonce, this.cookieFor(sourceKey), mac1Field(message));
    return encodeCookieReply({ receiver, nonce, encryptedCookie });
  }

  /** τ = MAC(Rm, source), with Rm replaced when older than 2 minutes. */
  private cookieFor(sourceKey: string): Uint8Array {
    const now = this.clock.monoMs();
    if (now - this.secretSetMs >= COOKIE_SECRET_MAX_AGE_MS) {
      this.secret = this.random.fill(new Uint8Array(32));
      this.secretSetMs = now;
    }
    return mac(this.secret, utf8(sourceKey));
  }
}

/** The sending side, per peer: computes mac1/mac2 and keeps the last cookie the peer gave us. */
export class CookieJar {
  private readonly mac1KeyPeer: Uint8Array;
  private readonly cookieKeyPeer: Uint8Array;
  private cookie: Uint8Array | null = null;
  private cookieSetMs = 0;
  private lastMac1: Uint8Array | null = null;

  /** `peerPublicKey` is the remote peer's static public key. */
  constructor(
    peerPublicKey: Uint8Array,
    private readonly clock: Clock,
    private readonly aead: Aead,
  ) {
    this.mac1KeyPeer = mac1Key(peerPublicKey);
    this.cookieKeyPeer = cookieKey(peerPublicKey);
  }

  /** Writes mac1 and (with a fresh cookie) mac2 into a handshake message in place; mac2 is zeros otherwise. */
  addMacs(message: Uint8Array): void {
    const m1 = mac1Of(this.mac1KeyPeer, message);
    mac1Field(message).set(m1);
    this.lastMac1 = m1;
    const fresh = this.cookie && this.clock.monoMs() - this.cookieSetMs < COOKIE_USE_MAX_AGE_MS;
    mac2Field(message).set(fresh ? mac2Of(this.cookie!, message) : new Uint8Array(MAC_BYTES));
  }

  /** Takes a cookie reply to our last handshake message; false (and nothing kept) when it does not decrypt. */
  consumeReply(reply: CookieReply): boolean {
    if (!this.lastMac1) return false;
    const cookie = this.aead.xopen(this.cookieKeyPeer, reply.nonce, reply.encryptedCookie, this.lastMac1);
    if (!cookie || cookie.length !== MAC_BYTES) return false;
    this.cookie = cookie;
    this.cookieSetMs = this.clock.monoMs();
    this.lastMac1 = null;
    return true;
  }

  /** Whether a cookie usable for mac2 is held now (for tests and stats). */
  hasFreshCookie(): boolean {
    return this.cookie !== null && this.clock.monoMs() - this.cookieSetMs < COOKIE_USE_MAX_AGE_MS;
  }
}
