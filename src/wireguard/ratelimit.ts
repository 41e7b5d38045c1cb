/**
 * The ceilings on what a handshake flood can make a responder do (whitepaper
 * §5.3; the shape of wireguard-go's ratelimiter: a token bucket per source
 * address, IPv6 by /64, port ignored, in a bounded table, plus a global
 * bound), issue 18 item 6. Two kinds of work are limited separately:
 *
 * - cookie replies (an XChaCha20-Poly1305 seal each) to mac1-valid messages
 *   without a valid mac2 while under load: COOKIE_REPLIES_PER_SOURCE_* per
 *   source and COOKIE_REPLIES_PER_SECOND in all. Their sources can be
 *   spoofed, so their table is separate from the handshake table: filling it
 *   never locks a client that already holds a cookie out of handshakes.
 * - handshake messages with a valid mac2 while under load (Noise work: four
 *   X25519 operations each): RATE_LIMIT_PER_SECOND / RATE_LIMIT_BURST per
 *   source and HANDSHAKES_PER_SECOND in all.
 *
 * - mac1 checks (a keyed BLAKE2s each, the first thing done with any
 *   handshake message, load or not): MAC1_CHECKS_PER_SECOND in all; beyond
 *   it a handshake message is dropped unverified, as the kernel and
 *   wireguard-go drop when their bounded handshake queue is full.
 *
 * Below the load threshold (load.ts) only the mac1 bound applies: at most
 * HANDSHAKES_UNDER_LOAD_PER_SECOND mac1-valid messages are processed before
 * cookies are demanded, which is itself a bound.
 *
 * Owns: the buckets and their tables. Must never: grow without bound (every
 * table is capped and pruned), or read a clock (callers pass `nowMs`).
 */

/** Handshake messages per second allowed from one source while under load (wireguard-go: 20). */
export const RATE_LIMIT_PER_SECOND = 20;
/** Burst of handshake messages allowed from one source while under load (wireguard-go: 5). */
export const RATE_LIMIT_BURST = 5;
/** Most sources tracked by one table; a new source beyond it is refused until entries age out (at the next prune). */
export const RATE_LIMIT_MAX_SOURCES = 4_096;
/** A full table is pruned at most this often (ms; wireguard-go collects its table every second), so a spoofed flood cannot make every message scan it. */
export const RATE_LIMIT_PRUNE_INTERVAL_MS = 1_000;
/** Handshake messages (valid mac2) per second processed from all sources together while under load (≈ 0.15 of a core at ≈ 300 µs each). */
export const HANDSHAKES_PER_SECOND = 500;
/** Burst of handshake messages from all sources together. */
export const HANDSHAKES_BURST = 50;
/** Cookie replies per second to one source (a client needs one per 2 minutes). */
export const COOKIE_REPLIES_PER_SOURCE_PER_SECOND = 5;
/** Burst of cookie replies to one source. */
export const COOKIE_REPLIES_PER_SOURCE_BURST = 5;
/** Cookie replies per second to all sources together. */
export const COOKIE_REPLIES_PER_SECOND = 1_000;
/** Burst of cookie replies to all sources together. */
export const COOKIE_REPLIES_BURST = 100;

/** mac1 checks per second in all (≈ 5–30 µs each here with @noble/hashes' BLAKE2s: at most ≈ 0.15 of a core); a host endpoint with 1,000 peers rekeying every 2 minutes needs ≈ 10. */
export const MAC1_CHECKS_PER_SECOND = 5_000;
/** Burst of mac1 checks. */
export const MAC1_CHECKS_BURST = 500;

/** Rates (per second) and bursts of the two kinds of limited work; a Device takes DEFAULT_HANDSHAKE_RATE_LIMITS. */
export interface HandshakeRateLimits {
  readonly handshakesPerSource: BucketShape;
  readonly handshakes: BucketShape;
  readonly cookieRepliesPerSource: BucketShape;
  readonly cookieReplies: BucketShape;
  readonly mac1Checks: BucketShape;
  /** Most sources per table. */
  readonly maxSources: number;
}

/** A token bucket's refill rate (tokens per second) and capacity. */
export interface BucketShape {
  readonly perSecond: number;
  readonly burst: number;
}

/** The production limits (the constants above). */
export const DEFAULT_HANDSHAKE_RATE_LIMITS: HandshakeRateLimits = {
  handshakesPerSource: { perSecond: RATE_LIMIT_PER_SECOND, burst: RATE_LIMIT_BURST },
  handshakes: { perSecond: HANDSHAKES_PER_SECOND, burst: HANDSHAKES_BURST },
  cookieRepliesPerSource: { perSecond: COOKIE_REPLIES_PER_SOURCE_PER_SECOND, burst: COOKIE_REPLIES_PER_SOURCE_BURST },
  cookieReplies: { perSecond: COOKIE_REPLIES_PER_SECOND, burst: COOKIE_REPLIES_BURST },
  mac1Checks: { perSecond: MAC1_CHECKS_PER_SECOND, burst: MAC1_CHECKS_BURST },
  maxSources: RATE_LIMIT_MAX_SOURCES,
};

