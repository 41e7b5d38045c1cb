/**
 * Pushes each running placement's workload output to the scheduler
 * (issue 13, "Workload output"; shapes and bounds in src/protocol/logs.ts),
 * outbound only, through the LogSink port (`POST /v1/agents/logs`).
 *
 * Housekeeping calls `collect` for every placement with a VM, right before
 * it trims the console file to its budget (vmm/consoleLog.ts), and
 * `trimmed` after a trim, so the read position stays on the file's new
 * end. A collect reads at most MAX_COLLECT_BYTES new bytes (past that, the
 * oldest unread bytes are skipped and become a gap in the stream: a bound
 * on rate, 64 KiB/s per placement at one collect per 2 s), redacts whole
 * lines (redact.ts) from the guest's JOB_START marker on, and queues chunks
 * of at most MAX_LOG_CHUNK_BYTES with their stream offsets, at most
 * MAX_QUEUED_BYTES per placement (the oldest queued chunks go first: a
 * gap). One push is in flight at a time; a failed push is retried on the
 * next flush. Stop calls `finish` before it deletes the console.
 * State is in memory: a placement adopted after an agent restart resumes
 * at the console's end, with no offset until the scheduler says where its
 * stream ends (output printed while no agent pushed is lost).
 * Must never: push bytes before redaction, a payload, or a placement's
 * output under another placement's identity.
 */
import { closeSync, fstatSync, openSync, readFileSync, readSync, statSync } from "node:fs";
import { JOB_START_MARKER } from "../../protocol/guest.ts";
import { MAX_LOG_CHUNK_BYTES, MAX_LOG_CHUNKS_PER_PUSH, type LogPushResponse } from "../../protocol/logs.ts";
import { errorText, type AgentLog, type LogSink } from "../ports.ts";
import { ConsoleRedactor, payloadDigests, type PayloadDigests } from "./redact.ts";

/** Most new console bytes one collect reads per placement. */
export const MAX_COLLECT_BYTES = 128 * 1024;
/** Most redacted bytes queued per placement while pushes fail or lag. */
export const MAX_QUEUED_BYTES = 256 * 1024;
/** How long Stop waits for a placement's last output to be pushed, ms. */
export const FINISH_FLUSH_MS = 3_000;

/** The placement a collect is for. */
export interface ShippedPlacement {
  allocationId: string;
  placementId: string;
  generation: number;
  dirName: string;
}

interface Stream {
  ref: ShippedPlacement;
  redactor: ConsoleRedactor;
  /** Position in the console file read so far, bytes. */
  rawOffset: number;
  /** The guest's JOB_START marker was seen: lines from it on are workload output. */
  started: boolean;
  /** Next stream offset, or null until the scheduler told us (after an agent restart). */
  streamOffset: number | null;
  queue: { offset: number | undefined; text: string; bytes: number }[];
  queuedBytes: number;
  /** The scheduler refused this placement's output: nothing more is pushed. */
  refused: boolean;
}

/** What the shipper works with. */
export interface ShipperDeps {
  sink: LogSink;
  log: AgentLog;
  /** Console file of a placement. */
  consolePath(dirName: string): string;
  /** The placement's secrets to scrub (its nonce), read once per placement. */
  secretsOf(dirName: string): string[];
  /** Resolves after `ms` or once `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** See the module header. */
export class ConsoleShipper {
  private readonly streams = new Map<string, Stream>();
  private readonly payloads = new Map<string, PayloadDigests>();
  private inFlight: Promise<void> | null = null;

  constructor(private readonly deps: ShipperDeps) {}

  /** Remembers the digests of a payload's lines and secret-looking words before it reaches the guest (redact.ts); the bytes are not kept. */
  notePayload(placementId: string, payload: Uint8Array): void {
    const d = payloadDigests(payload);
    this.payloads.set(placementId, d);
    const s = this.streams.get(placementId);
    if (s) s.redactor.payloadDigests = d;
  }

