/**
 * The end of a `bb proxy` run at its grant's expiry (spec "Data path": the
 * host drops the peer at the same moment), as an owner of the tunnel's one
 * alarm. The expiry is a wall-clock instant; it is checked against the wall
 * clock at every alarm, and the alarm sleeps at most SUSPEND_RECHECK_MS
 * (src/wireguard/suspendClock.ts), so a laptop that slept past the expiry
 * ends the run within about a second of waking. A plain setTimeout for the
 * remaining time would not: it runs on the monotonic clock, which stops
 * during suspend (issue 18 item 5).
 *
 * Owns: the one expiry decision. Must never: schedule a timer of its own.
 */
import type { TunnelOwner } from "./tunnel.ts";
import type { Clock } from "../protocol/clock.ts";

/** Calls `onExpired` once, at the first alarm at or after wall-clock `expiresAtMs`. */
export class GrantExpiry implements TunnelOwner {
  private fired = false;

  constructor(
    private readonly expiresAtMs: number,
    private readonly clock: Clock,
    private readonly onExpired: () => void,
  ) {}

  /** The expiry on the tunnel's clock (monotonic ms, counting suspend), null once fired. */
  deadlineMs(): number | null {
    if (this.fired) return null;
    return this.clock.monoMs() + Math.max(0, this.expiresAtMs - this.clock.wallMs());
  }

  /** At each alarm: fires once the wall clock reached the expiry. */
  tick(): void {
    if (this.fired || this.clock.wallMs() < this.expiresAtMs) return;
    this.fired = true;
    this.onExpired();
  }

  /** Whether the expiry was reached. */
  get expired(): boolean {
    return this.fired;
  }
}
