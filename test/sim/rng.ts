/**
 * Seeded randomness for the simulation: the same seed replays the same run
 * exactly (sfc32 generator seeded by splitmix32). The fake clock is
 * src/protocol/fakeClock.ts.
 */
import type { Randomness } from "../../src/scheduler/runtime/ports.ts";

/** A deterministic PRNG that also serves as the scheduler's Randomness port. */
export class SeededRandom implements Randomness {
  private a: number;
  private b: number;
  private c: number;
  private d: number;
  constructor(seed: number) {
    let s = seed >>> 0;
    const next = () => {
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
  }
  /** Uniform in [0, 1). */
  float(): number {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) >>> 0;
    this.c = ((this.c << 21) | (this.c >>> 11)) >>> 0;
    this.c = (this.c + t) >>> 0;
    return t / 4294967296;
  }
  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.float() * n);
  }
  /** True with probability p. */
  chance(p: number): boolean {
    return this.float() < p;
  }
  /** One element of a non-empty array. */
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!;
  }
  bytes(n: number): Uint8Array {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = this.int(256);
    return out;
  }
  id(prefix: string): string {
    return `${prefix}_${Buffer.from(this.bytes(16)).toString("hex")}`;
  }
}
