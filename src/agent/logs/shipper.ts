/**
 * Pushes each running placement's workload output to the scheduler
 * (issue 13, "Workload output"; shapes and bounds in src/protocol/logs.ts),
 * outbound only, through the LogSink port (`POST /v1/agents/logs`).
 *
 * Housekeeping calls `tick` every LOG_SHIP_INTERVAL_MS (collect, then push
 * until the queue is empty or a push fails), and `collect` then `trimmed`
 * around each trim of a console file to its budget (vmm/consoleLog.ts).
 * Each push carries chunks of one placement, the placements taking turns,
 * so one refused for its rate (RATE_LIMITED) holds up only itself.
 * A collect reads at most MAX_COLLECT_BYTES new bytes, and nothing while
 * MAX_QUEUED_BYTES are queued: the console file holds the backlog (back
 * pressure, never a skip). Bytes are lost only when a trim cuts bytes not
 * yet read (output faster than LOG_APPEND_BYTES_PER_SECOND for longer than
 * the console budget absorbs, or a scheduler unreachable that long): they
 * become a gap in the stream (the reader is told how many bytes it missed;
 * `bb allocation logs` prints a marker line), are counted in
 * `droppedBytes`, and logged. Lines are redacted whole (redact.ts); only
 * the job's own lines are kept (jobOutput.ts: no markers, no kernel lines).
 * Ordering: `settle` (called when the guest reports the workload's exit)
 * returns once the output up to the job's exit marker is acknowledged by
 * the scheduler (bounded by SETTLE_MS), so the exit code is reported after
 * the output it ends. Stop calls `finish` before it deletes the console.
 * Restarts: the acknowledged position is persisted beside the console
 * (position.ts); a placement adopted by the next agent resumes there, so
 * output printed while no agent ran is shipped after it.
 * Must never: push bytes before redaction, a payload, or a placement's
 * output under another placement's identity.
 */
import { closeSync, fstatSync, openSync, readFileSync, readSync, statSync } from "node:fs";
import { JOB_EXIT_MARKER, JOB_START_MARKER } from "../../protocol/guest.ts";
import { MAX_LOG_CHUNK_BYTES, MAX_LOG_CHUNKS_PER_PUSH, type LogPushResponse } from "../../protocol/logs.ts";
import { errorText, type AgentLog, type LogSink } from "../ports.ts";
import { mapTrimmedOffset, type ConsoleTrim } from "../vmm/consoleLog.ts";
import { jobOutput, type JobPhase } from "./jobOutput.ts";
import { positionPath, readLogPosition, writeLogPosition, type LogPosition } from "./position.ts";
import { ConsoleRedactor, payloadDigests, type PayloadDigests } from "./redact.ts";

/** Most new console bytes one collect reads per placement. */
export const MAX_COLLECT_BYTES = 128 * 1024;
/** Most redacted bytes queued per placement before collects wait (the console file holds the rest). */
export const MAX_QUEUED_BYTES = 256 * 1024;
/** How often workload output is collected and pushed, ms. */
export const LOG_SHIP_INTERVAL_MS = 250;
/** Most pushes one tick makes (MAX_LOG_CHUNKS_PER_PUSH chunks each). */
export const MAX_PUSHES_PER_TICK = 8;
/** How long Stop waits for a placement's last output to be pushed, ms. */
export const FINISH_FLUSH_MS = 3_000;
/** How long the report of a workload's exit waits for its output up to the exit marker to be stored, ms. */
export const SETTLE_MS = 3_000;
/** How often `settle` looks for the exit marker on the console, ms. */
export const SETTLE_POLL_MS = 50;

/** The placement a collect is for. */
export interface ShippedPlacement {
  allocationId: string;
  placementId: string;
  generation: number;
  dirName: string;
}

interface Queued {
  offset: number | undefined;
  text: string;
  bytes: number;
  /** The console position (and phase) once this chunk and those before it are stored, or null mid-read. */
  resume: { rawOffset: number; phase: JobPhase } | null;
}

