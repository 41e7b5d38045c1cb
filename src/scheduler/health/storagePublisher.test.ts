/**
 * The health listener reads storage at most once per
 * STORAGE_PROBE_INTERVAL_MS (issue 19 item 5, kind of fault: a probe on
 * every 50 ms heartbeat), healthy or faulted, and posts only changes. The
 * clock is the one fake (src/protocol/fakeClock.ts); beats are called by hand.
 */
import { describe, expect, test } from "bun:test";
import { FakeClock } from "../../protocol/fakeClock.ts";
import type { StorageState } from "./healthAnswer.ts";
import { LOOP_HEARTBEAT_INTERVAL_MS } from "./loopHeartbeat.ts";
import { STORAGE_PROBE_INTERVAL_MS, type StorageMessage, StoragePublisher } from "./storagePublisher.ts";

describe("probe on every beat: storage is read at most once per STORAGE_PROBE_INTERVAL_MS", () => {
  test("a second of 50 ms beats reads storage once, healthy or during a fault, and each change is posted once", () => {
    const clock = new FakeClock();
    let state: StorageState = { ok: true, detail: "ok" };
    let reads = 0;
    const posted: StorageMessage[] = [];
    const p = new StoragePublisher(
      () => {
        reads++;
        return state;
      },
      (m) => posted.push(m),
      clock,
    );
    const beats = STORAGE_PROBE_INTERVAL_MS / LOOP_HEARTBEAT_INTERVAL_MS;
    const second = () => {
      for (let i = 0; i < beats; i++) {
        p.onBeat();
        clock.advance(LOOP_HEARTBEAT_INTERVAL_MS);
      }
    };
    second();
    expect(reads).toBe(1);
    expect(posted).toEqual([{ type: "storage", ok: true, detail: "ok" }]);
    state = { ok: false, code: "SQLITE_FULL", detail: "database or disk is full" };
    second();
    expect(reads).toBe(2);
    second();
    expect(reads).toBe(3);
    expect(posted.slice(1)).toEqual([
      { type: "storage", ok: false, code: "SQLITE_FULL", detail: "database or disk is full" },
    ]);
    state = { ok: true, detail: "ok" };
    second();
    expect(reads).toBe(4);
    expect(posted.length).toBe(3);
  });
});
