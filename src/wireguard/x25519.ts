/**
 * Curve25519 Diffie-Hellman for the handshake (whitepaper §5.4: DH and
 * DH-GENERATE), through node:crypto's native X25519 (RFC 7748).
 *
 * Owns: turning raw 32-byte keys into node:crypto key objects (DER with the
 * fixed PKCS#8 / SPKI prefixes of RFC 8410) and back.
 * Must never: throw on a peer-supplied public key: an invalid point or an
 * all-zero shared secret yields null, and the caller drops the message.
 */
import { createPrivateKey, createPublicKey, diffieHellman, type KeyObject } from "node:crypto";
import { KEY_BYTES } from "./constants.ts";
import type { WgRandom } from "./ports.ts";

const PKCS8_PREFIX = Buffer.from("302e020100300506032b656e04220420", "hex");
const SPKI_PREFIX = Buffer.from("302a300506032b656e032100", "hex");

/** A Curve25519 private key with its public key, both raw 32 bytes. */
export interface KeyPair25519 {
  /** Raw private scalar (32 bytes, clamped). */
  readonly privateKey: Uint8Array;
  /** Raw public key (32 bytes). */
  readonly publicKey: Uint8Array;
  /** The node:crypto object for the private key. */
  readonly privateObject: KeyObject;
}

/** Clamps a 32-byte scalar as RFC 7748 §5 does (node:crypto clamps too; stored keys then match `wg`). */
function clamp(k: Uint8Array): Uint8Array {
  const c = Uint8Array.from(k);
  c[0] = c[0]! & 248;
  c[31] = (c[31]! & 127) | 64;
  return c;
}

/** The key pair of a raw private key. Throws when `privateKey` is not 32 bytes (a local configuration error). */
export function keyPairFromPrivate(privateKey: Uint8Array): KeyPair25519 {
  if (privateKey.length !== KEY_BYTES)
    throw new Error(`a Curve25519 private key is ${KEY_BYTES} bytes, got ${privateKey.length}`);
  const clamped = clamp(privateKey);
  const privateObject = createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, clamped]), format: "der", type: "pkcs8" });
  const spki = createPublicKey(privateObject).export({ format: "der", type: "spki" });
  return { privateKey: clamped, publicKey: new Uint8Array(spki.subarray(SPKI_PREFIX.length)), privateObject };
}

/** DH-GENERATE(): a fresh key pair from `random` (whitepaper §5.4). */
export function generateKeyPair(random: WgRandom): KeyPair25519 {
  return keyPairFromPrivate(random.fill(new Uint8Array(KEY_BYTES)));
}

/** A node:crypto public key object for a raw public key, or null when it is malformed. */
export function publicKeyObject(publicKey: Uint8Array): KeyObject | null {
  if (publicKey.length !== KEY_BYTES) return null;
  try {
    return createPublicKey({ key: Buffer.concat([SPKI_PREFIX, publicKey]), format: "der", type: "spki" });
  } catch {
    return null;
  }
}

/**
 * DH(private, public): the 32-byte shared secret, or null when the public key
 * is invalid or a low-order point makes the result all zeros (node:crypto
 * refuses that case, like wireguard-go's zero check).
 */
export function dh(privateKey: KeyObject, publicKey: Uint8Array | KeyObject): Uint8Array | null {
  const pub = publicKey instanceof Uint8Array ? publicKeyObject(publicKey) : publicKey;
  if (!pub) return null;
  try {
    const s = new Uint8Array(diffieHellman({ privateKey, publicKey: pub }));
    let any = 0;
    for (const b of s) any |= b;
    return any === 0 ? null : s;
  } catch {
    return null;
  }
}
