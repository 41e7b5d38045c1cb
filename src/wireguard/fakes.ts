/**
 * Test doubles of the WireGuard ports: a seeded random source and test
 * packets (the clock's double is src/protocol/fakeClock.ts). Used by unit,
 * property and in-process handshake tests.
 *
 * Owns: determinism in tests only. Must never: be used by production code
 * (the seeded generator is not cryptographically secure).
 */
import type { WgRandom } from "./ports.ts";

/** A deterministic generator (xoshiro128** seeded by splitmix32); NOT cryptographically secure. */
export class SeededRandom implements WgRandom {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  /** Seeds the four 32-bit state words from `seed` with splitmix32. */
  constructor(seed: number) {
    let x = seed >>> 0;
    const next = () => {
      x = (x + 0x9e3779b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next() | 1;
  }

  /** The next unsigned 32-bit value (xoshiro128**). */
  u32(): number {
    const r = Math.imul(rotl(Math.imul(this.s1, 5) >>> 0, 7), 9) >>> 0;
    const t = (this.s1 << 9) >>> 0;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return r;
  }

  /** A value in [0, n) for 0 < n ≤ 2^32. */
  below(n: number): number {
    return Math.floor((this.u32() / 2 ** 32) * n);
  }

  fill(out: Uint8Array): Uint8Array {
    for (let i = 0; i < out.length; i += 4) {
      const v = this.u32();
      for (let j = 0; j < 4 && i + j < out.length; j++) out[i + j] = (v >>> (8 * j)) & 0xff;
    }
    return out;
  }

  /** `n` fresh random bytes. */
  bytes(n: number): Uint8Array {
    return this.fill(new Uint8Array(n));
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

/** A tiny IPv6/UDP packet from fd00::<src> to fd00::<dst> carrying `n` (bytes 40–41, big-endian). */
export function testPacket(src: number, dst: number, n: number): Uint8Array {
  const p = new Uint8Array(48);
  p[0] = 0x60;
  p[5] = 8;
  p[6] = 17;
  p[7] = 64;
  p[8] = 0xfd;
  p[23] = src;
  p[24] = 0xfd;
  p[39] = dst;
  p[40] = n >> 8;
  p[41] = n & 0xff;
  return p;
}
