/**
 * The receiving side's sliding replay window (whitepaper §5.4.6, which
 * follows RFC 6479 §2): a ring of 32-bit words holding one bit per counter,
 * cleared a word at a time as the greatest counter moves forward.
 *
 * Guarantee (checked against a set-based model in replay.test.ts): a counter
 * is accepted iff it is below REJECT_AFTER_MESSAGES, was never accepted
 * before, and is greater than the greatest accepted counter or at most
 * REPLAY_WINDOW_PACKETS (8,160) behind it.
 * Owns: that bitmap, per session. Must never: be updated for a packet whose
 * tag did not verify (callers check with wouldAccept, decrypt, then accept).
 */
import { REJECT_AFTER_MESSAGES, REPLAY_BITMAP_BITS, REPLAY_WINDOW_PACKETS } from "./constants.ts";

const WORDS = REPLAY_BITMAP_BITS / 32;

/** One session's replay window; starts empty (counter 0 is acceptable). */
export class ReplayWindow {
  private readonly bitmap = new Uint32Array(WORDS);
  private greatest = 0;

  /** Whether `counter` would be accepted now, without recording it (a cheap check before decrypting). */
  wouldAccept(counter: number): boolean {
    if (!(counter >= 0 && counter < REJECT_AFTER_MESSAGES)) return false;
    if (counter > this.greatest) return true;
    if (this.greatest - counter > REPLAY_WINDOW_PACKETS) return false;
    return (this.bitmap[Math.floor(counter / 32) % WORDS]! & (1 << (counter % 32))) === 0;
  }

  /** Records `counter` if acceptable; returns false for a replay, a counter too old, or one out of range. */
  accept(counter: number): boolean {
    if (!(counter >= 0 && counter < REJECT_AFTER_MESSAGES)) return false;
    const index = Math.floor(counter / 32);
    if (counter > this.greatest) {
      const current = Math.floor(this.greatest / 32);
      const top = Math.min(index - current, WORDS);
      for (let i = 1; i <= top; i++) this.bitmap[(current + i) % WORDS] = 0;
      this.greatest = counter;
    } else if (this.greatest - counter > REPLAY_WINDOW_PACKETS) {
      return false;
    }
    const word = index % WORDS;
    const bit = 1 << (counter % 32);
    if (this.bitmap[word]! & bit) return false;
    this.bitmap[word] = this.bitmap[word]! | bit;
    return true;
  }

  /** The greatest counter accepted so far (0 before any). */
  get greatestCounter(): number {
    return this.greatest;
  }
}
