/**
 * A token bucket over bytes (the relay's `maxBytesPerSecond`, spec "Packet
 * relays"; src/protocol/connection.ts RelayLimits: burst = one second's
 * worth). Pure: the caller passes monotonic time.
 *
 * Owns: one direction's allowance. Must never: go negative, or let a frame
 * through on credit.
 */

/** Bytes per second with a burst of one second's worth. */
export class ByteBucket {
  private tokens: number;
  private atMs: number;

  /** A full bucket of `bytesPerSecond` at time `nowMs`. */
  constructor(
    private bytesPerSecond: number,
    nowMs: number,
  ) {
    this.tokens = bytesPerSecond;
    this.atMs = nowMs;
  }

  /** Takes `bytes` if the bucket holds them at `nowMs` (refilled first); false leaves it unchanged but refilled. */
  take(bytes: number, nowMs: number): boolean {
    this.refill(nowMs);
    if (bytes > this.tokens) return false;
    this.tokens -= bytes;
    return true;
  }

  /** Changes the rate (and the burst with it); tokens above the new burst are dropped. */
  setRate(bytesPerSecond: number, nowMs: number): void {
    this.refill(nowMs);
    this.bytesPerSecond = bytesPerSecond;
    this.tokens = Math.min(this.tokens, bytesPerSecond);
  }

  private refill(nowMs: number): void {
    if (nowMs > this.atMs) {
      this.tokens = Math.min(this.bytesPerSecond, this.tokens + ((nowMs - this.atMs) * this.bytesPerSecond) / 1000);
      this.atMs = nowMs;
    }
  }
}
