/**
 * The Allocation object's log of workload output (issue 13, "Workload
 * output"; shapes and bounds in src/protocol/logs.ts): a ring by bytes in
 * the object's own tables (allocationSchema.ts), appended by the host that
 * runs the allocation's current placement and read by its owner.
 *
 * Each placement's stream starts where the log ends when its first chunk
 * arrives; a chunk is placed by its stream offset, so a resent chunk is a
 * no-op and a chunk past the end leaves a gap (lost bytes) rather than
 * moving later bytes. Once the log holds more than LOG_RING_BYTES, whole
 * chunks are dropped oldest first (so it exceeds the cap by less than one
 * chunk); offsets are never reused, and a reader asking for dropped bytes is
 * told how many it missed. Also, in memory: the append rate budget (a
 * token bucket; a restart refills it) and the set of parked follow reads.
 * Must never: renumber bytes, accept a chunk for another placement, or keep
 * more than LOG_RING_BYTES + MAX_LOG_CHUNK_BYTES of text per allocation.
 */
import { BeachballError } from "../../protocol/errors.ts";
import { ParkedReads } from "./parkedReads.ts";
import {
  LOG_APPEND_BURST_BYTES,
  LOG_APPEND_BYTES_PER_SECOND,
  LOG_RING_BYTES,
  MAX_LOG_CHUNK_BYTES,
  MAX_LOG_FOLLOWERS,
  type LogChunk,
  type LogChunkResult,
  type LogPage,
} from "../../protocol/logs.ts";
import { and, asc, eq, gt, lt, lte, sql } from "drizzle-orm";
import type { ObjectStorage } from "../runtime/api.ts";
import { fromExcluded, param, placeholders, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import { allocationLogChunkTable as chunks, allocationLogTable as log } from "./allocationSchema.ts";

/** Most chunks one read walks (bounds a read of many small chunks). */
const MAX_CHUNKS_PER_READ = 256;

/** The log's row: where the current placement's stream sits and how far the log reaches. */
type MetaRow = Omit<typeof log.$inferSelect, "obj">;

const obj = sql.placeholder("obj");
const cut = sql.placeholder("cut");

/** The statements over allocation_log and allocation_log_chunks, built once per storage (../runtime/drizzle.ts). */
function queries(db: ObjectDb) {
  return {
    meta: db
      .select({
        placementId: log.placementId,
        generation: log.generation,
        streamBase: log.streamBase,
        endOffset: log.endOffset,
      })
      .from(log)
      .where(eq(log.obj, obj))
      .prepare(),
    setStream: db
      .insert(log)
      .values({ obj, ...placeholders("placementId", "generation", "streamBase", "endOffset") })
      .onConflictDoUpdate({
        target: log.obj,
        set: fromExcluded(log, "placementId", "generation", "streamBase", "endOffset"),
      })
      .prepare(),
    insertChunk: db
      .insert(chunks)
      .values({ obj, ...placeholders("startOffset", "bytes", "text") })
      .prepare(),
    setEnd: db
      .update(log)
      .set({ endOffset: param<number>("end") })
      .where(eq(log.obj, obj))
      .prepare(),
    // start_offset < cut bounds the primary-key range the delete walks.
    dropBefore: db
      .delete(chunks)
      .where(
        and(eq(chunks.obj, obj), lt(chunks.startOffset, cut), lte(sql`${chunks.startOffset} + ${chunks.bytes}`, cut)),
      )
      .prepare(),
    // A chunk holding `offset` starts less than MAX_LOG_CHUNK_BYTES before it: that bounds the primary-key range.
    page: db
      .select({ startOffset: chunks.startOffset, bytes: chunks.bytes, text: chunks.text })
      .from(chunks)
      .where(
        and(
          eq(chunks.obj, obj),
          gt(chunks.startOffset, sql.placeholder("lowest")),
          gt(sql`${chunks.startOffset} + ${chunks.bytes}`, sql.placeholder("offset")),
        ),
      )
      .orderBy(asc(chunks.startOffset))
      .limit(MAX_CHUNKS_PER_READ)
      .prepare(),
  };
}

/** The placement the allocation currently runs, which alone may append. */
export interface CurrentPlacement {
  placementId: string;
  generation: number;
}

function meta(storage: ObjectStorage, obj: string): MetaRow | null {
  return prepared(storage, queries).meta.get({ obj }) ?? null;
}

/** Log offset just past the last byte received (0 for an empty log) of allocation `obj`. */
export function logEnd(storage: ObjectStorage, obj: string): number {
  return meta(storage, obj)?.endOffset ?? 0;
}

/**
 * Appends one chunk of `current`'s stream (see the module header), keeping
 * `ringBytes` of the log (LOG_RING_BYTES; a run's allocation RUN_LOG_RING_BYTES). Returns
 * the stream's end after it and `gapBytes` (bytes the agent skipped before
 * it: lost output, counted by the caller), or a refusal code for a chunk of another
 * placement (UNKNOWN_PLACEMENT) or an older generation (STALE_GENERATION).
 * Throws BODY_TOO_LARGE for text over MAX_LOG_CHUNK_BYTES bytes. Call inside
 * a transaction.
 */
export function appendLogChunk(
  storage: ObjectStorage,
  obj: string,
  current: CurrentPlacement | null,
  chunk: LogChunk,
  charge?: (newBytes: number) => void,
  ringBytes = LOG_RING_BYTES,
): LogChunkResult & { appended: boolean; gapBytes: number } {
  const refuse = (code: "UNKNOWN_PLACEMENT" | "STALE_GENERATION") => ({
    placementId: chunk.placementId,
    streamEnd: 0,
    code,
    appended: false,
    gapBytes: 0,
  });
  if (!current) return refuse("UNKNOWN_PLACEMENT");
  if (chunk.generation < current.generation) return refuse("STALE_GENERATION");
  if (chunk.placementId !== current.placementId || chunk.generation !== current.generation)
    return refuse("UNKNOWN_PLACEMENT");
  let bytes = Buffer.from(chunk.text, "utf8");
  if (bytes.length > MAX_LOG_CHUNK_BYTES)
    throw new BeachballError(
      "BODY_TOO_LARGE",
      `a log chunk holds ${bytes.length} bytes; the limit is ${MAX_LOG_CHUNK_BYTES}`,
      { limitBytes: MAX_LOG_CHUNK_BYTES },
    );
  const q = prepared(storage, queries);
  let m = meta(storage, obj);
  if (!m || m.placementId !== chunk.placementId) {
    const end = m?.endOffset ?? 0;
    m = { placementId: chunk.placementId, generation: chunk.generation, streamBase: end, endOffset: end };
    q.setStream.run({ obj, ...m });
  }
  const streamEnd = m.endOffset - m.streamBase;
  const offset = chunk.offset ?? streamEnd;
  if (bytes.length === 0 || offset + bytes.length <= streamEnd)
    return { placementId: chunk.placementId, streamEnd, appended: false, gapBytes: 0 };
  // A partial overlap (a resend after the scheduler kept part of it): keep only the new bytes.
  if (offset < streamEnd) bytes = bytes.subarray(streamEnd - offset);
  // Only new bytes count against the rate (AppendBudget; throws before anything is written): a resend of stored bytes is free,
  // so an agent retrying a push refused halfway never spends the budget on what was already stored.
  charge?.(bytes.length);
  const start = m.streamBase + Math.max(offset, streamEnd);
  const end = start + bytes.length;
  q.insertChunk.run({ obj, startOffset: start, bytes: bytes.length, text: bytes.toString("utf8") });
  q.setEnd.run({ obj, end });
  // The ring: whole chunks that end at or before the cut go, oldest first.
  q.dropBefore.run({ obj, cut: end - ringBytes });
  return {
    placementId: chunk.placementId,
    streamEnd: end - m.streamBase,
    appended: true,
    gapBytes: Math.max(0, offset - streamEnd),
  };
}

/**
 * Reads from log offset `offset`: the contiguous retained bytes from the
 * first one at or after it, at most `maxBytes` (at least one chunk).
 * Throws LOG_OFFSET_PAST_END when `offset` is beyond the log's end.
 * `complete` is left false (the caller knows whether the allocation ended).
 */
export function readLogPage(storage: ObjectStorage, obj: string, offset: number, maxBytes: number): LogPage {
  const end = logEnd(storage, obj);
  if (offset > end)
    throw new BeachballError("LOG_OFFSET_PAST_END", `offset ${offset} is past the log's end (${end})`, {
      endOffset: end,
    });
  const rows = prepared(storage, queries).page.all({ obj, lowest: offset - MAX_LOG_CHUNK_BYTES, offset });
  const first = rows[0];
  if (!first) return { offset: end, nextOffset: end, droppedBytes: end - offset, text: "", complete: false };
  const from = Math.max(offset, first.startOffset);
  const parts: Buffer[] = [];
  let at = from;
  for (const r of rows) {
    if (r.startOffset > at) break; // a gap: the next read reports it
    const b = Buffer.from(r.text, "utf8").subarray(at - r.startOffset);
    if (parts.length > 0 && at - from + b.length > maxBytes) break;
    parts.push(b);
    at += b.length;
  }
  return {
    offset: from,
    nextOffset: at,
    droppedBytes: from - offset,
    text: Buffer.concat(parts).toString("utf8"),
    complete: false,
  };
}

/** Follow reads parked on one allocation's log (memory only; a restart ends them, and readers resume by offset); woken by new bytes, the allocation ending, or the host stopping. */
export class LogFollowers extends ParkedReads {
  constructor() {
    super(MAX_LOG_FOLLOWERS, `${MAX_LOG_FOLLOWERS} readers already follow this allocation's log`, 5);
  }
}

/**
 * The rate bound on appends to one allocation's log: a token bucket of
 * LOG_APPEND_BURST_BYTES refilled at LOG_APPEND_BYTES_PER_SECOND (times
 * from the scheduler's clock port, ms).
 */
export class AppendBudget {
  private tokens = LOG_APPEND_BURST_BYTES;
  private atMs: number | null = null;

  /** Takes `bytes` at `nowMs`. Throws RATE_LIMITED (nothing taken) when the bucket holds fewer. */
  take(bytes: number, nowMs: number): void {
    if (this.atMs !== null)
      this.tokens = Math.min(
        LOG_APPEND_BURST_BYTES,
        this.tokens + (Math.max(0, nowMs - this.atMs) * LOG_APPEND_BYTES_PER_SECOND) / 1000,
      );
    this.atMs = Math.max(this.atMs ?? nowMs, nowMs); // a clock stepping back refills nothing, now or later
    if (bytes > this.tokens)
      throw new BeachballError(
        "RATE_LIMITED",
        `this allocation's log takes at most ${LOG_APPEND_BYTES_PER_SECOND} bytes per second`,
        { retryAfterSeconds: Math.ceil((bytes - this.tokens) / LOG_APPEND_BYTES_PER_SECOND) },
      );
    this.tokens -= bytes;
  }
}
