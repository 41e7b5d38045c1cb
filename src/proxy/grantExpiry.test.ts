/**
 * The proxy's grant expiry across a suspend (issue 18 item 5,
 * timer-clock-ignores-suspend): with the wall clock past the expiry while the
 * monotonic clock stood still, the owner's deadline is due at once and the
 * next alarm ends the run.
 */
import { describe, expect, test } from "bun:test";
import { FakeClock } from "../protocol/fakeClock.ts";
import { SuspendAwareClock } from "../wireguard/suspendClock.ts";
import { GrantExpiry } from "./grantExpiry.ts";

describe("timer-clock-ignores-suspend: grant expiry", () => {
  test("asleep past the grant's expiry: the deadline is due on wake and the next alarm ends the run, once", () => {
    const time = new FakeClock();
    const clock = new SuspendAwareClock(time);
    let ended = 0;
    const e = new GrantExpiry(time.wallMs() + 600_000, clock, () => ended++);
    expect(e.deadlineMs()! - clock.monoMs()).toBe(600_000);
    time.advance(60_000);
    e.tick();
    expect(ended).toBe(0);
    time.suspend(3_600_000);
    expect(e.deadlineMs()!).toBeLessThanOrEqual(clock.monoMs());
    e.tick();
    e.tick();
    expect(ended).toBe(1);
    expect(e.deadlineMs()).toBeNull();
  });

  test("awake: not before the expiry, at it", () => {
    const time = new FakeClock();
    const clock = new SuspendAwareClock(time);
    let ended = 0;
    const e = new GrantExpiry(time.wallMs() + 10_000, clock, () => ended++);
    time.advance(9_999);
    e.tick();
    expect(ended).toBe(0);
    time.advance(1);
    e.tick();
    expect(ended).toBe(1);
  });
});
