/**
 * The side-effect ports of the WireGuard library: a clock and a source of
 * randomness, with the real adapters. Fakes for tests live in fakes.ts.
 *
 * Owns: every read of time and every random byte src/wireguard uses (keys,
 * sender indices, cookie secrets, timer jitter), so a test can drive a Device
 * through hours of protocol time deterministically (docs/architecture.md, "Ports").
 * Must never: be bypassed by a direct Date.now(), performance.now() or
 * crypto.getRandomValues() elsewhere in src/wireguard.
 */
import { randomFillSync } from "node:crypto";
import { suspendAwareClock } from "./suspendClock.ts";

/** Time as the protocol needs it. */
export interface WgClock {
  /**
   * Monotonic milliseconds since an arbitrary origin that count system
   * suspend; drives every timer and every session-age decision (whitepaper
   * §6), so a session outlives neither its lifetime nor a laptop's sleep.
   */
  nowMs(): number;
  /** Wall-clock milliseconds since the Unix epoch; only for TAI64N timestamps (whitepaper §5.1). */
  wallMs(): number;
}

/** Cryptographically secure random bytes. */
export interface WgRandom {
  /** Fills `out` with random bytes and returns it. */
  fill(out: Uint8Array): Uint8Array;
}

/** The two raw time sources the suspend-aware clock is built from (src/wireguard/suspendClock.ts). */
export interface TimeSources {
  /** Monotonic ms that may stop during suspend (performance.now()). */
  monoMs(): number;
  /** Wall-clock ms since the Unix epoch (Date.now()); counts suspend, may step. */
  wallMs(): number;
}

/** The process's raw time sources: performance.now() and Date.now(). */
export const systemTimeSources: TimeSources = {
  monoMs: () => performance.now(),
  wallMs: () => Date.now(),
};

/**
 * The process clock: performance.now() plus the time the machine slept
 * (detected against Date.now(), src/wireguard/suspendClock.ts) for timers,
 * Date.now() for timestamps.
 */
export const systemClock: WgClock = suspendAwareClock(systemTimeSources);

/** The operating system's CSPRNG through node:crypto. */
export const systemRandom: WgRandom = {
  fill: (out) => {
    randomFillSync(out);
    return out;
  },
};

/** A uniformly random unsigned 32-bit integer from `random`. */
export function randomU32(random: WgRandom): number {
  const b = random.fill(new Uint8Array(4));
  return (b[0]! | (b[1]! << 8) | (b[2]! << 16) | (b[3]! << 24)) >>> 0;
}
