/**
 * The Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s handshake as WireGuard runs it
 * (whitepaper §5.4.2 initiation, §5.4.3 response, §5.4.5 transport keys;
 * Noise spec rev. 34 §7.5 pattern IK, §9 psk2 modifier).
 *
 * Owns: the chaining key / hash transcript of one handshake per peer
 * (HandshakeState) and the four steps: create/consume initiation,
 * create/consume response, then the derivation of the transport keys.
 * Consume steps compute on copies and commit to the state only once every
 * check passed, so a bad message leaves the handshake as it was.
 * Must never: throw on peer input (bad points, failed tags and unknown keys
 * come back as a HandshakeError), or keep ephemeral secrets after deriving keys.
 */
import type { KeyObject } from "node:crypto";
import { open, seal, type Aead } from "./aead/aead.ts";
import type { Initiation, Response } from "./codec.ts";
import { encodeInitiation, encodeResponse } from "./codec.ts";
import { CONSTRUCTION, IDENTIFIER, KEY_BYTES, MAC_BYTES } from "./constants.ts";
import { EMPTY_BYTES, hash, kdf1, kdf2, kdf3, utf8, wipe } from "./hash.ts";
import { dh, generateKeyPair, publicKeyObject, type KeyPair25519 } from "./x25519.ts";
import type { WgRandom } from "./ports.ts";

/** C_i of the whitepaper: HASH(CONSTRUCTION). */
export const INITIAL_CHAIN_KEY = hash(utf8(CONSTRUCTION));
/** H_i before the responder's key: HASH(C_i ‖ IDENTIFIER). */
export const INITIAL_HASH = hash(INITIAL_CHAIN_KEY, utf8(IDENTIFIER));

const ZERO_MAC = new Uint8Array(MAC_BYTES);

/** Where a handshake stands (wireguard-go's handshakeState names). */
export type HandshakePhase =
  | "zeroed"
  | "initiation-created"
  | "initiation-consumed"
  | "response-created"
  | "response-consumed";

/** Why a handshake message was refused (mapped to a Device drop reason). */
export type HandshakeError = "handshake-invalid" | "unknown-peer" | "unexpected-response";

/** This Device's static identity, with what can be computed once. */
export interface LocalStatic {
  readonly keyPair: KeyPair25519;
  /** HASH(INITIAL_HASH ‖ Spub_own): the responder's first hash step. */
  readonly initialHash: Uint8Array;
}

/** What a Device knows about one peer's static identity. */
export interface RemoteStatic {
  readonly publicKey: Uint8Array;
  readonly publicObject: KeyObject;
  /** Q: the pre-shared key, 32 zero bytes when none is configured (whitepaper §5.2). */
  readonly presharedKey: Uint8Array;
  /** DH(Spriv_own, Spub_peer), computed once; null when the peer key is a low-order point (handshakes then fail). */
  readonly staticShared: Uint8Array | null;
  /** HASH(INITIAL_HASH ‖ Spub_peer): the initiator's first hash step toward this peer. */
  readonly initialHash: Uint8Array;
}

/** Builds the LocalStatic of a key pair. */
export function localStatic(keyPair: KeyPair25519): LocalStatic {
  return { keyPair, initialHash: hash(INITIAL_HASH, keyPair.publicKey) };
}

/** Builds the RemoteStatic of a peer; throws on a malformed key (local configuration, not peer input). */
export function remoteStatic(local: LocalStatic, publicKey: Uint8Array, presharedKey?: Uint8Array): RemoteStatic {
  const publicObject = publicKeyObject(publicKey);
  if (!publicObject) throw new Error("peer public key is not a valid 32-byte Curve25519 key");
  if (presharedKey && presharedKey.length !== KEY_BYTES) throw new Error(`a pre-shared key is ${KEY_BYTES} bytes`);
  return {
    publicKey: Uint8Array.from(publicKey),
    publicObject,
    presharedKey: presharedKey ? Uint8Array.from(presharedKey) : new Uint8Array(KEY_BYTES),
    staticShared: dh(local.keyPair.privateObject, publicObject),
    initialHash: hash(INITIAL_HASH, publicKey),
  };
}

/** One peer's handshake transcript and the replay/flood state of its initiations. */
export class HandshakeState {
  phase: HandshakePhase = "zeroed";
  hash: Uint8Array = EMPTY_BYTES;
  chainKey: Uint8Array = EMPTY_BYTES;
  localEphemeral: KeyPair25519 | null = null;
  remoteEphemeral: Uint8Array | null = null;
  /** Our sender index for this handshake (0 when none). */
  localIndex = 0;
  /** The peer's sender index (0 when none). */
  remoteIndex = 0;
  /** Greatest TAI64N timestamp accepted from this peer (whitepaper §5.1); survives clear(). */
  lastTimestamp: Uint8Array | null = null;
  /** Monotonic ms of the last initiation consumed from this peer (flood limit); survives clear(). */
  lastInitiationConsumedMs = Number.NEGATIVE_INFINITY;