interface Stream {
  ref: ShippedPlacement;
  redactor: ConsoleRedactor;
  /** Position in the console file read so far, bytes. */
  rawOffset: number;
  /** Where the read position is relative to the job's markers. */
  phase: JobPhase;
  /** Next stream offset, or null until the scheduler told us (after an agent restart without a saved position). */
  streamOffset: number | null;
  queue: Queued[];
  queuedBytes: number;
  /** The scheduler refused this placement's output: nothing more is pushed. */
  refused: boolean;
  /** The position last persisted (position.ts). */
  saved: LogPosition | null;
  /** The last job line read is an exit marker (the guest's, or one the workload printed). */
  exitLast: boolean;
  /** The guest reported the workload's exit: the last exit marker ends the job (jobOutput.ts). */
  exitReported: boolean;
  /** The exit code the guest reported (null: not known). */
  reportedCode: number | null;
  /** The code of the last exit marker read (null: none, or not known). */
  lastCode: number | null;
  /** The last exit marker read had workload text before it, whose newline is owed if a job line follows (jobOutput.ts). */
  owedNewline: boolean;
  /** A trim cut bytes ahead of the read position: at raw offset `at`, reading jumps to `tailAt`, and `lostBytes` become a gap. */
  cut: { at: number; tailAt: number; lostBytes: number } | null;
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
  private inFlight: Promise<boolean> | null = null;
  private ticking = false;
  /** Round-robin position over the placements with output queued. */
  private turn = 0;
  /** The last push failed (a failure is logged once per run of failures). */
  private failing = false;
  /** Bytes of workload output lost since start (a trim cut them before they were read). */
  droppedBytes = 0;

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

  /** One shipping pass: collects every placement in `refs`, then pushes until nothing is queued, a push fails, or MAX_PUSHES_PER_TICK. Skipped while the last one runs. Never throws. */
  async tick(refs: readonly ShippedPlacement[]): Promise<void> {
    if (this.ticking) return;
    this.ticking = true;
    try {
      for (const r of refs) this.collect(r);
      // One placement per push: a placement refused for its rate (or any failure) holds up only itself.
      for (let i = 0, failed = 0; i < MAX_PUSHES_PER_TICK && failed < this.pushableCount(); i++) {
        if (await this.flush())
          for (const r of refs) this.collect(r); // room again: read on
        else failed++;
      }
    } finally {
      this.ticking = false;
    }
  }

  /**
   * The console file was rewritten by a trim (`t`): the read position and
   * saved positions move with the bytes they point at; unread bytes the trim
   * cut become a gap in the stream, counted and logged.
   */
  trimmed(ref: ShippedPlacement, t: ConsoleTrim): void {
    const s = this.streams.get(ref.placementId);
    if (!s) return;
    if (s.rawOffset < t.headBytes) {
      // The cut lies ahead: read the kept head, then jump over it (collectOnce).
      s.cut = { at: t.headBytes, tailAt: t.tailAt, lostBytes: (s.cut?.lostBytes ?? 0) + t.droppedBytes };
    } else {
      const m = mapTrimmedOffset(t, s.rawOffset);
      if (m.lostBytes > 0) this.lose(s, m.lostBytes);
      s.rawOffset = m.offset;
    }
    for (const q of s.queue)
      if (q.resume) q.resume = { ...q.resume, rawOffset: mapTrimmedOffset(t, q.resume.rawOffset).offset };
    if (s.saved) {
      const saved = mapTrimmedOffset(t, s.saved.rawOffset);
      this.save(s, {
        ...s.saved,
        rawOffset: saved.offset,
        streamOffset: s.saved.streamOffset + (s.saved.phase === "job" ? saved.lostBytes : 0),
      });
    }
  }

  /** Forgets placements not in `live` (ended, or never started here). */
  retain(live: ReadonlySet<string>): void {
    for (const id of [...this.streams.keys()]) if (!live.has(id)) this.streams.delete(id);
    for (const id of [...this.payloads.keys()]) if (!live.has(id)) this.payloads.delete(id);
  }

  /**
   * The guest reported the workload's exit: resolves once the output up to
   * its exit marker was read and acknowledged by the scheduler, or after
   * SETTLE_MS (the marker never came, or pushes fail). `exitCode`, the
   * code the guest reported, tells its marker from ones the workload printed
   * (jobOutput.ts). Never throws.
   */
  async settle(ref: ShippedPlacement, exitCode?: number): Promise<void> {
    const abort = new AbortController();
    let late = false;
    const deadline = this.deps.sleep(SETTLE_MS, abort.signal).then(() => {
      late = true;
    });
    const s0 = this.stream(ref);
    s0.exitReported = true;
    s0.reportedCode = exitCode ?? null;
    this.collect(ref);
    if (
      s0.exitLast &&
      s0.phase === "job" &&
      (exitCode === undefined || s0.lastCode === null || s0.lastCode === exitCode)
    ) {
      s0.phase = "ended"; // the guest's marker was read before its report came
      s0.owedNewline = false;
    }
    try {
      for (let i = 0; i < 4 * (SETTLE_MS / SETTLE_POLL_MS) && !late; i++) {
        this.collect(ref);
        const s = this.streams.get(ref.placementId);
        if (!s || s.refused || (s.phase === "ended" && s.queue.length === 0)) return;
        if (s.queue.length > 0) await Promise.race([this.flush(ref.placementId), deadline]);
        else await Promise.race([this.deps.sleep(SETTLE_POLL_MS), deadline]);
      }
    } finally {
      abort.abort();
    }
  }

