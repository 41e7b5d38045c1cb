/**
 * "Under load" for a responder (whitepaper §5.3): when handshake messages
 * arrive faster than HANDSHAKES_UNDER_LOAD_PER_SECOND, the Device demands a
 * cookie (mac2) and rate-limits handshake messages and cookie replies
 * (ratelimit.ts), for at least UNDER_LOAD_HOLD_MS after the rate drops (as
 * wireguard-go holds it for 1 s).
 *
 * Owns: the load meter (a 1-second bucket). Must never: keep per-source
 * state (ratelimit.ts does, bounded).
 */

/** Handshake messages per second above which the Device is under load. */
export const HANDSHAKES_UNDER_LOAD_PER_SECOND = 200;
/** How long the Device stays under load after the rate was last exceeded. */
export const UNDER_LOAD_HOLD_MS = 1_000;
/** Decides whether the responder is under load. The Device calls note() for each handshake message it receives. */
export interface LoadPolicy {
  /** Counts one handshake message received at `nowMs`. */
  note(nowMs: number): void;
  /** Whether cookies are demanded now. */
  underLoad(nowMs: number): boolean;
}

/** The default policy: a rate threshold over 1-second buckets. */
export class HandshakeLoadMeter implements LoadPolicy {
  private bucketStartMs = Number.NEGATIVE_INFINITY;
  private count = 0;
  private loadedUntilMs = Number.NEGATIVE_INFINITY;

  constructor(private readonly perSecond = HANDSHAKES_UNDER_LOAD_PER_SECOND) {}

  note(nowMs: number): void {
    if (nowMs - this.bucketStartMs >= 1_000) {
      this.bucketStartMs = nowMs;
      this.count = 0;
    }
    if (++this.count > this.perSecond) this.loadedUntilMs = nowMs + UNDER_LOAD_HOLD_MS;
  }

  underLoad(nowMs: number): boolean {
    return nowMs < this.loadedUntilMs;
  }
}

/** A policy that is always (or never) under load, for tests and operators who want cookies always. */
export function fixedLoad(loaded: boolean): LoadPolicy {
  return { note: () => {}, underLoad: () => loaded };
}