  /** Forgets the transcript and ephemeral keys (not the replay/flood state). */
  clear(): void {
    wipe(this.hash);
    wipe(this.chainKey);
    this.phase = "zeroed";
    this.hash = EMPTY_BYTES;
    this.chainKey = EMPTY_BYTES;
    this.localEphemeral = null;
    this.remoteEphemeral = null;
    this.localIndex = 0;
    this.remoteIndex = 0;
  }
}

/** Inputs shared by every step. */
export interface NoiseContext {
  readonly aead: Aead;
  readonly random: WgRandom;
  readonly local: LocalStatic;
}

/**
 * Initiator, whitepaper §5.4.2: writes a fresh initiation (mac1/mac2 left zero
 * for the CookieJar) and moves `hs` to "initiation-created". Returns null only
 * when the peer's static key is unusable (a low-order point in configuration).
 */
export function createInitiation(
  ctx: NoiseContext,
  peer: RemoteStatic,
  hs: HandshakeState,
  senderIndex: number,
  timestamp: Uint8Array,
): Uint8Array | null {
  if (!peer.staticShared) return null;
  const e = generateKeyPair(ctx.random);
  let h = hash(peer.initialHash, e.publicKey);
  let ck = kdf1(INITIAL_CHAIN_KEY, e.publicKey);
  const es = dh(e.privateObject, peer.publicObject);
  if (!es) return null;
  let k: Uint8Array;
  [ck, k] = kdf2(ck, es);
  const encryptedStatic = seal(ctx.aead, k, 0, ctx.local.keyPair.publicKey, h);
  h = hash(h, encryptedStatic);
  [ck, k] = kdf2(ck, peer.staticShared);
  const encryptedTimestamp = seal(ctx.aead, k, 0, timestamp, h);
  h = hash(h, encryptedTimestamp);
  hs.clear();
  hs.phase = "initiation-created";
  hs.hash = h;
  hs.chainKey = ck;
  hs.localEphemeral = e;
  hs.localIndex = senderIndex;
  return encodeInitiation({
    sender: senderIndex,
    ephemeral: e.publicKey,
    encryptedStatic,
    encryptedTimestamp,
    mac1: ZERO_MAC,
    mac2: ZERO_MAC,
  });
}

/** What the responder learned from a valid initiation, before it commits to a peer's state. */
export interface ConsumedInitiation {
  /** The initiator's static public key (look the peer up by it). */
  readonly initiatorStatic: Uint8Array;
  readonly timestamp: Uint8Array;
  readonly hash: Uint8Array;
  readonly chainKey: Uint8Array;
  readonly remoteEphemeral: Uint8Array;
  readonly remoteIndex: number;
}

/**
 * Responder, first half of §5.4.2: decrypts the initiator's static key and
 * timestamp. `findPeer` maps a static key to the peer's RemoteStatic (or null).
 * Checks no peer state: the caller checks the timestamp and flood limit, then
 * calls commitInitiation.
 */
export function consumeInitiation(
  ctx: NoiseContext,
  msg: Initiation,
  findPeer: (staticKey: Uint8Array) => RemoteStatic | null,
): { ok: true; value: ConsumedInitiation; peer: RemoteStatic } | { ok: false; error: HandshakeError } {
  let h = hash(ctx.local.initialHash, msg.ephemeral);
  let ck = kdf1(INITIAL_CHAIN_KEY, msg.ephemeral);
  const es = dh(ctx.local.keyPair.privateObject, msg.ephemeral);
  if (!es) return { ok: false, error: "handshake-invalid" };
  let k: Uint8Array;
  [ck, k] = kdf2(ck, es);
  const initiatorStatic = open(ctx.aead, k, 0, msg.encryptedStatic, h);
  if (!initiatorStatic) return { ok: false, error: "handshake-invalid" };
  h = hash(h, msg.encryptedStatic);
  const peer = findPeer(initiatorStatic);
  if (!peer) return { ok: false, error: "unknown-peer" };
  if (!peer.staticShared) return { ok: false, error: "handshake-invalid" };
  [ck, k] = kdf2(ck, peer.staticShared);
  const timestamp = open(ctx.aead, k, 0, msg.encryptedTimestamp, h);
  if (!timestamp) return { ok: false, error: "handshake-invalid" };
  h = hash(h, msg.encryptedTimestamp);
  return {
    ok: true,
    peer,
    value: {
      initiatorStatic,
      timestamp,
      hash: h,
      chainKey: ck,
      remoteEphemeral: Uint8Array.from(msg.ephemeral),
      remoteIndex: msg.sender,
    },
  };
}

