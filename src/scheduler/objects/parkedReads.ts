/**
 * Reads parked on one Allocation object until something changes (memory
 * only: a restart ends them, and readers resume by offset or sequence
 * number). Used for log follows (allocationLog.ts, MAX_LOG_FOLLOWERS) and
 * event follows (src/protocol/eventFollow.ts, MAX_EVENT_FOLLOWERS).
 *
 * Must never: hold more than its bound, or keep a timer after its read was
 * woken.
 */
import { BeachballError } from "../../protocol/errors.ts";

/** See the module header. */
export class ParkedReads {
  private readonly parked = new Set<() => void>();

  /**
   * `max`: most reads parked at once; `what`: the refusal's message past it;
   * `retryAfterSeconds`: the refusal's Retry-After.
   */
  constructor(
    private readonly max: number,
    private readonly what: string,
    private readonly retryAfterSeconds: number,
  ) {}

  /** Parks until woken or `ms` passed. Throws RATE_LIMITED when `max` reads are already parked. */
  wait(ms: number): Promise<void> {
    if (this.parked.size >= this.max)
      throw new BeachballError("RATE_LIMITED", this.what, { retryAfterSeconds: this.retryAfterSeconds });
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.parked.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.parked.add(done);
    });
  }

  /** Wakes every parked read. */
  wake(): void {
    for (const w of [...this.parked]) w();
  }
}
