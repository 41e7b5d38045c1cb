/**
 * The clock/timer port the stack runs on (docs/architecture.md, "Ports"): the stack asks
 * for one callback at a time and reads the time in ms. The real adapter uses
 * performance.now() and setTimeout; tests pass a fake (timers.fake.ts).
 */

/** A cancellable timer. */
export interface TimerHandle {
  cancel(): void;
}

/** Monotonic time and one-shot timers, ms. */
export interface TimerPort {
  /** Monotonic milliseconds (any origin). */
  now(): number;
  /** Calls `fn` once after `ms` milliseconds. */
  after(ms: number, fn: () => void): TimerHandle;
}

/** The real clock: performance.now() and setTimeout (an open stack keeps the process alive, as a socket does). */
export const realTimers: TimerPort = {
  now: () => performance.now(),
  after(ms, fn) {
    const t = setTimeout(fn, ms);
    return { cancel: () => clearTimeout(t) };
  },
};
