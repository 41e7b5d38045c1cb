/**
 * The portable AEAD provider: libsodium compiled to WebAssembly
 * (libsodium-wrappers on npm), ≈ 3× @noble/ciphers here. Used wherever the
 * system's libsodium cannot be loaded through bun:ffi.
 *
 * Owns: loading the module once (`await sodium.ready`) and adapting it to the
 * Aead port. libsodium-wrappers copies arguments into the WebAssembly heap
 * and returns a fresh array, so sealInto/openInto copy once more into `out`.
 * Must never: let libsodium's exception on a bad tag escape: open returns false.
 */
import sodium from "libsodium-wrappers";
import { NONCE_BYTES, writeNonce, type Aead } from "./aead.ts";

/** Loads libsodium-wrappers and returns its provider; rejects only when the WebAssembly module cannot start. */
export async function sodiumWasmAead(): Promise<Aead> {
  await sodium.ready;
  const nonce = new Uint8Array(NONCE_BYTES);
  return {
    name: "sodium-wasm",
    sealInto(out, key, counter, plaintext, ad) {
      writeNonce(nonce, counter);
      out.set(sodium.crypto_aead_chacha20poly1305_ietf_encrypt(plaintext, ad, null, nonce, key));
    },
    openInto(out, key, counter, ciphertext, ad) {
      if (ciphertext.length < 16 || out.length !== ciphertext.length - 16) return false;
      writeNonce(nonce, counter);
      try {
        out.set(sodium.crypto_aead_chacha20poly1305_ietf_decrypt(null, ciphertext, ad, nonce, key));
        return true;
      } catch {
        return false;
      }
    },
    xseal(key, n, plaintext, ad) {
      return sodium.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, ad, null, n, key);
    },
    xopen(key, n, ciphertext, ad) {
      if (ciphertext.length < 16 || n.length !== 24) return null;
      try {
        return sodium.crypto_aead_xchacha20poly1305_ietf_decrypt(null, ciphertext, ad, n, key);
      } catch {
        return null;
      }
    },
  };
}
