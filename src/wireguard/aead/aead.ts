/**
 * The AEAD port: ChaCha20-Poly1305 (RFC 8439) with WireGuard's nonce, and
 * XChaCha20-Poly1305 for cookie replies (whitepaper §5.4: AEAD and XAEAD).
 *
 * Owns: the one interface every AEAD provider implements (libsodium through
 * bun:ffi, libsodium-wrappers as WebAssembly, @noble/ciphers as the
 * reference), and the nonce layout: 32 zero bits then the 64-bit
 * little-endian counter.
 * Must never: throw on a forged or truncated ciphertext: open returns false.
 */

/** Names of the providers, fastest first as measured on Debian 12 (see docs/adr/0101-userspace-wireguard.md). */
export type AeadProviderName = "sodium-ffi" | "sodium-wasm" | "noble";

/** One AEAD implementation. Keys are 32 bytes; tags 16 bytes, appended to the ciphertext. */
export interface Aead {
  /** Which implementation this is. */
  readonly name: AeadProviderName;
  /**
   * Seals `plaintext` with `key` and nonce `counter` (an integer in [0, 2^53))
   * and additional data `ad`, writing ciphertext ‖ tag into `out`, which must
   * be exactly plaintext.length + 16 bytes. `out` may start at the same byte
   * as `plaintext` (sealing in place); any other overlap is not allowed.
   */
  sealInto(out: Uint8Array, key: Uint8Array, counter: number, plaintext: Uint8Array, ad: Uint8Array | null): void;
  /**
   * Opens `ciphertext` (≥ 16 bytes, tag included) into `out` (exactly
   * ciphertext.length − 16 bytes). Returns false, leaving `out` unspecified,
   * when the tag does not verify.
   */
  openInto(out: Uint8Array, key: Uint8Array, counter: number, ciphertext: Uint8Array, ad: Uint8Array | null): boolean;
  /** XChaCha20-Poly1305 seal with a 24-byte nonce; returns ciphertext ‖ tag. */
  xseal(key: Uint8Array, nonce: Uint8Array, plaintext: Uint8Array, ad: Uint8Array): Uint8Array;
  /** XChaCha20-Poly1305 open; the plaintext, or null when the tag does not verify or sizes are wrong. */
  xopen(key: Uint8Array, nonce: Uint8Array, ciphertext: Uint8Array, ad: Uint8Array): Uint8Array | null;
}

/** Size of the ChaCha20-Poly1305 IETF nonce. */
export const NONCE_BYTES = 12;

/** Writes WireGuard's nonce for `counter` into a 12-byte `nonce`: 4 zero bytes, then the counter as u64 LE. */
export function writeNonce(nonce: Uint8Array, counter: number): void {
  nonce[0] = 0;
  nonce[1] = 0;
  nonce[2] = 0;
  nonce[3] = 0;
  const lo = counter >>> 0;
  const hi = Math.floor(counter / 2 ** 32) >>> 0;
  nonce[4] = lo & 0xff;
  nonce[5] = (lo >>> 8) & 0xff;
  nonce[6] = (lo >>> 16) & 0xff;
  nonce[7] = lo >>> 24;
  nonce[8] = hi & 0xff;
  nonce[9] = (hi >>> 8) & 0xff;
  nonce[10] = (hi >>> 16) & 0xff;
  nonce[11] = hi >>> 24;
}

/** Seals into a fresh buffer (convenience over sealInto). */
export function seal(
  aead: Aead,
  key: Uint8Array,
  counter: number,
  plaintext: Uint8Array,
  ad: Uint8Array | null,
): Uint8Array {
  const out = new Uint8Array(plaintext.length + 16);
  aead.sealInto(out, key, counter, plaintext, ad);
  return out;
}

/** Opens into a fresh buffer; null when the ciphertext is shorter than a tag or does not verify. */
export function open(
  aead: Aead,
  key: Uint8Array,
  counter: number,
  ciphertext: Uint8Array,
  ad: Uint8Array | null,
): Uint8Array | null {
  if (ciphertext.length < 16) return null;
  const out = new Uint8Array(ciphertext.length - 16);
  return aead.openInto(out, key, counter, ciphertext, ad) ? out : null;
}
