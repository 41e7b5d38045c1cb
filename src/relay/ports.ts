/**
 * The relay's side-effect ports (docs/architecture.md, "Ports"): time. The
 * hub reads the clock only through RelayClock, so unit tests drive
 * handshake deadlines, probes, idle timeouts and token buckets on a fake
 * clock.
 *
 * Owns: the real adapter and the fake. Must never: be bypassed by a direct
 * Date.now() or performance.now() in the hub or the token verifier.
 */

/** Time as the relay needs it. */
export interface RelayClock {
  /** Monotonic milliseconds from an arbitrary origin: deadlines, buckets, idle timers. */
  nowMs(): number;
  /** Milliseconds since the Unix epoch: token freshness (`issuedAtMs`/`expiresAtMs` are wall-clock). */
  wallMs(): number;
}

/** The process clock. */
export const systemRelayClock: RelayClock = {
  nowMs: () => performance.now(),
  wallMs: () => Date.now(),
};

/** A clock tests move by hand; both readings advance together. */
export class FakeRelayClock implements RelayClock {
  constructor(
    private mono = 1_000,
    private wall = 1_800_000_000_000,
  ) {}
  nowMs(): number {
    return this.mono;
  }
  wallMs(): number {
    return this.wall;
  }
  /** Moves both readings forward by `ms`. */
  advance(ms: number): void {
    this.mono += ms;
    this.wall += ms;
  }
}
