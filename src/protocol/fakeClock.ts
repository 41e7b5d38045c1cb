/**
 * The one test double of the clock port (src/protocol/clock.ts), used by the
 * unit tests, the benches and the seeded simulation: a Clock that moves only
 * when the test says so. advance() moves both readings, as awake time does;
 * suspend() moves only the wall reading, as performance.now and
 * CLOCK_MONOTONIC behave while a Linux laptop sleeps; stepWall() moves the
 * wall reading either way (NTP, a user setting the time).
 *
 * Owns: fake time in tests only. Must never: be wired into a daemon or a
 * worker (they take systemClock or the suspend-aware clock).
 */
import type { Clock } from "./clock.ts";

/** Default starting wall time of a FakeClock: 2024-01-01T00:00:00Z, ms since the Unix epoch. */
export const FAKE_CLOCK_WALL_START_MS = Date.UTC(2024, 0, 1);

/** Default starting monotonic reading of a FakeClock, ms. */
export const FAKE_CLOCK_MONO_START_MS = 1_000_000;

/** Where a FakeClock starts (ms); each reading defaults to the constants above. */
export interface FakeClockStart {
  wallMs?: number;
  monoMs?: number;
}

/** A Clock moved by hand (a named test double; see the module doc). */
export class FakeClock implements Clock {
  private wall: number;
  private mono: number;

  /** Starts at `start` (defaults FAKE_CLOCK_WALL_START_MS and FAKE_CLOCK_MONO_START_MS). */
  constructor(start: FakeClockStart = {}) {
    this.wall = start.wallMs ?? FAKE_CLOCK_WALL_START_MS;
    this.mono = start.monoMs ?? FAKE_CLOCK_MONO_START_MS;
  }

  wallMs(): number {
    return this.wall;
  }

  monoMs(): number {
    return this.mono;
  }

  /** Awake time passes: both readings move forward by `ms` (≥ 0; otherwise throws). */
  advance(ms: number): void {
    if (!(ms >= 0)) throw new Error(`FakeClock.advance: ${ms} is not a non-negative number`);
    this.wall += ms;
    this.mono += ms;
  }

  /** Moves both readings forward to wall time `wallMs` (no-op when it is not later than now). */
  advanceTo(wallMs: number): void {
    if (!(wallMs > this.wall)) return;
    this.mono += wallMs - this.wall;
    this.wall = wallMs;
  }

  /** The machine sleeps `ms` (≥ 0; otherwise throws): only the wall reading moves. */
  suspend(ms: number): void {
    if (!(ms >= 0)) throw new Error(`FakeClock.suspend: ${ms} is not a non-negative number`);
    this.wall += ms;
  }

  /** The wall reading is stepped by `ms` (either sign); the monotonic one does not move. */
  stepWall(ms: number): void {
    this.wall += ms;
  }
}
