import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SqlStore } from "./runtime/embedded/sqlStore.ts";
import { migrate } from "./runtime/migrate.ts";
import { MIGRATIONS } from "./migrations/index.ts";
import {
  LOG_APPEND_BURST_BYTES,
  LOG_APPEND_BYTES_PER_SECOND,
  LOG_RING_BYTES,
  MAX_LOG_CHUNK_BYTES,
  MAX_LOG_FOLLOWERS,
  type LogChunk,
} from "../protocol/logs.ts";
import {
  AppendBudget,
  appendLogChunk,
  LogFollowers,
  logEnd,
  readLogPage,
  type CurrentPlacement,
} from "./objects/allocationLog.ts";

const dirs: string[] = [];
const stores: SqlStore[] = [];
afterEach(() => {
  for (const s of stores.splice(0)) s.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function store(): SqlStore {
  const dir = mkdtempSync(join(tmpdir(), "bb-alloc-log-"));
  dirs.push(dir);
  const s = new SqlStore(join(dir, "objects.db"));
  stores.push(s);
  migrate(s, MIGRATIONS, "test store");
  return s;
}

const A = "alloc_" + "a".repeat(32);
const P1: CurrentPlacement = { placementId: "plc_1", generation: 1 };
const P2: CurrentPlacement = { placementId: "plc_2", generation: 2 };
const chunk = (p: CurrentPlacement, offset: number | undefined, text: string): LogChunk => ({
  allocationId: A,
  placementId: p.placementId,
  generation: p.generation,
  ...(offset === undefined ? {} : { offset }),
  text,
});

describe("an allocation's log", () => {
  test("chunks append by stream offset; a resent chunk is a no-op and a partial overlap keeps only the new bytes", () => {
    const s = store();
    expect(appendLogChunk(s, A, P1, chunk(P1, 0, "one\n"))).toEqual({
      placementId: "plc_1",
      streamEnd: 4,
      appended: true,
      gapBytes: 0,
    });
    expect(appendLogChunk(s, A, P1, chunk(P1, 0, "one\n")).appended).toBe(false);
    expect(appendLogChunk(s, A, P1, chunk(P1, 2, "e\ntwo\n"))).toEqual({
      placementId: "plc_1",
      streamEnd: 8,
      appended: true,
      gapBytes: 0,
    });
    expect(readLogPage(s, A, 0, 1024)).toEqual({
      offset: 0,
      nextOffset: 8,
      droppedBytes: 0,
      text: "one\ntwo\n",
      complete: false,
    });
    expect(readLogPage(s, A, 4, 1024).text).toBe("two\n");
    expect(readLogPage(s, A, 8, 1024)).toEqual({
      offset: 8,
      nextOffset: 8,
      droppedBytes: 0,
      text: "",
      complete: false,
    });
  });

  test("offsets count UTF-8 bytes", () => {
    const s = store();
    appendLogChunk(s, A, P1, chunk(P1, 0, "é✓\n"));
    expect(logEnd(s, A)).toBe(Buffer.byteLength("é✓\n"));
    expect(readLogPage(s, A, 2, 100).text).toBe("✓\n");
  });

  test("a chunk past the stream's end leaves a gap the reader is told about; later bytes keep their offsets", () => {
    const s = store();
    appendLogChunk(s, A, P1, chunk(P1, 0, "a\n"));
    expect(appendLogChunk(s, A, P1, chunk(P1, 10, "b\n")).gapBytes).toBe(8); // counted as lost output (bb_log_lost_bytes_total)
    const first = readLogPage(s, A, 0, 100);
    expect(first).toEqual({ offset: 0, nextOffset: 2, droppedBytes: 0, text: "a\n", complete: false });
    expect(readLogPage(s, A, first.nextOffset, 100)).toEqual({
      offset: 10,
      nextOffset: 12,
      droppedBytes: 8,
      text: "b\n",
      complete: false,
    });
  });

  test("the ring drops whole chunks oldest first past LOG_RING_BYTES and never renumbers", () => {
    const s = store();
    const line = "x".repeat(MAX_LOG_CHUNK_BYTES - 1) + "\n";
    const n = LOG_RING_BYTES / MAX_LOG_CHUNK_BYTES + 8;
    for (let i = 0; i < n; i++) appendLogChunk(s, A, P1, chunk(P1, i * MAX_LOG_CHUNK_BYTES, line));
    const end = n * MAX_LOG_CHUNK_BYTES;
    expect(logEnd(s, A)).toBe(end);
    const kept = s.sql
      .exec<{ b: number; first: number }>(
        "SELECT SUM(bytes) AS b, MIN(start_offset) AS first FROM allocation_log_chunks WHERE obj = ?",
        A,
      )
      .one();
    expect(kept.b).toBeLessThanOrEqual(LOG_RING_BYTES);
    expect(kept.b).toBeGreaterThan(LOG_RING_BYTES - MAX_LOG_CHUNK_BYTES);
    const p = readLogPage(s, A, 0, 64 * 1024);
    expect(p.offset).toBe(kept.first);
    expect(p.droppedBytes).toBe(kept.first);
    expect(p.text.length).toBeLessThanOrEqual(64 * 1024);
    expect(p.nextOffset - p.offset).toBe(Buffer.byteLength(p.text));
    // Read to the end: every byte after the cut is there, in order.
    let at = p.nextOffset;
    let total = Buffer.byteLength(p.text);
    for (let i = 0; i < 100 && at < end; i++) {
      const q = readLogPage(s, A, at, 64 * 1024);
      expect(q.droppedBytes).toBe(0);
      total += Buffer.byteLength(q.text);
      at = q.nextOffset;
    }
    expect(at).toBe(end);
    expect(total).toBe(end - kept.first);
  });

  test("a read past the end is LOG_OFFSET_PAST_END with the end; an oversized chunk is BODY_TOO_LARGE and writes nothing", () => {
    const s = store();
    appendLogChunk(s, A, P1, chunk(P1, 0, "abc"));
    expect(() => readLogPage(s, A, 4, 10)).toThrow(
      expect.objectContaining({ code: "LOG_OFFSET_PAST_END", extra: { endOffset: 3 } }),
    );
    expect(() => appendLogChunk(s, A, P1, chunk(P1, 3, "é".repeat(MAX_LOG_CHUNK_BYTES / 2 + 1)))).toThrow(
      expect.objectContaining({ code: "BODY_TOO_LARGE" }),
    );
    expect(logEnd(s, A)).toBe(3);
  });

  test("only the current placement appends: another placement or an older generation is refused; a new placement's stream starts at the log's end", () => {
    const s = store();
    appendLogChunk(s, A, P1, chunk(P1, 0, "gen1\n"));
    expect(appendLogChunk(s, A, null, chunk(P1, 5, "late\n"))).toMatchObject({
      code: "UNKNOWN_PLACEMENT",
      appended: false,
    });
    expect(appendLogChunk(s, A, P2, chunk(P1, 5, "late\n"))).toMatchObject({
      code: "STALE_GENERATION",
      appended: false,
    });
    expect(appendLogChunk(s, A, P1, { ...chunk(P1, 5, "forged\n"), placementId: "plc_x" })).toMatchObject({
      code: "UNKNOWN_PLACEMENT",
    });
    expect(appendLogChunk(s, A, P2, chunk(P2, 0, "gen2\n"))).toMatchObject({ streamEnd: 5, appended: true });
    expect(readLogPage(s, A, 0, 100).text).toBe("gen1\ngen2\n");
    // After an agent restart (no offset): appended at the stream's end, which the answer reports.
    expect(appendLogChunk(s, A, P2, chunk(P2, undefined, "again\n"))).toMatchObject({
      streamEnd: 11,
      appended: true,
    });
    expect(readLogPage(s, A, 5, 100).text).toBe("gen2\nagain\n");
  });
});

describe("parked follow reads", () => {
  test("are woken by wake(), time out on their own, and are bounded", async () => {
    const f = new LogFollowers();
    let woke = false;
    const w = f.wait(60_000).then(() => (woke = true));
    f.wake();
    await w;
    expect(woke).toBe(true);
    await f.wait(5); // resolves by itself
    const parked = Array.from({ length: MAX_LOG_FOLLOWERS }, () => f.wait(60_000));
    expect(() => f.wait(60_000)).toThrow(expect.objectContaining({ code: "RATE_LIMITED" }));
    f.wake();
    await Promise.all(parked);
  });
});

describe("the append rate bound", () => {
  test("a push retried after RATE_LIMITED: resent stored bytes cost nothing, so the retry is not refused forever (livelock)", () => {
    const s = store();
    const b = new AppendBudget();
    const t0 = 1_000_000;
    const take = (n: number) => b.take(n, t0);
    const big = "x".repeat(MAX_LOG_CHUNK_BYTES - 1) + "\n";
    let stored = 0;
    while (stored + MAX_LOG_CHUNK_BYTES <= LOG_APPEND_BURST_BYTES) {
      appendLogChunk(s, A, P1, chunk(P1, stored, big), take);
      stored += MAX_LOG_CHUNK_BYTES;
    }
    // the budget is spent; resending every stored chunk is a no-op that takes nothing
    for (let off = 0; off < stored; off += MAX_LOG_CHUNK_BYTES)
      expect(appendLogChunk(s, A, P1, chunk(P1, off, big), take).appended).toBe(false);
    b.take(MAX_LOG_CHUNK_BYTES, t0 + (MAX_LOG_CHUNK_BYTES / LOG_APPEND_BYTES_PER_SECOND) * 1000); // what the refill gave is still there
    // a new chunk over budget writes nothing
    expect(() =>
      s.transactionSync(() => appendLogChunk(s, A, P1, chunk(P1, stored, big), (n) => b.take(n, t0 + 1))),
    ).toThrow(expect.objectContaining({ code: "RATE_LIMITED" }));
    expect(logEnd(s, A)).toBe(stored);
  });

  test("a burst, then the rate: an append over budget is RATE_LIMITED and takes nothing; time refills it", () => {
    const b = new AppendBudget();
    const t0 = 1_000_000;
    b.take(LOG_APPEND_BURST_BYTES, t0);
    expect(() => b.take(1024, t0)).toThrow(expect.objectContaining({ code: "RATE_LIMITED" }));
    b.take(LOG_APPEND_BYTES_PER_SECOND / 2, t0 + 500); // half a second refills half the rate
    expect(() => b.take(1024, t0 + 500)).toThrow(expect.objectContaining({ code: "RATE_LIMITED" }));
    b.take(LOG_APPEND_BURST_BYTES, t0 + 500 + (LOG_APPEND_BURST_BYTES / LOG_APPEND_BYTES_PER_SECOND) * 1000);
    // A clock that steps back refills nothing.
    expect(() => b.take(1, t0)).toThrow(expect.objectContaining({ code: "RATE_LIMITED" }));
    expect(() => b.take(1, t0 + 4500)).toThrow(expect.objectContaining({ code: "RATE_LIMITED" }));
  });
});
