/**
 * Whether the embedded store's real writes succeed (issue 18 item 19: with
 * the data directory full, every create answered 503 while /healthz said
 * ok, because the health probe's tiny write still fitted and cleared the
 * failure; a corrupted page failed every list while health said ok).
 *
 * Every storage fault a real call or commit meets is recorded here (its
 * SQLite code, the file, the object, the time); health is unhealthy from
 * then on until it is cleared:
 * - a full, read-only or failing file is cleared by a health probe that
 *   commits HEALTH_PROBE_BYTES (about a large ordinary commit, so a disk
 *   with room only for tiny writes fails it), tried at most once per
 *   PROBE_INTERVAL_MS while a fault is recorded;
 * - a corrupt file (SQLITE_CORRUPT, SQLITE_NOTADB) is never cleared by a
 *   probe: the damage does not heal; the operator restores the file and
 *   restarts (the health detail says so).
 * One error line per fault episode (when it starts, or its code changes),
 * naming the SQLite code and the file; the rest are counted; one info line
 * when it clears.
 * Must never: let a successful tiny write hide failing real writes, or log
 * a line per failed request.
 */
import type { Logger } from "../../../command/log.ts";

/** Bytes the health probe commits while a fault is recorded. */
export const HEALTH_PROBE_BYTES = 256 * 1024;
/** Shortest time between two health probes while a fault is recorded, ms. */
export const PROBE_INTERVAL_MS = 1_000;

/** SQLite codes that mean the file is damaged: no probe clears them. */
const CORRUPTION = /^SQLITE_(CORRUPT|NOTADB)/;

/** A recorded storage fault. */
export interface StorageFault {
  /** SQLite's extended result code name, e.g. SQLITE_FULL, SQLITE_IOERR_WRITE, SQLITE_CORRUPT. */
  code: string;
  /** SQLite's message (no row content: SQLite's messages carry none). */
  message: string;
  /** Where it happened: "commit", or the object "Class name". */
  where: string;
  /** When it was first seen in this episode, ms since the epoch. */
  sinceMs: number;
  /** Faults seen in this episode. */
  count: number;
}

/** The SQLite code of `e`, or "SQLITE_ERROR" when it has none. */
export function sqliteCode(e: unknown): string {
  const c = (e as { code?: unknown } | null)?.code;
  return typeof c === "string" && c.startsWith("SQLITE_") ? c : "SQLITE_ERROR";
}

/** See the module header. */
export class StorageHealth {
  private current: StorageFault | null = null;
  private lastProbeMs = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly file: string,
    private readonly log: Logger,
  ) {}

  /** The fault in force, or null. */
  get fault(): StorageFault | null {
    return this.current;
  }

  /** Records a fault met by a real call or commit at `nowMs` (one error line per episode or change of code). */
  record(e: unknown, where: string, nowMs: number): void {
    const code = sqliteCode(e);
    const message = e instanceof Error ? e.message : String(e);
    const c = this.current;
    if (c && c.code === code) {
      c.count++;
      return;
    }
    this.current = { code, message, where, sinceMs: nowMs, count: (c?.count ?? 0) + 1 };
    this.log.error("storage write failed", {
      code,
      file: this.file,
      where,
      error: message,
      next: nextStep(code, this.file),
    });
  }

  /** True when a probe may run now (a clearable fault is recorded and the last probe is PROBE_INTERVAL_MS old); marks the probe as run. */
  probeDue(nowMs: number): boolean {
    const c = this.current;
    if (!c || CORRUPTION.test(c.code) || nowMs - this.lastProbeMs < PROBE_INTERVAL_MS) return false;
    this.lastProbeMs = nowMs;
    return true;
  }

  /** A probe of HEALTH_PROBE_BYTES committed at `nowMs`: the fault is cleared (one info line). */
  probeSucceeded(nowMs: number): void {
    const c = this.current;
    if (!c) return;
    this.current = null;
    this.log.info("storage writes succeed again", {
      code: c.code,
      file: this.file,
      faults: c.count,
      failingMs: nowMs - c.sinceMs,
    });
  }

  /** Health: ok, or the code, the file and what to do. */
  health(): { ok: boolean; detail: string; code?: string } {
    const c = this.current;
    if (!c) return { ok: true, detail: "ok" };
    return {
      ok: false,
      code: c.code,
      detail: `storage: ${c.code} (${c.message}) writing ${this.file}; ${nextStep(c.code, this.file)}`,
    };
  }
}

/** What an operator does about `code` on `file`. */
export function nextStep(code: string, file: string): string {
  if (code.startsWith("SQLITE_FULL")) return `free space on the file system of ${file}`;
  if (code.startsWith("SQLITE_READONLY") || code.startsWith("SQLITE_CANTOPEN") || code.startsWith("SQLITE_PERM"))
    return `make ${file} and its directory writable by this user`;
  if (CORRUPTION.test(code))
    return `stop the scheduler, restore ${file} from a backup (or move the data directory aside to start empty), then start it again`;
  return `check the disk holding ${file} (kernel log, SMART), then restart the scheduler`;
}
