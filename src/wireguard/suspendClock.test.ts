/**
 * Timers that stop during a laptop's suspend (issue 18 item 5): the
 * suspend-aware clock over fake time sources that jump (the wall clock moves
 * while the monotonic one, like performance.now on Linux, does not), and
 * two Devices on it: a session that outlived REJECT_AFTER_TIME or
 * REKEY_AFTER_TIME while the machine slept is not used after wake, the first
 * packet handshakes at once, and the timers due during the sleep run at the
 * first tick. The proxy's grant expiry on the same clock is in
 * src/proxy/grantExpiry.test.ts.
 */
import { describe, expect, test } from "bun:test";
import { icmpEcho } from "../../test/support/ipCraft.ts";
import { selectAead } from "./aead/select.ts";
import { messageType } from "./codec.ts";
import { MESSAGE_INITIATION, MESSAGE_TRANSPORT, REJECT_AFTER_TIME_MS, REKEY_AFTER_TIME_MS } from "./constants.ts";
import { systemClock } from "../protocol/clock.ts";
import { FakeClock } from "../protocol/fakeClock.ts";
import { MAX_ALARM_MS } from "./multipathTunnel.ts";
import { SUSPEND_DETECT_MIN_MS, SUSPEND_RECHECK_MS, SuspendAwareClock } from "./suspendClock.ts";
import { MAX_TIMER_SLEEP_MS } from "./timerDriver.ts";
import { makePair } from "./testPair.ts";

const { aead } = await selectAead();
const ping = (seq: number) => icmpEcho("10.0.0.1", "10.0.0.2", 7, seq, new TextEncoder().encode(`hello ${seq}`));

function suspendingPair() {
  const time = new FakeClock();
  const clock = Object.assign(new SuspendAwareClock(time), { advance: (ms: number) => time.advance(ms) });
  return { time, p: makePair({ aead, clock }) };
}

describe("timer-clock-ignores-suspend: the suspend-aware clock", () => {
  test("a suspend (wall moves, monotonic does not) is counted; awake time and small drift are not", () => {
    const time = new FakeClock();
    const c = new SuspendAwareClock(time);
    const t0 = c.monoMs();
    time.advance(5_000);
    expect(c.monoMs() - t0).toBe(5_000);
    time.suspend(SUSPEND_DETECT_MIN_MS - 1); // drift or slewing: not sleep
    expect(c.monoMs() - t0).toBe(5_000);
    time.suspend(600_000);
    expect(c.monoMs() - t0).toBe(605_000);
    expect(c.asleepMs()).toBe(600_000);
    time.advance(1_000);
    expect(c.monoMs() - t0).toBe(606_000);
  });

  test("a backward wall step is ignored: the clock never goes back and keeps the monotonic pace", () => {
    const time = new FakeClock();
    const c = new SuspendAwareClock(time);
    const t0 = c.monoMs();
    time.suspend(100_000);
    expect(c.monoMs() - t0).toBe(100_000);
    time.stepWall(-3_600_000);
    expect(c.monoMs() - t0).toBe(100_000);
    time.advance(2_000);
    expect(c.monoMs() - t0).toBe(102_000);
  });

  test("over the system clock it never goes backwards, and its wall reading is the system's", () => {
    const c = new SuspendAwareClock(systemClock);
    let last = c.monoMs();
    for (let i = 0; i < 10_000; i++) {
      const now = c.monoMs();
      expect(now).toBeGreaterThanOrEqual(last);
      last = now;
    }
    const before = Date.now();
    const wall = c.wallMs();
    expect(wall).toBeGreaterThanOrEqual(before);
    expect(wall).toBeLessThanOrEqual(Date.now());
  });

  test("every alarm sleeps at most SUSPEND_RECHECK_MS, so a deadline a suspend made due runs soon after wake", () => {
    expect(MAX_TIMER_SLEEP_MS).toBeLessThanOrEqual(SUSPEND_RECHECK_MS);
    expect(MAX_ALARM_MS).toBeLessThanOrEqual(SUSPEND_RECHECK_MS);
  });
});

describe("timer-clock-ignores-suspend: Devices on the suspend-aware clock", () => {
  test("asleep past REJECT_AFTER_TIME: the first packet after wake handshakes at once instead of using the dead session", () => {
    const { time, p } = suspendingPair();
    p.a.sendPacket(ping(1));
    p.net.pump();
    expect(p.a.counters.initiationsSent).toBe(1);
    time.suspend(REJECT_AFTER_TIME_MS + 10_000);
    p.a.sendPacket(ping(2));
    expect(p.a.counters.initiationsSent).toBe(2);
    expect(p.pa.stagedCount).toBe(1);
    const sent = p.net.queue.map((f) => messageType(f.bytes));
    expect(sent).toContain(MESSAGE_INITIATION);
    expect(sent).not.toContain(MESSAGE_TRANSPORT);
    p.net.pump();
    expect(p.net.delivered.get("b")!.length).toBe(2);
  });

  test("asleep past REKEY_AFTER_TIME: the initiator's next send starts a new handshake", () => {
    const { time, p } = suspendingPair();
    p.a.sendPacket(ping(1));
    p.net.pump();
    time.suspend(REKEY_AFTER_TIME_MS + 5_000);
    p.a.sendPacket(ping(2));
    expect(p.a.counters.initiationsSent).toBe(2);
  });

  test("a packet sealed before the sleep is refused after it by the receiver (session-expired)", () => {
    const { time, p } = suspendingPair();
    p.a.sendPacket(ping(1));
    p.net.pump();
    p.net.filter = (f) => (f.from === "a" && messageType(f.bytes) === MESSAGE_TRANSPORT ? "hold" : "pass");
    p.a.sendPacket(ping(2));
    p.net.pump();
    p.net.filter = () => "pass";
    const late = p.net.held.pop()!;
    time.suspend(REJECT_AFTER_TIME_MS + 10_000);
    p.net.inject("a", "b", late.bytes);
    expect(p.b.counters.drops["session-expired"]).toBe(1);
  });

  test("timers due during the sleep run at the first tick after wake: key material zeroed after 3 × REJECT_AFTER_TIME asleep", () => {
    const { time, p } = suspendingPair();
    p.a.sendPacket(ping(1));
    p.net.pump();
    expect(p.pa.keypairs.current).not.toBeNull();
    const deadline = p.a.nextDeadlineMs()!;
    time.suspend(3 * REJECT_AFTER_TIME_MS + 10_000);
    expect(p.clock.monoMs()).toBeGreaterThan(deadline);
    p.a.tick();
    p.b.tick();
    expect(p.pa.keypairs.current).toBeNull();
    expect(p.pb.keypairs.current).toBeNull();
  });
});