  /** Reads, redacts and queues what the placement's console gained since the last collect. Never throws. */
  collect(ref: ShippedPlacement): void {
    try {
      this.collectOnce(this.stream(ref));
    } catch (e) {
      this.deps.log.warn("cannot read a console for its log", { dirName: ref.dirName, error: errorText(e) });
    }
  }

  /** The console file was rewritten by a trim: continue at its new end. */
  trimmed(ref: ShippedPlacement): void {
    const s = this.streams.get(ref.placementId);
    if (s) s.rawOffset = fileSize(this.deps.consolePath(ref.dirName));
  }

  /** Forgets placements not in `live` (ended, or never started here). */
  retain(live: ReadonlySet<string>): void {
    for (const id of [...this.streams.keys()]) if (!live.has(id)) this.streams.delete(id);
    for (const id of [...this.payloads.keys()]) if (!live.has(id)) this.payloads.delete(id);
  }

  /** Stop: the placement's last output is collected and pushed (at most FINISH_FLUSH_MS), then forgotten. */
  async finish(ref: ShippedPlacement): Promise<void> {
    if (!this.streams.has(ref.placementId)) return;
    this.collect(ref);
    const abort = new AbortController();
    const deadline = this.deps.sleep(FINISH_FLUSH_MS, abort.signal).then(() => "late" as const);
    for (let i = 0; i < 8 && (this.streams.get(ref.placementId)?.queue.length ?? 0) > 0; i++) {
      if ((await Promise.race([this.flush().then(() => "ok" as const), deadline])) === "late") break;
    }
    abort.abort();
    this.streams.delete(ref.placementId);
    this.payloads.delete(ref.placementId);
  }

  /** A graceful agent stop: pushes what is queued, for at most `ms`; the rest is lost (the next agent resumes at the console's end). */
  async drain(ms: number): Promise<void> {
    const abort = new AbortController();
    const deadline = this.deps.sleep(ms, abort.signal).then(() => "late" as const);
    for (let i = 0; i < 64 && this.queuedBytes > 0; i++) {
      if ((await Promise.race([this.flush().then(() => "ok" as const), deadline])) === "late") break;
    }
    abort.abort();
  }

  /** Bytes queued across placements (for tests and the health of the intake). */
  get queuedBytes(): number {
    let n = 0;
    for (const s of this.streams.values()) n += s.queuedBytes;
    return n;
  }

  /** Pushes one batch if none is in flight; resolves when that batch is done. Never throws. */
  flush(): Promise<void> {
    this.inFlight ??= this.pushOnce().finally(() => {
      this.inFlight = null;
    });
    return this.inFlight;
  }

  /**
   * A placement whose VM this agent adopted at start (it ran under an
   * earlier agent process): its output so far was pushed by that process,
   * or is lost; continue at the console's end, without an offset until the
   * scheduler says where the stream ends.
   */
  adopt(ref: ShippedPlacement): void {
    const path = this.deps.consolePath(ref.dirName);
    const s = this.stream(ref);
    s.rawOffset = fileSize(path);
    s.started = readText(path).includes(`${JOB_START_MARKER}\n`);
    s.streamOffset = null;
  }

  private stream(ref: ShippedPlacement): Stream {
    let s = this.streams.get(ref.placementId);
    if (s) return s;
    s = { ref, redactor: new ConsoleRedactor(this.deps.secretsOf(ref.dirName)), rawOffset: 0, started: false, streamOffset: 0, queue: [], queuedBytes: 0, refused: false };
    const d = this.payloads.get(ref.placementId);
    if (d) s.redactor.payloadDigests = d;
    this.streams.set(ref.placementId, s);
    return s;
  }

