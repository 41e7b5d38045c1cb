/**
 * The one clock port (src/protocol/clock.ts) and its one fake
 * (src/protocol/fakeClock.ts): the system clock's monotonic reading never
 * goes backwards and its wall reading is Date.now(); the fake moves only
 * when told, both readings with advance(), only the wall one with suspend()
 * and stepWall(). The suspend-aware clock over it is tested in
 * src/wireguard/suspendClock.test.ts.
 */
import { describe, expect, test } from "bun:test";
import { systemClock } from "./clock.ts";
import { FAKE_CLOCK_MONO_START_MS, FAKE_CLOCK_WALL_START_MS, FakeClock } from "./fakeClock.ts";

describe("systemClock", () => {
  test("monoMs never goes backwards over many reads", () => {
    let last = systemClock.monoMs();
    for (let i = 0; i < 10_000; i++) {
      const now = systemClock.monoMs();
      expect(now).toBeGreaterThanOrEqual(last);
      last = now;
    }
  });

  test("wallMs is ms since the Unix epoch (between two Date.now() reads)", () => {
    const before = Date.now();
    const wall = systemClock.wallMs();
    expect(wall).toBeGreaterThanOrEqual(before);
    expect(wall).toBeLessThanOrEqual(Date.now());
  });
});

describe("FakeClock", () => {
  test("starts at the given readings, or at the documented defaults", () => {
    const d = new FakeClock();
    expect([d.wallMs(), d.monoMs()]).toEqual([FAKE_CLOCK_WALL_START_MS, FAKE_CLOCK_MONO_START_MS]);
    const c = new FakeClock({ wallMs: 1_800_000_000_000, monoMs: 5 });
    expect([c.wallMs(), c.monoMs()]).toEqual([1_800_000_000_000, 5]);
  });

  test("does not move by itself; advance() moves both readings", () => {
    const c = new FakeClock({ wallMs: 1_000, monoMs: 0 });
    expect([c.wallMs(), c.monoMs()]).toEqual([1_000, 0]);
    c.advance(250);
    expect([c.wallMs(), c.monoMs()]).toEqual([1_250, 250]);
  });

  test("advanceTo() moves both readings to a later wall time and never backwards", () => {
    const c = new FakeClock({ wallMs: 1_000, monoMs: 0 });
    c.advanceTo(4_000);
    expect([c.wallMs(), c.monoMs()]).toEqual([4_000, 3_000]);
    c.advanceTo(2_000);
    expect([c.wallMs(), c.monoMs()]).toEqual([4_000, 3_000]);
  });

  test("suspend() and stepWall() move only the wall reading; monoMs never goes backwards", () => {
    const c = new FakeClock({ wallMs: 1_000, monoMs: 0 });
    c.suspend(60_000);
    expect([c.wallMs(), c.monoMs()]).toEqual([61_000, 0]);
    c.stepWall(-30_000);
    expect([c.wallMs(), c.monoMs()]).toEqual([31_000, 0]);
  });

  test("a negative or non-number advance or suspend is refused", () => {
    const c = new FakeClock();
    expect(() => c.advance(-1)).toThrow("not a non-negative number");
    expect(() => c.advance(Number.NaN)).toThrow("not a non-negative number");
    expect(() => c.suspend(-1)).toThrow("not a non-negative number");
    expect(c.monoMs()).toBe(FAKE_CLOCK_MONO_START_MS);
  });
});
