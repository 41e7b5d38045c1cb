/**
 * Chooses the AEAD provider at runtime: libsodium through bun:ffi when the
 * probe succeeds, else libsodium-wrappers (WebAssembly). Measured order on
 * this platform (docs/adr/0101-userspace-wireguard.md): ffi ≈ 2× WebAssembly
 * ≈ 6× @noble/ciphers, which is never chosen (it is the test reference).
 *
 * Owns: the choice and the reason for it (reported, for `bb doctor` later).
 * Must never: fail when libsodium is missing: it falls back and says why.
 */
import { probeSodium } from "../../../native/sodium/sodium.ts";
import type { Aead, AeadProviderName } from "./aead.ts";
import { sodiumFfiAead } from "./sodiumFfi.ts";
import { sodiumWasmAead } from "./sodiumWasm.ts";

/** The chosen provider and, when it is not the fastest, why the faster one was skipped. */
export interface AeadSelection {
  aead: Aead;
  /** Why sodium-ffi was not used (null when it was). */
  ffiUnavailable: string | null;
}

/**
 * Picks the fastest available provider; `prefer` forces one (benches, tests).
 * Throws only when "sodium-ffi" is forced and the probe fails (with its reason).
 */
export async function selectAead(prefer?: Exclude<AeadProviderName, "noble">): Promise<AeadSelection> {
  if (prefer !== "sodium-wasm") {
    const probe = probeSodium();
    if (probe.ok) return { aead: sodiumFfiAead(probe.library), ffiUnavailable: null };
    if (prefer === "sodium-ffi") throw new Error(`sodium-ffi requested but unavailable: ${probe.reason}`);
    return { aead: await sodiumWasmAead(), ffiUnavailable: probe.reason };
  }
  return { aead: await sodiumWasmAead(), ffiUnavailable: "sodium-wasm requested" };
}
