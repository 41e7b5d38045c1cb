/**
 * The main event loop's heartbeat, shared with the health listener's thread
 * (issue 18 item 21: a burst of 2,000 connections keeps the scheduler's one
 * event loop busy for about 100 ms, so a /healthz answered on that loop
 * waits as long; a health check answered on another thread does not).
 *
 * The main thread adds one to a counter in a SharedArrayBuffer every
 * LOOP_HEARTBEAT_INTERVAL_MS from a timer on its own loop (LoopHeartbeat):
 * the counter moves only while that loop runs. The health thread samples
 * it every LOOP_SAMPLE_INTERVAL_MS on its own clock (LoopWatch): the time
 * since it last saw the counter move is the main loop's age, never less
 * than the truth by more than one sample interval. No wall clock is shared
 * between the threads, so a clock step cannot fake a stall.
 *
 * Spec: "Observability and retention" (a health check that says whether the
 * scheduler can serve). Must never: block either thread (Atomics.load and
 * Atomics.add only, no wait), or grow: the buffer is HEARTBEAT_SLOTS slots.
 */
import { type Clock, systemClock } from "../../protocol/clock.ts";

/** How often the main thread beats, ms. */
export const LOOP_HEARTBEAT_INTERVAL_MS = 50;
/** How often the health thread samples the beat counter, ms (the age's resolution). */
export const LOOP_SAMPLE_INTERVAL_MS = 25;
/**
 * The longest the main loop may go without a beat before the health
 * listener says SCHEDULER_STALLED, ms. Far above a burst's stall (about
 * 100-900 ms on 2 cores, bench/burst.ts) so load alone does not flip
 * health; far below a load balancer's usual 2-3 failed checks of 5-10 s.
 */
export const MAX_LOOP_STALL_MS = 2_000;

/** Slots of the shared buffer (Int32): the beat counter. */
export const HEARTBEAT_SLOTS = 1;
const BEAT = 0;

/** A fresh shared buffer for one heartbeat. */
export function heartbeatBuffer(): SharedArrayBuffer {
  return new SharedArrayBuffer(HEARTBEAT_SLOTS * Int32Array.BYTES_PER_ELEMENT);
}

/** The main thread's side: beats while its loop runs, and once more on `tick` (see the module header). */
export class LoopHeartbeat {
  private readonly slots: Int32Array;
  private timer: ReturnType<typeof setInterval> | null = null;

  /** `onBeat` runs on each beat on the main loop (serve.ts publishes storage health there); it must be cheap. */
  constructor(
    buffer: SharedArrayBuffer,
    private readonly onBeat: () => void = () => undefined,
    private readonly intervalMs = LOOP_HEARTBEAT_INTERVAL_MS,
  ) {
    this.slots = new Int32Array(buffer);
  }

  /** Starts beating (the timer does not keep the process alive). */
  start(): void {
    if (this.timer) return;
    this.tick();
    this.timer = setInterval(() => this.tick(), this.intervalMs);
    this.timer.unref?.();
  }

  /** One beat now. */
  tick(): void {
    Atomics.add(this.slots, BEAT, 1);
    this.onBeat();
  }

  /** Stops beating: the health thread then sees the loop age grow. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}

/** The health thread's side: the main loop's age from the beat counter and this thread's clock (its monoMs). */
export class LoopWatch {
  private readonly slots: Int32Array;
  private seen: number;
  private seenAtMs: number;

  constructor(
    buffer: SharedArrayBuffer,
    private readonly clock: Clock = systemClock,
  ) {
    this.slots = new Int32Array(buffer);
    this.seen = Atomics.load(this.slots, BEAT);
    this.seenAtMs = clock.monoMs();
  }

  /** Reads the counter; call every LOOP_SAMPLE_INTERVAL_MS and before each answer. */
  sample(): void {
    const beat = Atomics.load(this.slots, BEAT);
    if (beat !== this.seen) {
      this.seen = beat;
      this.seenAtMs = this.clock.monoMs();
    }
  }

  /** Ms since the counter was last seen to move (0 right after a move). */
  ageMs(): number {
    this.sample();
    return this.clock.monoMs() - this.seenAtMs;
  }
}
