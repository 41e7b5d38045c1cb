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
 * sources (src/protocol/clock.ts systemClock in production; a test passes
 * a src/protocol/fakeClock.ts FakeClock and suspends it).
 */
import type { Clock } from "../protocol/clock.ts";

/**
 * A forward gap of the wall clock over the monotonic clock between two
 * reads smaller than this (ms) is drift or NTP slewing, not sleep.
 * NTP slews at most 500 ppm, so 2 s is reached only after ≈ 67 minutes
 * without a read.
 */
export const SUSPEND_DETECT_MIN_MS = 2_000;

/**
 * A Clock whose monoMs() counts time asleep (see the module doc); wallMs()
 * is the source's. Also reports how much sleep it counted.
 */
export class SuspendAwareClock implements Clock {
  private lastMono: number;
  private lastWall: number;
  private asleep = 0;
  private last: number;

  /** Reads both of `src`'s readings once, as the origin of the sleep detection. */
  constructor(private readonly src: Clock) {
    this.lastMono = src.monoMs();
    this.lastWall = src.wallMs();
    this.last = this.lastMono;
  }

  monoMs(): number {
    const mono = this.src.monoMs();
    const wall = this.src.wallMs();
    const gap = wall - this.lastWall - (mono - this.lastMono);
    if (gap > SUSPEND_DETECT_MIN_MS) this.asleep += gap;
    this.lastMono = mono;
    this.lastWall = wall;
    this.last = Math.max(this.last, mono + this.asleep);
    return this.last;
  }

  wallMs(): number {
    return this.src.wallMs();
  }

  /** Total ms counted as asleep so far (reads the sources first). */
  asleepMs(): number {
    this.monoMs();
    return this.asleep;
  }
}

/**
 * Longest an alarm sleeps on setTimeout (ms) before it re-reads the clock.
 * setTimeout runs on the monotonic clock, which stops during suspend, so a
 * sleep armed before suspend ends that much awake time after wake; capping
 * it makes a deadline the sleep made due run within this long of waking.
 */
export const SUSPEND_RECHECK_MS = 1_000;
