/**
 * The hash functions of Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s as WireGuard
 * defines them (whitepaper §5.4 "Protocol Messages", first paragraphs):
 * HASH = BLAKE2s-256, MAC = keyed BLAKE2s-128, HMAC = HMAC-BLAKE2s, and
 * KDF1..3 = HKDF over HMAC-BLAKE2s (Noise spec §4.3, RFC 5869).
 *
 * Owns: pure functions over byte arrays, from @noble/hashes (Bun's
 * node:crypto has no keyed BLAKE2s: createHmac('blake2s256') fails).
 * Must never: keep state between calls or read a clock.
 */
import { blake2s } from "@noble/hashes/blake2.js";
import { hmac } from "@noble/hashes/hmac.js";

const EMPTY = new Uint8Array(0);
const ONE = Uint8Array.of(1);

/** HASH(parts…) = BLAKE2s-256 over the concatenation of `parts` (32 bytes). */
export function hash(...parts: Uint8Array[]): Uint8Array {
  const h = blake2s.create();
  for (const p of parts) h.update(p);
  return h.digest();
}

/** MAC(key, input) = BLAKE2s keyed with `key` (≤ 32 bytes), 16-byte output (whitepaper §5.4). */
export function mac(key: Uint8Array, input: Uint8Array): Uint8Array {
  return blake2s(input, { key, dkLen: 16 });
}

/** HMAC(key, input) with BLAKE2s-256 as the hash (RFC 2104), 32 bytes. */
export function hmacBlake2s(key: Uint8Array, input: Uint8Array): Uint8Array {
  return hmac(blake2s, key, input);
}

/** KDF1(key, input): the first HKDF output (whitepaper §5.4, "KDF_n"). */
export function kdf1(key: Uint8Array, input: Uint8Array): Uint8Array {
  const prk = hmacBlake2s(key, input);
  return hmacBlake2s(prk, ONE);
}

/** KDF2(key, input): the first two HKDF outputs. */
export function kdf2(key: Uint8Array, input: Uint8Array): [Uint8Array, Uint8Array] {
  const prk = hmacBlake2s(key, input);
  const t1 = hmacBlake2s(prk, ONE);
  const t2 = hmacBlake2s(prk, concat(t1, Uint8Array.of(2)));
  return [t1, t2];
}

/** KDF3(key, input): the first three HKDF outputs. */
export function kdf3(key: Uint8Array, input: Uint8Array): [Uint8Array, Uint8Array, Uint8Array] {
  const prk = hmacBlake2s(key, input);
  const t1 = hmacBlake2s(prk, ONE);
  const t2 = hmacBlake2s(prk, concat(t1, Uint8Array.of(2)));
  const t3 = hmacBlake2s(prk, concat(t2, Uint8Array.of(3)));
  return [t1, t2, t3];
}

/** The empty byte string ε of the whitepaper. */
export const EMPTY_BYTES = EMPTY;

/** The concatenation of two byte arrays. */
export function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

/** UTF-8 bytes of a protocol label. */
export function utf8(s: string): Uint8Array {
  return new TextEncoder().encode(s);
}

/** Constant-time equality of two byte arrays (false when lengths differ). */
export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a[i]! ^ b[i]!;
  return d === 0;
}

/** Overwrites `b` with zeros (best effort: the runtime may hold copies). */
export function wipe(b: Uint8Array | null | undefined): void {
  b?.fill(0);
}
