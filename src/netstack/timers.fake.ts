/**
 * A fake TimerPort for tests: time moves only when the test calls advance(),
 * which runs due timers in deadline order.
 */
import type { TimerHandle, TimerPort } from "./timers.ts";

/** Manual clock; `advance(ms)` runs every timer due by then. */
export class FakeTimers implements TimerPort {
  private t = 0;
  private seq = 0;
  private readonly due = new Map<number, { at: number; fn: () => void }>();

  monoMs(): number {
    return this.t;
  }

  after(ms: number, fn: () => void): TimerHandle {
    const id = ++this.seq;
    this.due.set(id, { at: this.t + Math.max(0, ms), fn });
    return { cancel: () => void this.due.delete(id) };
  }

  /** Pending timers. */
  get pending(): number {
    return this.due.size;
  }

  /** Moves time forward by `ms`, running due timers (earliest first, each at its own time). */
  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      let next: [number, { at: number; fn: () => void }] | null = null;
      for (const e of this.due) if (e[1].at <= end && (!next || e[1].at < next[1].at)) next = e;
      if (!next) break;
      this.due.delete(next[0]);
      this.t = next[1].at;
      next[1].fn();
    }
    this.t = end;
  }
}
