/**
 * The one clock port of the tree (issue 19 item 4): every role and library
 * reads time only through a Clock, so tests and the seeded simulation drive
 * it by hand (src/protocol/fakeClock.ts) and no module guesses whether a
 * number is wall or monotonic time.
 *
 * Two readings, never mixed: wallMs() for anything compared with a time
 * another machine wrote or that is stored (leases, grant expiry, token
 * freshness, TAI64N timestamps, log lines), monoMs() for deadlines, timers,
 * buckets and ages inside one process. The WireGuard timers need a monotonic
 * reading that also counts suspend: src/wireguard/suspendClock.ts builds one
 * over this module's systemClock.
 *
 * Owns: the interface and the process clock. Must never: be bypassed by a
 * direct Date.now() or performance.now() where a Clock is passed in.
 */

/** Time as every part of the tree reads it; both readings in milliseconds. */
export interface Clock {
  /** Milliseconds since the Unix epoch (may step: NTP, a user setting the time). */
  wallMs(): number;
  /**
   * Monotonic milliseconds from an arbitrary origin; never goes backwards.
   * The system clock's stops during suspend (performance.now); the
   * suspend-aware one (src/wireguard/suspendClock.ts) counts it.
   */
  monoMs(): number;
}

/** The process clock: Date.now() for wall time, performance.now() for monotonic time (stops during suspend). */
export const systemClock: Clock = {
  wallMs: () => Date.now(),
  monoMs: () => performance.now(),
};