  /** Stop: the placement's last output is collected and pushed (at most FINISH_FLUSH_MS), then forgotten. */
  async finish(ref: ShippedPlacement): Promise<void> {
    if (!this.streams.has(ref.placementId)) return;
    this.collect(ref);
    const abort = new AbortController();
    const deadline = this.deps.sleep(FINISH_FLUSH_MS, abort.signal).then(() => "late" as const);
    for (let i = 0; i < 64 && (this.streams.get(ref.placementId)?.queue.length ?? 0) > 0; i++) {
      if ((await Promise.race([this.flush(ref.placementId).then(() => "ok" as const), deadline])) === "late") break;
      this.collect(ref);
    }
    abort.abort();
    this.streams.delete(ref.placementId);
    this.payloads.delete(ref.placementId);
  }

  /** A graceful agent stop: pushes what is queued, for at most `ms`; the rest is read again by the next agent from the saved position. */
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

  /**
   * Pushes one batch (up to MAX_LOG_CHUNKS_PER_PUSH chunks of the next
   * placement in turn, or of `placementId` when it has some) if none is in flight; resolves when that batch is
   * done: true when it was stored (or refused for good), false when nothing
   * was queued or the push failed (retried later). Never throws.
   */
  flush(placementId?: string): Promise<boolean> {
    this.inFlight ??= this.pushOnce(placementId).finally(() => {
      this.inFlight = null;
    });
    return this.inFlight;
  }

  /**
   * A placement whose VM this agent adopted at start (it ran under an
   * earlier agent process): continue at the position that process saved
   * (position.ts), or, without one, at the console's end, without an offset
   * until the scheduler says where the stream ends.
   */
  adopt(ref: ShippedPlacement): void {
    const path = this.deps.consolePath(ref.dirName);
    const s = this.stream(ref);
    const size = fileSize(path);
    const saved = readLogPosition(positionPath(path));
    if (saved && saved.rawOffset <= size) {
      s.rawOffset = saved.rawOffset;
      s.phase = saved.phase;
      s.exitLast = s.exitReported = saved.phase === "ended";
      s.streamOffset = saved.streamOffset;
      s.saved = saved;
      return;
    }
    const text = readText(path);
    s.rawOffset = size;
    const started = text.lastIndexOf(`${JOB_START_MARKER}\n`);
    s.phase = started < 0 ? "boot" : text.indexOf(JOB_EXIT_MARKER, started) >= 0 ? "ended" : "job";
    s.exitLast = s.exitReported = s.phase === "ended";
    s.streamOffset = null;
  }

  /** Unread bytes of `s` are gone: a gap in the stream, counted and logged. */
  private lose(s: Stream, lostBytes: number): void {
    s.redactor.reset();
    if (s.phase !== "job") return;
    this.droppedBytes += lostBytes;
    if (s.streamOffset !== null) s.streamOffset += lostBytes;
    this.deps.log.warn(
      "dropped workload output: its console was trimmed before it was shipped (output above the log rate, or the scheduler unreachable)",
      { placementId: s.ref.placementId, lostBytes },
    );
  }

  private pushableStreams(): Stream[] {
    return [...this.streams.values()].filter((s) => !s.refused && s.queue.length > 0);
  }

  private pushableCount(): number {
    return this.pushableStreams().length;
  }

  private stream(ref: ShippedPlacement): Stream {
    let s = this.streams.get(ref.placementId);
    if (s) return s;
    s = {
      ref,
      redactor: new ConsoleRedactor(this.deps.secretsOf(ref.dirName)),
      rawOffset: 0,
      phase: "boot",
      streamOffset: 0,
      queue: [],
      queuedBytes: 0,
      refused: false,
      saved: null,
      cut: null,
      exitLast: false,
      exitReported: false,
      reportedCode: null,
      lastCode: null,
      owedNewline: false,
    };
    const d = this.payloads.get(ref.placementId);
    if (d) s.redactor.payloadDigests = d;
    this.streams.set(ref.placementId, s);
    return s;
  }

