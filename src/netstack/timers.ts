/**
 * The clock/timer port the stack runs on (docs/architecture.md, "Ports"): the stack asks
 * for one callback at a time and reads the time in ms, as the one Clock's
 * monoMs (src/protocol/clock.ts). The real adapter uses systemClock and
 * setTimeout; tests pass a fake (timers.fake.ts) whose reading moves with
 * the timers it runs.
 */
import { type Clock, systemClock } from "../protocol/clock.ts";

/** A cancellable timer. */
export interface TimerHandle {
  cancel(): void;
}

/** Monotonic time (the Clock's monoMs) and one-shot timers, ms. */
export interface TimerPort extends Pick<Clock, "monoMs"> {
  /** Calls `fn` once after `ms` milliseconds. */
  after(ms: number, fn: () => void): TimerHandle;
}

/** The real clock: systemClock's monoMs and setTimeout (an open stack keeps the process alive, as a socket does). */
export const realTimers: TimerPort = {
  monoMs: () => systemClock.monoMs(),
  after(ms, fn) {
    const t = setTimeout(fn, ms);
    return { cancel: () => clearTimeout(t) };
  },
};
