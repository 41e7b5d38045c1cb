/**
 * The replay window against a simple model: a Set of accepted counters and
 * the greatest one. Property test with a seeded generator (SeededRandom;
 * the seed is in each failure message): random walks mixing new, duplicate,
 * slightly late, far-late and huge counters; window and model must agree on
 * every verdict.
 */
import { describe, expect, test } from "bun:test";
import { REJECT_AFTER_MESSAGES, REPLAY_WINDOW_PACKETS } from "./constants.ts";
import { SeededRandom } from "./fakes.ts";
import { ReplayWindow } from "./replay.ts";

class ModelWindow {
  private readonly seen = new Set<number>();
  private greatest = 0;
  accept(c: number): boolean {
    if (!(c >= 0 && c < REJECT_AFTER_MESSAGES)) return false;
    if (this.seen.has(c)) return false;
    if (c <= this.greatest && this.greatest - c > REPLAY_WINDOW_PACKETS) return false;
    this.seen.add(c);
    this.greatest = Math.max(this.greatest, c);
    return true;
  }
}

describe("ReplayWindow", () => {
  test("accepts in-order counters once, rejects duplicates", () => {
    const w = new ReplayWindow();
    for (let c = 0; c < 10_000; c++) expect(w.accept(c)).toBe(true);
    expect(w.accept(9_999)).toBe(false);
    expect(w.accept(0)).toBe(false);
  });

  test("keeps at least 2,048 packets of reordering (8,160 here)", () => {
    expect(REPLAY_WINDOW_PACKETS).toBeGreaterThanOrEqual(2_048);
    const w = new ReplayWindow();
    expect(w.accept(20_000)).toBe(true);
    expect(w.accept(20_000 - REPLAY_WINDOW_PACKETS)).toBe(true);
    expect(w.accept(20_000 - REPLAY_WINDOW_PACKETS - 1)).toBe(false);
    expect(w.wouldAccept(19_999)).toBe(true);
    expect(w.accept(19_999)).toBe(true);
    expect(w.wouldAccept(19_999)).toBe(false);
  });

  test("rejects counters at or past REJECT_AFTER_MESSAGES and non-integers out of range", () => {
    const w = new ReplayWindow();
    expect(w.accept(REJECT_AFTER_MESSAGES)).toBe(false);
    expect(w.accept(-1)).toBe(false);
    expect(w.accept(Number.NaN)).toBe(false);
    expect(w.accept(REJECT_AFTER_MESSAGES - 1)).toBe(true);
  });

  test("agrees with the model on 40 seeded random walks of 5,000 counters", () => {
    for (let seed = 1; seed <= 40; seed++) {
      const rng = new SeededRandom(seed);
      const w = new ReplayWindow();
      const m = new ModelWindow();
      let top = rng.below(2) ? 0 : rng.below(2 ** 32) * 2 ** 20;
      const recent: number[] = [];
      for (let i = 0; i < 5_000; i++) {
        let c: number;
        const k = rng.below(100);
        if (k < 40) c = top += 1 + rng.below(3);
        else if (k < 50) c = top += rng.below(20_000);
        else if (k < 70 && recent.length) c = recent[rng.below(recent.length)]!;
        else if (k < 90) c = Math.max(0, top - rng.below(REPLAY_WINDOW_PACKETS + 200));
        else if (k < 95) c = Math.max(0, top - REPLAY_WINDOW_PACKETS + rng.below(3) - 1);
        else if (i < 4_900) c = Math.max(0, top - rng.below(2 ** 20));
        else c = REJECT_AFTER_MESSAGES - rng.below(3); // near the end only: it moves the window past everything
        recent.push(c);
        if (recent.length > 64) recent.shift();
        const before = w.wouldAccept(c);
        const got = w.accept(c);
        const want = m.accept(c);
        expect(got, `seed ${seed} step ${i} counter ${c}`).toBe(want);
        expect(before, `wouldAccept seed ${seed} step ${i} counter ${c}`).toBe(want);
      }
    }
  });
});