  private collectOnce(s: Stream): void {
    if (s.refused || s.queuedBytes >= MAX_QUEUED_BYTES) return; // back pressure: the console file holds the rest
    const path = this.deps.consolePath(s.ref.dirName);
    const size = fileSize(path);
    if (s.cut && s.rawOffset >= s.cut.at) {
      s.rawOffset = s.cut.tailAt;
      this.lose(s, s.cut.lostBytes);
      s.cut = null;
    }
    if (size < s.rawOffset) s.rawOffset = size; // rewritten under us: continue at its end
    const end = s.cut ? Math.min(size, s.cut.at) : size;
    if (end <= s.rawOffset) return;
    const raw = readRange(path, s.rawOffset, Math.min(end - s.rawOffset, MAX_COLLECT_BYTES));
    const atEnd = s.rawOffset + raw.length >= end && !s.cut;
    s.rawOffset += raw.length;
    const out = jobOutput(s.redactor.feed(raw), s.phase, {
      exitReported: s.exitReported,
      reportedCode: s.reportedCode,
      atEnd,
      exitLast: s.exitLast,
      owedNewline: s.owedNewline,
    });
    s.phase = out.phase;
    s.exitLast = out.exitLast;
    s.owedNewline = out.owedNewline;
    if (out.lastCode !== null) s.lastCode = out.lastCode;
    const resume = { rawOffset: s.rawOffset - s.redactor.heldBytes, phase: s.phase };
    const pieces = splitChunks(out.text);
    pieces.forEach((piece, i) => this.enqueue(s, piece, i === pieces.length - 1 ? resume : null));
    if (pieces.length > 0) return;
    const last = s.queue[s.queue.length - 1];
    if (last)
      last.resume = resume; // storing the last queued chunk also covers the lines filtered after it
    else if (s.streamOffset !== null) this.save(s, { ...resume, streamOffset: s.streamOffset });
  }

  private enqueue(s: Stream, text: string, resume: Queued["resume"]): void {
    const bytes = Buffer.byteLength(text);
    s.queue.push({ offset: s.streamOffset ?? undefined, text, bytes, resume });
    s.queuedBytes += bytes;
    if (s.streamOffset !== null) s.streamOffset += bytes;
  }

  /** Persists a stream's position when it moved (position.ts). Never throws. */
  private save(s: Stream, p: LogPosition): void {
    if (
      s.saved &&
      s.saved.rawOffset === p.rawOffset &&
      s.saved.streamOffset === p.streamOffset &&
      s.saved.phase === p.phase
    )
      return;
    try {
      writeLogPosition(positionPath(this.deps.consolePath(s.ref.dirName)), p);
      s.saved = p;
    } catch (e) {
      this.deps.log.warn("cannot save a log position", { placementId: s.ref.placementId, error: errorText(e) });
    }
  }

  private async pushOnce(placementId?: string): Promise<boolean> {
    const ready = this.pushableStreams();
    if (ready.length === 0) return false;
    const one = ready.find((s) => s.ref.placementId === placementId) ?? ready[this.turn++ % ready.length]!;
    const batch = one.queue.slice(0, MAX_LOG_CHUNKS_PER_PUSH).map((item) => ({ s: one, item }));
    let resp: LogPushResponse;
    try {
      resp = await this.deps.sink.push(
        batch.map(({ s, item }) => ({
          allocationId: s.ref.allocationId,
          placementId: s.ref.placementId,
          generation: s.ref.generation,
          ...(item.offset === undefined ? {} : { offset: item.offset }),
          text: item.text,
        })),
      );
    } catch (e) {
      if (!this.failing)
        this.deps.log.warn("log push failed (retried; logged once until a push succeeds)", { error: errorText(e) });
      this.failing = true;
      return false;
    }
    this.failing = false;
    const stored = new Map<Stream, LogPosition>();
    batch.forEach(({ s, item }, i) => {
      const r = resp.results[i];
      const at = s.queue.indexOf(item);
      if (at >= 0) {
        s.queue.splice(at, 1);
        s.queuedBytes -= item.bytes;
      }
      if (!r) return;
      if (r.code) {
        if (!s.refused)
          this.deps.log.warn("the scheduler refused a placement's log; not pushing it any more", {
            placementId: s.ref.placementId,
            code: r.code,
          });
        s.refused = true;
        s.queue = [];
        s.queuedBytes = 0;
        stored.delete(s);
        return;
      }
      if (s.streamOffset === null) {
        // After a restart: the scheduler placed this chunk at its stream's end; continue there.
        s.streamOffset = r.streamEnd;
        for (const q of s.queue) {
          q.offset = s.streamOffset;
          s.streamOffset += q.bytes;
        }
      }
      if (item.resume)
        stored.set(s, {
          ...item.resume,
          streamOffset: item.offset === undefined ? r.streamEnd : item.offset + item.bytes,
        });
    });
    for (const [s, p] of stored) this.save(s, p);
    return true;
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
