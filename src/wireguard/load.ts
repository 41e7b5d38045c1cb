/**
 * "Under load" for a responder (whitepaper §5.3): when handshake messages
 * arrive faster than HANDSHAKES_UNDER_LOAD_PER_SECOND, the Device demands a
 * cookie (mac2) and rate-limits handshake messages per source, for at least
 * UNDER_LOAD_HOLD_MS after the rate drops (as wireguard-go holds it for 1 s).
 *
 * Owns: the load meter (a 1-second bucket) and a bounded per-source token
 * bucket (20 per second, burst 5: wireguard-go's ratelimiter values).
 * Must never: grow without bound: the source table is capped and pruned.
 */

/** Handshake messages per second above which the Device is under load. */
export const HANDSHAKES_UNDER_LOAD_PER_SECOND = 200;
/** How long the Device stays under load after the rate was last exceeded. */
export const UNDER_LOAD_HOLD_MS = 1_000;
/** Handshake messages per second allowed from one source while under load. */
export const RATE_LIMIT_PER_SECOND = 20;
/** Burst allowed from one source while under load. */
export const RATE_LIMIT_BURST = 5;
/** Most sources tracked by the rate limiter; a new source beyond it is refused until entries age out. */
export const RATE_LIMIT_MAX_SOURCES = 4_096;

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

/** Per-source token buckets, bounded in size. */
export class SourceRateLimiter {
  private readonly buckets = new Map<string, { tokens: number; lastMs: number }>();

  /** Takes one token for `source` at `nowMs`; false when the source is over its rate or the table is full. */
  allow(source: string, nowMs: number): boolean {
    let b = this.buckets.get(source);
    if (!b) {
      if (this.buckets.size >= RATE_LIMIT_MAX_SOURCES) this.prune(nowMs);
      if (this.buckets.size >= RATE_LIMIT_MAX_SOURCES) return false;
      b = { tokens: RATE_LIMIT_BURST, lastMs: nowMs };
      this.buckets.set(source, b);
    }
    b.tokens = Math.min(RATE_LIMIT_BURST, b.tokens + ((nowMs - b.lastMs) * RATE_LIMIT_PER_SECOND) / 1_000);
    b.lastMs = nowMs;
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  /** Forgets sources whose bucket has refilled (they are indistinguishable from new ones). */
  prune(nowMs: number): void {
    const refillMs = (RATE_LIMIT_BURST * 1_000) / RATE_LIMIT_PER_SECOND;
    for (const [k, b] of this.buckets) if (nowMs - b.lastMs >= refillMs) this.buckets.delete(k);
  }

  /** Sources tracked now. */
  get size(): number {
    return this.buckets.size;
  }
}
