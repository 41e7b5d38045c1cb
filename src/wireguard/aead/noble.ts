/**
 * The reference AEAD provider: @noble/ciphers (audited, pure TypeScript).
 * It is the slowest of the three (≈ 55 MB/s on 1,400-byte packets here), so
 * the Device never selects it; tests check the other two against it and
 * bench/tunnel.ts uses it as the baseline.
 *
 * Owns: adapting @noble/ciphers to the Aead port.
 * Must never: be chosen by selectAead().
 */
import { chacha20poly1305, xchacha20poly1305 } from "@noble/ciphers/chacha.js";
import { NONCE_BYTES, writeNonce, type Aead } from "./aead.ts";

const EMPTY = new Uint8Array(0);

/** Creates the @noble/ciphers provider. */
export function nobleAead(): Aead {
  const nonce = new Uint8Array(NONCE_BYTES);
  return {
    name: "noble",
    sealInto(out, key, counter, plaintext, ad) {
      writeNonce(nonce, counter);
      chacha20poly1305(key, nonce, ad ?? EMPTY).encrypt(plaintext, out);
    },
    openInto(out, key, counter, ciphertext, ad) {
      if (ciphertext.length < 16 || out.length !== ciphertext.length - 16) return false;
      writeNonce(nonce, counter);
      try {
        chacha20poly1305(key, nonce, ad ?? EMPTY).decrypt(ciphertext, out);
        return true;
      } catch {
        return false;
      }
    },
    xseal(key, n, plaintext, ad) {
      return xchacha20poly1305(key, n, ad).encrypt(plaintext);
    },
    xopen(key, n, ciphertext, ad) {
      if (ciphertext.length < 16 || n.length !== 24) return null;
      try {
        return xchacha20poly1305(key, n, ad).decrypt(ciphertext);
      } catch {
        return null;
      }
    },
  };
}
