/**
 * Side-effect ports the scheduler objects receive from their host: clock and
 * randomness. Domain and object code never call Date.now() or
 * crypto.getRandomValues() directly (docs/architecture.md, "Ports"), so a simulation can
 * drive them with a fake clock and a seeded source.
 */

/** Wall-clock source in milliseconds since the Unix epoch. */
export interface Clock {
  now(): number;
}

/** Random bytes and identifiers. */
export interface Randomness {
  /** `n` random bytes. */
  bytes(n: number): Uint8Array;
  /** A random identifier with a type prefix, e.g. `plc_3f2a…` (128 bits, hex). */
  id(prefix: string): string;
}

/** The real clock. */
export const systemClock: Clock = { now: () => Date.now() };

/** Cryptographically secure randomness from the platform. */
export const systemRandomness: Randomness = {
  bytes(n) {
    const b = new Uint8Array(n);
    crypto.getRandomValues(b);
    return b;
  },
  id(prefix) {
    return `${prefix}_${Buffer.from(this.bytes(16)).toString("hex")}`;
  },
};
