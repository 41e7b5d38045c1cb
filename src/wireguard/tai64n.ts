/**
 * TAI64N timestamps for handshake initiations (whitepaper §5.1 and §5.4.2):
 * 8 bytes big-endian seconds (2^62 + 10 + Unix seconds, the TAI64 label) and
 * 4 bytes big-endian nanoseconds. Like wireguard-go, the nanoseconds are
 * rounded down to a multiple of 2^24 (≈ 16.8 ms) so the timestamp does not
 * leak a precise clock. A responder accepts an initiation only if its
 * timestamp is strictly greater than the last one accepted from that peer.
 *
 * Owns: encoding and ordering. Must never: read a clock itself (callers pass
 * Clock.wallMs()).
 */
import { TIMESTAMP_BYTES } from "./constants.ts";

const WHITENER_MASK = 0x1000000 - 1;

/** The TAI64N timestamp (12 bytes) of Unix time `wallMs` (milliseconds, ≥ 0). */
export function tai64n(wallMs: number): Uint8Array {
  const out = new Uint8Array(TIMESTAMP_BYTES);
  const secs = Math.floor(wallMs / 1000) + 10;
  const nanos = ((Math.floor(wallMs) % 1000) * 1_000_000) & ~WHITENER_MASK;
  const view = new DataView(out.buffer);
  view.setUint32(0, 0x40000000 + Math.floor(secs / 2 ** 32));
  view.setUint32(4, secs >>> 0);
  view.setUint32(8, nanos >>> 0);
  return out;
}

/** True when timestamp `a` is strictly later than `b` (byte-wise big-endian order); `b` null means none seen yet. */
export function isLaterTimestamp(a: Uint8Array, b: Uint8Array | null): boolean {
  if (a.length !== TIMESTAMP_BYTES) return false;
  if (!b) return true;
  for (let i = 0; i < TIMESTAMP_BYTES; i++) {
    if (a[i]! !== b[i]!) return a[i]! > b[i]!;
  }
  return false;
}
