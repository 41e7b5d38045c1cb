/**
 * Keeps a VM's console log under a byte budget (spec "Start": console.log
 * under a byte budget) while QEMU keeps appending to it.
 *
 * The file is rewritten in place (never renamed: QEMU holds an O_APPEND fd,
 * so after truncation its writes land at the new end). Bytes QEMU appends
 * while the tail is copied land past the old end: they are copied after the
 * tail too, until the size holds still, so only an append in the moment
 * between that last size check and the truncate can be lost (before, every
 * append during the copy of up to the budget was lost, silently).
 * Synchronous on purpose: a trim is a few reads and writes of at most the
 * budget, and keeping it off the event loop's I/O pool keeps the agent's
 * housekeeping deterministic under the simulation's fake timers.
 * Must never: grow the file, or drop the head (it holds the boot messages).
 */
import { closeSync, fstatSync, ftruncateSync, openSync, readSync, statSync, writeSync } from "node:fs";

const MARKER_RE = /^\n\[\.\.\. (\d+) bytes trimmed \.\.\.\]\n/;

/**
 * What one trim did to the file's offsets: bytes before `headBytes` stayed,
 * bytes from `cutEnd` on moved to start at `tailAt` (after the new marker),
 * the bytes between were dropped (`droppedBytes` of them, old markers aside).
 */
export interface ConsoleTrim {
  droppedBytes: number;
  headBytes: number;
  cutEnd: number;
  tailAt: number;
}

/**
 * Where old offset `x` of a trimmed file is now, and how many bytes from
 * `x` on were dropped (0 unless `x` fell in the cut). Pure.
 */
export function mapTrimmedOffset(t: ConsoleTrim, x: number): { offset: number; lostBytes: number } {
  if (x <= t.headBytes) return { offset: x, lostBytes: 0 };
  if (x >= t.cutEnd) return { offset: x - t.cutEnd + t.tailAt, lostBytes: 0 };
  return { offset: t.tailAt, lostBytes: t.cutEnd - x };
}

/** trimConsoleLogAt, answering only the bytes dropped now. */
export function trimConsoleLog(path: string, budgetBytes: number): number {
  return trimConsoleLogAt(path, budgetBytes)?.droppedBytes ?? 0;
}

/**
 * If `path` exceeds `budgetBytes`, keeps its first quarter and last part and
 * puts a `[... N bytes trimmed ...]` line between them (N counts every byte
 * dropped so far, across calls). Returns how the offsets moved (null when
 * under budget or absent), for a reader of the file (logs/shipper.ts).
 * Throws on I/O errors other than ENOENT. `afterCopy` (tests) runs once the
 * tail is copied, as QEMU's appends would.
 */
export function trimConsoleLogAt(path: string, budgetBytes: number, afterCopy?: () => void): ConsoleTrim | null {
  const st = statSync(path, { throwIfNoEntry: false });
  if (!st || st.size <= budgetBytes) return null; // the common case: one stat, no open
  let fd: number;
  try {
    fd = openSync(path, "r+");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw e;
  }
  try {
    const size = fstatSync(fd).size;
    if (size <= budgetBytes) return null;
    const headBytes = Math.floor(budgetBytes / 4);
    const probe = Buffer.alloc(64);
    const bytesRead = readSync(fd, probe, 0, probe.length, headBytes);
    const prev = MARKER_RE.exec(probe.subarray(0, bytesRead).toString("latin1"));
    const prevTrimmed = prev ? Number(prev[1]) : 0;
    const prevMarkerBytes = prev ? prev[0].length : 0;
    const reserve = 64; // room for the marker line
    const tailBytes = Math.max(0, budgetBytes - headBytes - reserve);
    const tailStart = size - tailBytes;
    const droppedNow = tailStart - headBytes - prevMarkerBytes;
    if (droppedNow <= 0) return null;
    const tail = Buffer.alloc(tailBytes);
    readSync(fd, tail, 0, tailBytes, tailStart);
    const marker = Buffer.from(`\n[... ${prevTrimmed + droppedNow} bytes trimmed ...]\n`, "latin1");
    writeSync(fd, marker, 0, marker.length, headBytes);
    writeSync(fd, tail, 0, tailBytes, headBytes + marker.length);
    afterCopy?.();
    // Appends that came during the copy sit past the old end: move them after the tail (below the old end, so never over unread bytes).
    let end = size;
    let newEnd = headBytes + marker.length + tailBytes;
    for (let i = 0; i < 64; i++) {
      const now = fstatSync(fd).size;
      if (now <= end) break;
      const more = Buffer.alloc(now - end);
      const got = readSync(fd, more, 0, more.length, end);
      writeSync(fd, more, 0, got, newEnd);
      end += got;
      newEnd += got;
    }
    ftruncateSync(fd, newEnd);
    return { droppedBytes: droppedNow, headBytes, cutEnd: tailStart, tailAt: headBytes + marker.length };
  } finally {
    closeSync(fd);
  }
}