/** One token bucket, full at creation. */
export class TokenBucket {
  private tokens: number;
  private lastMs: number;

  constructor(
    private readonly shape: BucketShape,
    nowMs: number,
  ) {
    this.tokens = shape.burst;
    this.lastMs = nowMs;
  }

  /** Takes one token at `nowMs`; false when empty. */
  take(nowMs: number): boolean {
    this.refill(nowMs);
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  /** Whether the bucket is full again at `nowMs` (then it is indistinguishable from a new one). */
  full(nowMs: number): boolean {
    this.refill(nowMs);
    return this.tokens >= this.shape.burst;
  }

  private refill(nowMs: number): void {
    if (nowMs > this.lastMs) {
      this.tokens = Math.min(this.shape.burst, this.tokens + ((nowMs - this.lastMs) * this.shape.perSecond) / 1_000);
      this.lastMs = nowMs;
    }
  }
}

/**
 * The source a limit counts against, from a transport endpoint key: the
 * address without the port ("192.0.2.1:5000" → "192.0.2.1"), an IPv6
 * address by its /64 ("[2001:db8:1:2::9]:5000" → "2001:db8:1:2::/64"; an
 * IPv4-mapped one as IPv4), anything else (a relay session, a test
 * endpoint) as it is.
 */
export function rateLimitSource(endpointKey: string): string {
  if (endpointKey.startsWith("[")) {
    const end = endpointKey.indexOf("]");
    if (end < 0) return endpointKey;
    const a = parseV6(endpointKey.slice(1, end));
    if (!a) return endpointKey;
    if (a.slice(0, 10).every((b) => b === 0) && a[10] === 0xff && a[11] === 0xff)
      return `${a[12]}.${a[13]}.${a[14]}.${a[15]}`;
    const g = [0, 2, 4, 6].map((i) => ((a[i]! << 8) | a[i + 1]!).toString(16));
    return `${g.join(":")}::/64`;
  }
  const colon = endpointKey.lastIndexOf(":");
  if (colon > 0 && /^\d+\.\d+\.\d+\.\d+$/.test(endpointKey.slice(0, colon))) return endpointKey.slice(0, colon);
  return endpointKey;
}

function parseV6(text: string): number[] | null {
  let s = text.toLowerCase();
  const v4 = s.match(/(\d+)\.(\d+)\.(\d+)\.(\d+)$/);
  if (v4)
    s =
      s.slice(0, -v4[0].length) +
      `${((+v4[1]! << 8) | +v4[2]!).toString(16)}:${((+v4[3]! << 8) | +v4[4]!).toString(16)}`;
  const parts = s.split("::");
  if (parts.length > 2) return null;
  const head = parts[0] ? parts[0].split(":") : [];
  const tail = parts.length === 2 && parts[1] ? parts[1].split(":") : [];
  const groups =
    parts.length === 2 ? [...head, ...Array(Math.max(0, 8 - head.length - tail.length)).fill("0"), ...tail] : head;
  if (groups.length !== 8 || groups.some((g) => !/^[0-9a-f]{1,4}$/.test(g))) return null;
  return groups.flatMap((g) => {
    const v = parseInt(g, 16);
    return [v >> 8, v & 0xff];
  });
}

/** Per-source token buckets in a bounded table, behind one global bucket. */
export class SourceRateLimiter {
  private readonly buckets = new Map<string, TokenBucket>();
  private global: TokenBucket | null = null;
  private lastPruneMs = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly perSource: BucketShape = DEFAULT_HANDSHAKE_RATE_LIMITS.handshakesPerSource,
    private readonly all: BucketShape = DEFAULT_HANDSHAKE_RATE_LIMITS.handshakes,
    private readonly maxSources = RATE_LIMIT_MAX_SOURCES,
  ) {}

  /**
   * Takes one token for `source` (already reduced by rateLimitSource) at
   * `nowMs`; false when the source is over its rate, the table is full of
   * other sources, or all sources together are over the global rate.
   */
  allow(source: string, nowMs: number): boolean {
    let b = this.buckets.get(source);
    if (!b) {
      if (this.buckets.size >= this.maxSources && nowMs - this.lastPruneMs >= RATE_LIMIT_PRUNE_INTERVAL_MS)
        this.prune(nowMs);
      if (this.buckets.size >= this.maxSources) return false;
      b = new TokenBucket(this.perSource, nowMs);
      this.buckets.set(source, b);
    }
    this.global ??= new TokenBucket(this.all, nowMs);
    return b.take(nowMs) && this.global.take(nowMs);
  }

  /** Forgets sources whose bucket has refilled (they are indistinguishable from new ones). */
  prune(nowMs: number): void {
    this.lastPruneMs = nowMs;
    for (const [k, b] of this.buckets) if (b.full(nowMs)) this.buckets.delete(k);
  }

  /** Sources tracked now. */
  get size(): number {
    return this.buckets.size;
  }
}
