/**
 * A monotonic clock that counts system suspend, built from two sources: a
 * monotonic one that stops while the machine sleeps (performance.now on
 * Linux is CLOCK_MONOTONIC, on macOS mach_absolute_time; neither counts
 * suspend) and the wall clock, which does. Each read compares how far both
 * moved since the previous read; when the wall clock moved more than
 * SUSPEND_DETECT_MIN_MS further, the difference is taken as time asleep and
 * added for good (issue 18 item 5: a laptop asleep past the session's
 * REJECT_AFTER_TIME must handshake at once on wake, whitepaper §6.2).
 *
 * Why not CLOCK_BOOTTIME: it is Linux-only and needs bun:ffi per read; the
 * proxy also runs on macOS laptops. The wall check is portable and pure.
 * Its one error is harmless: a forward step of the wall clock (NTP) also
 * counts as sleep, which can only make timers fire early (an extra
 * handshake), never late. Backward steps are ignored: the result never
 * goes backwards and never runs slower than the monotonic source.
 *
 * Owns: the accumulated sleep. Must never: read a clock other than its two
 * sources (ports.ts systemTimeSources in production; a test passes fakes
 * that jump, fakes.ts FakeSystemTime).
 */
import type { TimeSources, WgClock } from "./ports.ts";

/**
 * A forward gap of the wall clock over the monotonic clock between two
 * reads smaller than this (ms) is drift or NTP slewing, not sleep.
 * NTP slews at most 500 ppm, so 2 s is reached only after ≈ 67 minutes
 * without a read.
 */
export const SUSPEND_DETECT_MIN_MS = 2_000;

/** A WgClock whose nowMs() counts time asleep; also reports how much it counted. */
export interface SuspendAwareClock extends WgClock {
  /** Total ms counted as asleep so far. */
  asleepMs(): number;
}

/** Builds the suspend-aware clock (see the module doc) over `src`. */
export function suspendAwareClock(src: TimeSources): SuspendAwareClock {
  let lastMono = src.monoMs();
  let lastWall = src.wallMs();
  let asleep = 0;
  let last = lastMono;
  const nowMs = (): number => {
    const mono = src.monoMs();
    const wall = src.wallMs();
    const gap = wall - lastWall - (mono - lastMono);
    if (gap > SUSPEND_DETECT_MIN_MS) asleep += gap;
    lastMono = mono;
    lastWall = wall;
    last = Math.max(last, mono + asleep);
    return last;
  };
  return { nowMs, wallMs: () => src.wallMs(), asleepMs: () => (nowMs(), asleep) };
}

/**
 * Longest an alarm sleeps on setTimeout (ms) before it re-reads the clock.
 * setTimeout runs on the monotonic clock, which stops during suspend, so a
 * sleep armed before suspend ends that much awake time after wake; capping
 * it makes a deadline the sleep made due run within this long of waking.
 */
export const SUSPEND_RECHECK_MS = 1_000;
