/**
 * The session index table (whitepaper §5.4.1: "I_i", "I_r" are random 32-bit
 * sender indices): maps the receiver index of an incoming response, cookie
 * reply or transport message to its peer and, once a handshake finished, its
 * session. Indices are random so they reveal nothing and are hard to guess.
 *
 * Owns: allocating unique non-zero indices from the random port and the
 * index → entry map. Must never: reuse an index still in the table.
 */
import type { Keypair } from "./keypair.ts";
import { randomU32, type WgRandom } from "./ports.ts";

/** What an index points at: a peer, and its session when the index belongs to one. */
export interface IndexEntry<P> {
  readonly peer: P;
  keypair: Keypair | null;
}

/** Index → entry, one per Device. */
export class IndexTable<P> {
  private readonly entries = new Map<number, IndexEntry<P>>();

  constructor(private readonly random: WgRandom) {}

  /** A fresh index for a handshake of `peer` (entry without a session yet). */
  allocate(peer: P): number {
    for (;;) {
      const index = randomU32(this.random);
      if (index !== 0 && !this.entries.has(index)) {
        this.entries.set(index, { peer, keypair: null });
        return index;
      }
    }
  }

  /** Attaches the session derived from the handshake that allocated `index`. */
  attach(index: number, keypair: Keypair): void {
    const e = this.entries.get(index);
    if (e) e.keypair = keypair;
  }

  /** The entry of `index`, if any. */
  get(index: number): IndexEntry<P> | undefined {
    return this.entries.get(index);
  }

  /** Frees `index` (no-op when absent or 0). */
  release(index: number): void {
    this.entries.delete(index);
  }

  /** Number of live indices (tests, stats). */
  get size(): number {
    return this.entries.size;
  }
}
