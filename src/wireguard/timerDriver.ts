/**
 * Drives a Device's timers with one real setTimeout, always re-armed to the
 * earliest deadline (one alarm, re-armed from the earliest due deadline, as
 * the object runtime does), for transports running on the process clock.
 *
 * Owns: that one timer. Callers call poke() after anything that may have set
 * an earlier deadline (a datagram in, a packet out). Must never: keep the
 * process alive after stop(), or run tick() re-entrantly.
 */
import type { Device, Endpoint } from "./device.ts";
import { SUSPEND_RECHECK_MS } from "./suspendClock.ts";
import type { Clock } from "../protocol/clock.ts";

/** Longest single sleep (ms); longer deadlines are reached by re-arming, and a suspend is noticed within it (suspendClock.ts). */
export const MAX_TIMER_SLEEP_MS = SUSPEND_RECHECK_MS;

/** The alarm of one Device. */
export class DeviceTimerDriver<E extends Endpoint> {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private armedAtMs: number | null = null;
  private stopped = false;

  constructor(
    private readonly device: Device<E>,
    private readonly clock: Clock,
  ) {}

  /** Re-arms the alarm if the Device now has an earlier deadline than the one armed. */
  poke(): void {
    if (this.stopped) return;
    const next = this.device.nextDeadlineMs();
    if (next === null || (this.armedAtMs !== null && this.armedAtMs <= next)) return;
    if (this.timer) clearTimeout(this.timer);
    const delay = Math.min(MAX_TIMER_SLEEP_MS, Math.max(0, next - this.clock.monoMs()));
    this.armedAtMs = this.clock.monoMs() + delay;
    this.timer = setTimeout(() => this.fire(), Math.ceil(delay));
  }

  private fire(): void {
    this.timer = null;
    this.armedAtMs = null;
    if (this.stopped) return;
    this.device.tick();
    this.poke();
  }

  /** Cancels the alarm for good. */
  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}
