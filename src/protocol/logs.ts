/**
 * Workload output from afar (issue 13, "Workload output"): the shapes and
 * bounds of the console stream an agent pushes to the scheduler
 * (`POST /v1/agents/logs`) and of the log a client reads
 * (`GET /v1/allocations/{id}/logs?offset=N[&follow=1]`).
 *
 * Offsets count bytes of UTF-8 text. An agent numbers its chunks per
 * placement from 0 (its *stream offset*); the scheduler places each
 * placement's stream after what the allocation's log already holds and
 * numbers the allocation's log from 0 (the *log offset* a reader uses).
 * Bytes that never arrived or were dropped by the scheduler's ring are
 * never renumbered: a reader asking for them gets the next bytes that
 * exist and `droppedBytes` saying how many it missed.
 * Owns: shapes and bounds. Must never: carry a bootstrap payload or nonce
 * (the agent redacts before pushing; see src/agent/logs/).
 */
import { Type, type Static } from "@sinclair/typebox";
import { MAX_WIRE_INTEGER } from "./api.ts";

/** Most text bytes (UTF-8) in one pushed chunk. */
export const MAX_LOG_CHUNK_BYTES = 16 * 1024;
/** Most chunks in one push. */
export const MAX_LOG_CHUNKS_PER_PUSH = 8;
/** Byte limit of a push request body (JSON may escape what it carries: twice the text bound plus framing). */
export const MAX_LOG_PUSH_BODY_BYTES = 2 * MAX_LOG_CHUNK_BYTES * MAX_LOG_CHUNKS_PER_PUSH + 16 * 1024;
/** What the scheduler keeps of one allocation's log, bytes; older bytes are dropped first (their offsets stay used). */
export const LOG_RING_BYTES = 1024 * 1024;
/** Most bytes one read answers with. */
export const MAX_LOG_READ_BYTES = 256 * 1024;
/** Longest a follow read waits for new bytes before answering with none, ms. */
export const LOG_FOLLOW_WAIT_MS = 20_000;
/**
 * Bytes per second the scheduler takes into one allocation's log on average;
 * past the burst a push is refused with RATE_LIMITED (the agent keeps the
 * output and retries). The documented rate: output below it is never lost
 * (src/agent/logs/shipper.ts); above it for longer than the console budget
 * absorbs, the oldest unread bytes become a counted gap.
 */
export const LOG_APPEND_BYTES_PER_SECOND = 128 * 1024;
/** Bytes one allocation's log may take at once before the rate applies. */
export const LOG_APPEND_BURST_BYTES = 512 * 1024;
/** Most follow reads parked on one allocation at once; past it a follow read is refused with RATE_LIMITED. */
export const MAX_LOG_FOLLOWERS = 16;

const Id = Type.String({ minLength: 1, maxLength: 160, pattern: "^[A-Za-z0-9._:-]+$" });

/** One chunk of a placement's redacted console stream. */
export const LogChunk = Type.Object(
  {
    allocationId: Id,
    placementId: Id,
    generation: Type.Integer({ minimum: 1, maximum: MAX_WIRE_INTEGER }),
    /**
     * Where `text` starts in the placement's stream, bytes. Absent after an
     * agent restart (it lost its place): the scheduler appends at the
     * stream's end and answers with it.
     */
    offset: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_WIRE_INTEGER })),
    /** Redacted console text; at most MAX_LOG_CHUNK_BYTES bytes of UTF-8 (checked by the scheduler). */
    text: Type.String({ maxLength: MAX_LOG_CHUNK_BYTES }),
  },
  { additionalProperties: false },
);
/** One chunk of a placement's redacted console stream. */
export type LogChunk = Static<typeof LogChunk>;

/** Body of `POST /v1/agents/logs`. */
export const LogPushBody = Type.Object(
  {
    hostId: Id,
    chunks: Type.Array(LogChunk, { minItems: 1, maxItems: MAX_LOG_CHUNKS_PER_PUSH }),
  },
  { additionalProperties: false },
);
/** Body of `POST /v1/agents/logs`. */
export type LogPushBody = Static<typeof LogPushBody>;

/**
 * What the scheduler did with one chunk: `streamEnd` is the placement's
 * stream end after it (the agent continues there); `code` says why it was
 * refused (UNKNOWN_PLACEMENT: not this host's current placement of the
 * allocation; STALE_GENERATION: an older generation) and the agent drops
 * the placement's queue.
 */
export interface LogChunkResult {
  placementId: string;
  streamEnd: number;
  code?: "UNKNOWN_PLACEMENT" | "STALE_GENERATION";
}

/** Answer to a push: one result per chunk, in order. */
export interface LogPushResponse {
  results: LogChunkResult[];
}

/**
 * Answer to `GET /v1/allocations/{id}/logs`: `text` starts at log offset
 * `offset` (≥ the offset asked for) and ends at `nextOffset` (ask there
 * next). `droppedBytes` = `offset` − the offset asked for: bytes the reader
 * will never see (dropped by the ring, or lost before they reached the
 * scheduler). `complete`: the allocation is terminal and every byte it
 * holds up to `nextOffset` was returned, so following can stop.
 */
export interface LogPage {
  offset: number;
  nextOffset: number;
  droppedBytes: number;
  text: string;
  complete: boolean;
}
