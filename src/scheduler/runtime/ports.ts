/**
 * Side-effect ports the scheduler objects receive from their host:
 * randomness here, and the tree's one Clock (src/protocol/clock.ts; its
 * wallMs() is what the objects read). Domain and object code never call
 * Date.now() or crypto.getRandomValues() directly (docs/architecture.md,
 * "Ports"), so a simulation can drive them with a fake clock and a seeded
 * source.
 */

/** Random bytes and identifiers. */
export interface Randomness {
  /** `n` random bytes. */
  bytes(n: number): Uint8Array;
  /** A random identifier with a type prefix, e.g. `plc_3f2a…` (128 bits, hex). */
  id(prefix: string): string;
}

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
