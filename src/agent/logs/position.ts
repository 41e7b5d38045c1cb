/**
 * Where a placement's console stream was last acknowledged by the scheduler
 * (issue 18 item 11, "output lost while the agent restarts"): a small JSON
 * file beside the console (`log-position.json` in the placement's
 * directory, deleted with it), written atomically (temp file and rename)
 * after every push that moved it. The next agent process resumes reading
 * the console there, with the stream offset it had reached, so output
 * printed while no agent ran is shipped after the restart; bytes read but
 * not acknowledged are read and sent again (the scheduler places a chunk by
 * its offset, so a resend is a no-op).
 * Must never: hold console text, a payload or a secret (offsets only).
 */
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import type { JobPhase } from "./jobOutput.ts";

/** The persisted position of one placement's stream. */
export interface LogPosition {
  /** Bytes of the console file read and acknowledged. */
  rawOffset: number;
  /** The stream offset the next chunk carries. */
  streamOffset: number;
  /** Where the stream is relative to the job's markers at `rawOffset`. */
  phase: JobPhase;
}

/** The position file of a placement whose console is at `consolePath`. */
export function positionPath(consolePath: string): string {
  return consolePath.replace(/[^/]*$/, "log-position.json");
}

/** The persisted position, or null (none, or unreadable: then the caller resumes at the console's end). */
export function readLogPosition(path: string): LogPosition | null {
  try {
    const p = JSON.parse(readFileSync(path, "utf8")) as Partial<LogPosition>;
    const ok = (n: unknown) => typeof n === "number" && Number.isSafeInteger(n) && n >= 0;
    if (!ok(p.rawOffset) || !ok(p.streamOffset) || (p.phase !== "boot" && p.phase !== "job" && p.phase !== "ended"))
      return null;
    return { rawOffset: p.rawOffset!, streamOffset: p.streamOffset!, phase: p.phase };
  } catch {
    return null;
  }
}

/** Writes the position atomically. Throws on I/O errors (the caller logs them; the next push tries again). */
export function writeLogPosition(path: string, p: LogPosition): void {
  const tmp = `${path}.tmp`;
  writeFileSync(tmp, JSON.stringify(p), { mode: 0o600 });
  renameSync(tmp, path);
}