  private collectOnce(s: Stream): void {
    if (s.refused) return;
    const path = this.deps.consolePath(s.ref.dirName);
    const size = fileSize(path);
    if (size < s.rawOffset) s.rawOffset = size; // rewritten under us: continue at its end
    let from = s.rawOffset;
    if (size - from > MAX_COLLECT_BYTES) {
      const skipped = size - MAX_COLLECT_BYTES - from;
      from = size - MAX_COLLECT_BYTES;
      s.redactor.reset();
      if (s.started && s.streamOffset !== null) s.streamOffset += skipped;
    }
    if (size === from) return;
    const raw = readRange(path, from, size - from);
    s.rawOffset = from + raw.length;
    let text = s.redactor.feed(raw);
    if (!s.started) {
      const at = text.startsWith(`${JOB_START_MARKER}\n`) ? 0 : text.indexOf(`\n${JOB_START_MARKER}\n`);
      if (at < 0) return;
      s.started = true;
      text = text.slice(at === 0 ? 0 : at + 1);
    }
    for (const piece of splitChunks(text)) this.enqueue(s, piece);
  }

  private enqueue(s: Stream, text: string): void {
    const bytes = Buffer.byteLength(text);
    s.queue.push({ offset: s.streamOffset ?? undefined, text, bytes });
    s.queuedBytes += bytes;
    if (s.streamOffset !== null) s.streamOffset += bytes;
    while (s.queuedBytes > MAX_QUEUED_BYTES && s.queue.length > 1) s.queuedBytes -= s.queue.shift()!.bytes; // a gap the reader is told about
  }

  private async pushOnce(): Promise<void> {
    const batch: { s: Stream; item: Stream["queue"][number] }[] = [];
    // Round robin: the oldest chunk of each placement first, so one noisy VM does not starve the others.
    for (let round = 0; batch.length < MAX_LOG_CHUNKS_PER_PUSH; round++) {
      let added = false;
      for (const s of this.streams.values()) {
        const item = s.queue[round];
        if (!item || s.refused || batch.length >= MAX_LOG_CHUNKS_PER_PUSH) continue;
        batch.push({ s, item });
        added = true;
      }
      if (!added) break;
    }
    if (batch.length === 0) return;
    let resp: LogPushResponse;
    try {
      resp = await this.deps.sink.push(
        batch.map(({ s, item }) => ({ allocationId: s.ref.allocationId, placementId: s.ref.placementId, generation: s.ref.generation, ...(item.offset === undefined ? {} : { offset: item.offset }), text: item.text })),
      );
    } catch (e) {
      this.deps.log.warn("log push failed (retried)", { error: errorText(e) });
      return;
    }
    batch.forEach(({ s, item }, i) => {
      const r = resp.results[i];
      const at = s.queue.indexOf(item);
      if (at >= 0) {
        s.queue.splice(at, 1);
        s.queuedBytes -= item.bytes;
      }
      if (!r) return;
      if (r.code) {
        if (!s.refused) this.deps.log.warn("the scheduler refused a placement's log; not pushing it any more", { placementId: s.ref.placementId, code: r.code });
        s.refused = true;
        s.queue = [];
        s.queuedBytes = 0;
      } else if (s.streamOffset === null) {
        // After a restart: the scheduler placed this chunk at its stream's end; continue there.
        s.streamOffset = r.streamEnd;
        for (const q of s.queue) {
          q.offset = s.streamOffset;
          s.streamOffset += q.bytes;
        }
      }
    });
  }
}

/** Splits redacted text into pieces of at most MAX_LOG_CHUNK_BYTES, at line ends (lines are at most 4 KiB). */
export function splitChunks(text: string): string[] {
  const out: string[] = [];
  let cur = "";
  let curBytes = 0;
  for (const line of text.split(/(?<=\n)/)) {
    const b = Buffer.byteLength(line);
    if (curBytes + b > MAX_LOG_CHUNK_BYTES && cur) {
      out.push(cur);
      cur = "";
      curBytes = 0;
    }
    cur += line;
    curBytes += b;
  }
  if (cur) out.push(cur);
  return out;
}

function fileSize(path: string): number {
  return statSync(path, { throwIfNoEntry: false })?.size ?? 0;
}

function readText(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}

function readRange(path: string, from: number, n: number): Buffer {
  const fd = openSync(path, "r");
  try {
    const len = Math.min(n, Math.max(0, fstatSync(fd).size - from));
    const buf = Buffer.alloc(len);
    const got = readSync(fd, buf, 0, len, from);
    return buf.subarray(0, got);
  } finally {
    closeSync(fd);
  }
}
