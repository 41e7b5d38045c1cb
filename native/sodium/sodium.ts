/**
 * bun:ffi binding to the system's libsodium (Debian package `libsodium23`)
 * for the four AEAD calls WireGuard needs: ChaCha20-Poly1305 IETF and
 * XChaCha20-Poly1305 IETF, encrypt and decrypt (libsodium's combined mode:
 * ciphertext ‖ 16-byte tag).
 *
 * Owns: finding and loading the shared library, sodium_init(), and a probe
 * that says why the library cannot be used instead of crashing the process.
 * Must never: import src/agent, src/scheduler or src/cli (the architecture
 * test checks it), or be called with buffers shorter than the lengths passed.
 */
import { dlopen, FFIType } from "bun:ffi";

/** Library names tried in order: the Debian 12 soname, then the development symlink. */
export const SODIUM_LIBRARY_NAMES = ["libsodium.so.23", "libsodium.so"] as const;

const SYMBOLS = {
  sodium_init: { args: [], returns: FFIType.i32 },
  // (c, clen_p, m, mlen, ad, adlen, nsec, npub, k)
  crypto_aead_chacha20poly1305_ietf_encrypt: {
    args: ["ptr", "ptr", "ptr", "u64", "ptr", "u64", "ptr", "ptr", "ptr"],
    returns: FFIType.i32,
  },
  // (m, mlen_p, nsec, c, clen, ad, adlen, npub, k)
  crypto_aead_chacha20poly1305_ietf_decrypt: {
    args: ["ptr", "ptr", "ptr", "ptr", "u64", "ptr", "u64", "ptr", "ptr"],
    returns: FFIType.i32,
  },
  crypto_aead_xchacha20poly1305_ietf_encrypt: {
    args: ["ptr", "ptr", "ptr", "u64", "ptr", "u64", "ptr", "ptr", "ptr"],
    returns: FFIType.i32,
  },
  crypto_aead_xchacha20poly1305_ietf_decrypt: {
    args: ["ptr", "ptr", "ptr", "ptr", "u64", "ptr", "u64", "ptr", "ptr"],
    returns: FFIType.i32,
  },
} as const;

type Buf = Uint8Array | null;

/** The raw libsodium calls; lengths are in bytes; each returns 0 on success, −1 when a tag does not verify. */
export interface SodiumLibrary {
  /** Which library file was loaded. */
  readonly loadedFrom: string;
  /** crypto_aead_chacha20poly1305_ietf_encrypt: writes mlen + 16 bytes into `c`. */
  chachaEncrypt(c: Uint8Array, m: Buf, mlen: number, ad: Buf, adlen: number, npub: Uint8Array, k: Uint8Array): number;
  /** crypto_aead_chacha20poly1305_ietf_decrypt: writes clen − 16 bytes into `m`. */
  chachaDecrypt(m: Buf, c: Uint8Array, clen: number, ad: Buf, adlen: number, npub: Uint8Array, k: Uint8Array): number;
  /** crypto_aead_xchacha20poly1305_ietf_encrypt (24-byte nonce). */
  xchachaEncrypt(c: Uint8Array, m: Buf, mlen: number, ad: Buf, adlen: number, npub: Uint8Array, k: Uint8Array): number;
  /** crypto_aead_xchacha20poly1305_ietf_decrypt (24-byte nonce). */
  xchachaDecrypt(m: Buf, c: Uint8Array, clen: number, ad: Buf, adlen: number, npub: Uint8Array, k: Uint8Array): number;
}

/** The probe's answer: the library, or a sentence saying why it is unavailable. */
export type SodiumProbe = { ok: true; library: SodiumLibrary } | { ok: false; reason: string };

let cached: SodiumProbe | undefined;

/**
 * Loads libsodium once per process (the first of `names` that dlopen accepts),
 * runs sodium_init() and a seal/open/tamper self-check. Never throws.
 */
export function probeSodium(names: readonly string[] = SODIUM_LIBRARY_NAMES): SodiumProbe {
  if (names === SODIUM_LIBRARY_NAMES && cached) return cached;
  const result = load(names);
  if (names === SODIUM_LIBRARY_NAMES) cached = result;
  return result;
}

function load(names: readonly string[]): SodiumProbe {
  if (process.platform !== "linux")
    return { ok: false, reason: `bun:ffi libsodium is only set up for Linux (this is ${process.platform})` };
  const errors: string[] = [];
  for (const name of names) {
    let lib;
    try {
      lib = dlopen(name, SYMBOLS);
    } catch (e) {
      errors.push(`${name}: ${(e as Error).message.split("\n")[0]}`);
      continue;
    }
    const s = lib.symbols;
    if (s.sodium_init() < 0) return { ok: false, reason: `${name}: sodium_init() failed` };
    const library: SodiumLibrary = {
      loadedFrom: name,
      chachaEncrypt: (c, m, mlen, ad, adlen, npub, k) =>
        s.crypto_aead_chacha20poly1305_ietf_encrypt(
          c,
          null,
          mlen ? m : null,
          mlen,
          adlen ? ad : null,
          adlen,
          null,
          npub,
          k,
        ),
      chachaDecrypt: (m, c, clen, ad, adlen, npub, k) =>
        s.crypto_aead_chacha20poly1305_ietf_decrypt(
          clen > 16 ? m : null,
          null,
          null,
          c,
          clen,
          adlen ? ad : null,
          adlen,
          npub,
          k,
        ),
      xchachaEncrypt: (c, m, mlen, ad, adlen, npub, k) =>
        s.crypto_aead_xchacha20poly1305_ietf_encrypt(
          c,
          null,
          mlen ? m : null,
          mlen,
          adlen ? ad : null,
          adlen,
          null,
          npub,
          k,
        ),
      xchachaDecrypt: (m, c, clen, ad, adlen, npub, k) =>
        s.crypto_aead_xchacha20poly1305_ietf_decrypt(
          clen > 16 ? m : null,
          null,
          null,
          c,
          clen,
          adlen ? ad : null,
          adlen,
          npub,
          k,
        ),
    };
    const problem = selfCheck(library);
    return problem ? { ok: false, reason: `${name}: ${problem}` } : { ok: true, library };
  }
  return { ok: false, reason: `libsodium could not be loaded (install Debian's libsodium23): ${errors.join("; ")}` };
}

/** Seals and opens one message, then checks a flipped tag bit is refused; returns what went wrong, or null. */
function selfCheck(lib: SodiumLibrary): string | null {
  const key = new Uint8Array(32).fill(7);
  const nonce = new Uint8Array(12).fill(1);
  const msg = new TextEncoder().encode("beachball sodium probe");
  const ad = Uint8Array.of(1, 2, 3);
  const c = new Uint8Array(msg.length + 16);
  if (lib.chachaEncrypt(c, msg, msg.length, ad, ad.length, nonce, key) !== 0) return "encrypt failed";
  const m = new Uint8Array(msg.length);
  if (lib.chachaDecrypt(m, c, c.length, ad, ad.length, nonce, key) !== 0) return "decrypt of its own ciphertext failed";
  if (!m.every((b, i) => b === msg[i])) return "decrypt returned other bytes";
  c[c.length - 1] = c[c.length - 1]! ^ 1;
  if (lib.chachaDecrypt(m, c, c.length, ad, ad.length, nonce, key) === 0) return "a tampered tag was accepted";
  return null;
}
