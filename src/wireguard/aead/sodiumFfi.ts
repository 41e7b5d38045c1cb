/**
 * The fastest AEAD provider: the system's libsodium through bun:ffi
 * (native/sodium/sodium.ts), ≈ 6× @noble/ciphers on 1,400-byte packets here.
 * Writes straight into the caller's buffers: no copies.
 *
 * Owns: adapting the raw binding to the Aead port.
 * Must never: be constructed when the probe failed (selectAead checks first).
 */
import type { SodiumLibrary } from "../../../native/sodium/sodium.ts";
import { NONCE_BYTES, writeNonce, type Aead } from "./aead.ts";

/** Wraps a loaded libsodium as an Aead. */
export function sodiumFfiAead(lib: SodiumLibrary): Aead {
  const nonce = new Uint8Array(NONCE_BYTES);
  return {
    name: "sodium-ffi",
    sealInto(out, key, counter, plaintext, ad) {
      if (out.length !== plaintext.length + 16)
        throw new Error(`sealInto: out must be ${plaintext.length + 16} bytes, got ${out.length}`);
      writeNonce(nonce, counter);
      lib.chachaEncrypt(out, plaintext, plaintext.length, ad, ad?.length ?? 0, nonce, key);
    },
    openInto(out, key, counter, ciphertext, ad) {
      if (ciphertext.length < 16 || out.length !== ciphertext.length - 16 || key.length !== 32) return false;
      writeNonce(nonce, counter);
      return lib.chachaDecrypt(out, ciphertext, ciphertext.length, ad, ad?.length ?? 0, nonce, key) === 0;
    },
    xseal(key, n, plaintext, ad) {
      if (n.length !== 24 || key.length !== 32) throw new Error("xseal: key must be 32 bytes and nonce 24");
      const out = new Uint8Array(plaintext.length + 16);
      lib.xchachaEncrypt(out, plaintext, plaintext.length, ad, ad.length, n, key);
      return out;
    },
    xopen(key, n, ciphertext, ad) {
      if (ciphertext.length < 16 || n.length !== 24 || key.length !== 32) return null;
      const out = new Uint8Array(ciphertext.length - 16);
      return lib.xchachaDecrypt(out, ciphertext, ciphertext.length, ad, ad.length, n, key) === 0 ? out : null;
    },
  };
}
