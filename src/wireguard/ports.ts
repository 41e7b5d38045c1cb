/**
 * The side-effect ports of the WireGuard library: the suspend-aware process
 * clock (the tree's one Clock, src/protocol/clock.ts) and a source of
 * randomness, with the real adapters. The clock's fake is
 * src/protocol/fakeClock.ts; the seeded random source is in fakes.ts.
 *
 * Owns: every read of time and every random byte src/wireguard uses (keys,
 * sender indices, cookie secrets, timer jitter), so a test can drive a Device
 * through hours of protocol time deterministically (docs/architecture.md, "Ports").
 * Must never: be bypassed by a direct Date.now(), performance.now() or
 * crypto.getRandomValues() elsewhere in src/wireguard.
 */
import { randomFillSync } from "node:crypto";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { SuspendAwareClock } from "./suspendClock.ts";

/** Cryptographically secure random bytes. */
export interface WgRandom {
  /** Fills `out` with random bytes and returns it. */
  fill(out: Uint8Array): Uint8Array;
}

/**
 * The WireGuard process clock (src/protocol/clock.ts's Clock): monoMs() is
 * performance.now() plus the time the machine slept (detected against
 * Date.now(), src/wireguard/suspendClock.ts), and drives every timer and
 * session-age decision (whitepaper §6), so a session outlives neither its
 * lifetime nor a laptop's sleep; wallMs() is Date.now(), only for TAI64N
 * timestamps (whitepaper §5.1).
 */
export const systemSuspendAwareClock: Clock = new SuspendAwareClock(systemClock);

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
