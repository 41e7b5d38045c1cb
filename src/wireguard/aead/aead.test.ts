/**
 * The three AEAD providers agree on random inputs (ChaCha20-Poly1305 with
 * WireGuard's counter nonce, XChaCha20-Poly1305), each refuses a tampered
 * tag, ciphertext or additional data, and @noble/ciphers is the reference.
 * Also the RFC 8439 §2.8.2 test vector, so the reference itself is checked.
 * Inputs come from a seeded generator (SeededRandom, seed printed on failure).
 */
import { describe, expect, test } from "bun:test";
import { chacha20poly1305 } from "@noble/ciphers/chacha.js";
import { probeSodium } from "../../../native/sodium/sodium.ts";
import { SeededRandom } from "../fakes.ts";
import { open, seal, writeNonce, type Aead } from "./aead.ts";
import { nobleAead } from "./noble.ts";
import { selectAead } from "./select.ts";
import { sodiumFfiAead } from "./sodiumFfi.ts";
import { sodiumWasmAead } from "./sodiumWasm.ts";

const hex = (s: string) => Uint8Array.from(Buffer.from(s.replace(/\s+/g, ""), "hex"));
const reference = nobleAead();
const probe = probeSodium();
const providers: Aead[] = [reference, await sodiumWasmAead()];
if (probe.ok) providers.push(sodiumFfiAead(probe.library));
else console.log(`SKIP sodium-ffi cross-check: ${probe.reason}`);

describe("AEAD providers", () => {
  test("the reference matches RFC 8439 §2.8.2 (its nonce has a non-zero constant, so @noble is called directly)", () => {
    const key = hex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f");
    const pt = new TextEncoder().encode(
      "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.",
    );
    const ad = hex("50515253c0c1c2c3c4c5c6c7");
    const out = chacha20poly1305(key, hex("070000004041424344454647"), ad).encrypt(pt);
    expect(Buffer.from(out.subarray(0, 16)).toString("hex")).toBe("d31a8d34648e60db7b86afbc53ef7ec2");
    expect(Buffer.from(out.subarray(out.length - 16)).toString("hex")).toBe("1ae10b594f09e26a7e902ecbd0600691");
  });

  test("WireGuard's nonce is 4 zero bytes then the counter as u64 little-endian (whitepaper §5.4.6)", () => {
    const n = new Uint8Array(12).fill(0xff);
    writeNonce(n, 2 ** 32 + 5);
    expect(Buffer.from(n).toString("hex")).toBe("000000000500000001000000");
    writeNonce(n, Number.MAX_SAFE_INTEGER);
    expect(Buffer.from(n).toString("hex")).toBe("00000000ffffffffffff1f00");
  });

  test("sodium-ffi is available on Debian with libsodium23 (the probe says why not otherwise)", () => {
    if (!probe.ok) expect(probe.reason).toMatch(/libsodium/);
    else expect(probe.library.loadedFrom).toMatch(/libsodium/);
  });

  test("a probe of a missing library reports a reason instead of throwing", () => {
    const p = probeSodium(["libdoes-not-exist-bb.so.99"]);
    expect(p.ok).toBe(false);
    if (!p.ok) expect(p.reason).toContain("libdoes-not-exist-bb.so.99");
  });

  test("selectAead picks sodium-ffi when the probe succeeds, else sodium-wasm with the reason", async () => {
    const s = await selectAead();
    expect(s.aead.name).toBe(probe.ok ? "sodium-ffi" : "sodium-wasm");
    expect(s.ffiUnavailable === null).toBe(probe.ok);
    expect((await selectAead("sodium-wasm")).aead.name).toBe("sodium-wasm");
  });

  test("all providers agree on 600 random inputs and refuse tampering", () => {
    const seed = 0x5eed_0001;
    const rng = new SeededRandom(seed);
    for (let i = 0; i < 600; i++) {
      const key = rng.bytes(32);
      const len = i % 10 === 0 ? 0 : rng.below(1500);
      const pt = rng.bytes(len);
      const ad = i % 3 === 0 ? null : rng.bytes(rng.below(64));
      const counter = i % 7 === 0 ? rng.below(2 ** 32) * 2 ** 21 + rng.below(2 ** 21) : rng.below(2 ** 32);
      const ref = seal(reference, key, counter, pt, ad);
      for (const p of providers) {
        const ct = seal(p, key, counter, pt, ad);
        expect(Buffer.from(ct).equals(Buffer.from(ref)), `${p.name} seal differs (seed ${seed}, case ${i})`).toBe(true);
        for (const q of providers) expect(open(q, key, counter, ct, ad), `${q.name} open of ${p.name}`).toEqual(pt);
        const t = Uint8Array.from(ct);
        const at = rng.below(t.length);
        t[at] = t[at]! ^ (1 << rng.below(8));
        expect(open(p, key, counter, t, ad), `${p.name} accepted a flipped bit at ${at}/${t.length}`).toBeNull();
        expect(open(p, key, counter + 1, ct, ad), `${p.name} accepted another counter`).toBeNull();
        if (ad && ad.length)
          expect(open(p, key, counter, ct, ad.subarray(1)), `${p.name} accepted other AD`).toBeNull();
        expect(open(p, key, counter, ct.subarray(0, Math.min(15, ct.length)), ad)).toBeNull();
      }
    }
  });

  test("sealing in place (out starts where plaintext starts) gives the same bytes", () => {
    const rng = new SeededRandom(0x5eed_0003);
    for (let i = 0; i < 100; i++) {
      const key = rng.bytes(32);
      const pt = rng.bytes(rng.below(1500));
      const ref = seal(reference, key, i, pt, null);
      for (const p of providers) {
        const buf = new Uint8Array(16 + pt.length + 16);
        buf.set(pt, 16);
        const body = buf.subarray(16);
        p.sealInto(body, key, i, body.subarray(0, pt.length), null);
        expect(Buffer.from(body).equals(Buffer.from(ref)), `${p.name} in place, case ${i}`).toBe(true);
      }
    }
  });

  test("XChaCha20-Poly1305 agrees across providers and refuses tampering", () => {
    const rng = new SeededRandom(0x5eed_0002);
    for (let i = 0; i < 200; i++) {
      const key = rng.bytes(32);
      const nonce = rng.bytes(24);
      const pt = rng.bytes(16);
      const ad = rng.bytes(16);
      const ref = reference.xseal(key, nonce, pt, ad);
      for (const p of providers) {
        const ct = p.xseal(key, nonce, pt, ad);
        expect(Buffer.from(ct).equals(Buffer.from(ref)), p.name).toBe(true);
        expect(p.xopen(key, nonce, ct, ad)).toEqual(pt);
        const t = Uint8Array.from(ct);
        const at = rng.below(t.length);
        t[at] = t[at]! ^ 0x80;
        expect(p.xopen(key, nonce, t, ad)).toBeNull();
        expect(p.xopen(key, nonce.subarray(1), ct, ad)).toBeNull();
      }
    }
  });
});