/** Stores a consumed initiation in the peer's state ("initiation-consumed") after the caller's timestamp and flood checks. */
export function commitInitiation(hs: HandshakeState, c: ConsumedInitiation, nowMs: number): void {
  hs.clear();
  hs.phase = "initiation-consumed";
  hs.hash = c.hash;
  hs.chainKey = c.chainKey;
  hs.remoteEphemeral = c.remoteEphemeral;
  hs.remoteIndex = c.remoteIndex;
  hs.lastTimestamp = c.timestamp;
  hs.lastInitiationConsumedMs = nowMs;
}

/**
 * Responder, §5.4.3: writes the response (macs zero) and moves `hs` to
 * "response-created". Null when `hs` holds no consumed initiation or the
 * initiator's ephemeral is a low-order point.
 */
export function createResponse(
  ctx: NoiseContext,
  peer: RemoteStatic,
  hs: HandshakeState,
  senderIndex: number,
): Uint8Array | null {
  if (hs.phase !== "initiation-consumed" || !hs.remoteEphemeral) return null;
  const e = generateKeyPair(ctx.random);
  let h = hash(hs.hash, e.publicKey);
  let ck = kdf1(hs.chainKey, e.publicKey);
  const ee = dh(e.privateObject, hs.remoteEphemeral);
  const se = dh(e.privateObject, peer.publicObject);
  if (!ee || !se) return null;
  ck = kdf1(ck, ee);
  ck = kdf1(ck, se);
  const [ck2, tau, k] = kdf3(ck, peer.presharedKey);
  h = hash(h, tau);
  const encryptedNothing = seal(ctx.aead, k, 0, EMPTY_BYTES, h);
  h = hash(h, encryptedNothing);
  hs.phase = "response-created";
  hs.hash = h;
  hs.chainKey = ck2;
  hs.localEphemeral = e;
  hs.localIndex = senderIndex;
  return encodeResponse({
    sender: senderIndex,
    receiver: hs.remoteIndex,
    ephemeral: e.publicKey,
    encryptedNothing,
    mac1: ZERO_MAC,
    mac2: ZERO_MAC,
  });
}

/**
 * Initiator, §5.4.3 on receipt: checks the response against the initiation
 * this state created and moves it to "response-consumed".
 */
export function consumeResponse(
  ctx: NoiseContext,
  peer: RemoteStatic,
  hs: HandshakeState,
  msg: Response,
): HandshakeError | null {
  if (hs.phase !== "initiation-created" || !hs.localEphemeral || msg.receiver !== hs.localIndex)
    return "unexpected-response";
  let h = hash(hs.hash, msg.ephemeral);
  let ck = kdf1(hs.chainKey, msg.ephemeral);
  const ee = dh(hs.localEphemeral.privateObject, msg.ephemeral);
  const se = dh(ctx.local.keyPair.privateObject, msg.ephemeral);
  if (!ee || !se) return "handshake-invalid";
  ck = kdf1(ck, ee);
  ck = kdf1(ck, se);
  const [ck2, tau, k] = kdf3(ck, peer.presharedKey);
  h = hash(h, tau);
  if (!open(ctx.aead, k, 0, msg.encryptedNothing, h)) return "handshake-invalid";
  h = hash(h, msg.encryptedNothing);
  hs.phase = "response-consumed";
  hs.hash = h;
  hs.chainKey = ck2;
  hs.remoteIndex = msg.sender;
  return null;
}

/** Transport keys of a finished handshake (§5.4.5), from our side's point of view. */
export interface SessionKeys {
  readonly sendKey: Uint8Array;
  readonly receiveKey: Uint8Array;
  readonly isInitiator: boolean;
  readonly localIndex: number;
  readonly remoteIndex: number;
}

/**
 * (T_send, T_recv) = KDF2(C, ε) for the initiator ("response-consumed"), swapped for
 * the responder ("response-created"); then clears the transcript. Null in any other phase.
 */
export function deriveSessionKeys(hs: HandshakeState): SessionKeys | null {
  let isInitiator: boolean;
  if (hs.phase === "response-consumed") isInitiator = true;
  else if (hs.phase === "response-created") isInitiator = false;
  else return null;
  const [t1, t2] = kdf2(hs.chainKey, EMPTY_BYTES);
  const keys = {
    sendKey: isInitiator ? t1 : t2,
    receiveKey: isInitiator ? t2 : t1,
    isInitiator,
    localIndex: hs.localIndex,
    remoteIndex: hs.remoteIndex,
  };
  hs.clear();
  return keys;
}
