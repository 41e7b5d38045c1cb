/**
 * Keeps a VM's console log under a byte budget (spec "Start": console.log
 * under a byte budget) while QEMU keeps appending to it.
 *
 * The file is rewritten in place (never renamed: QEMU holds an O_APPEND fd,
 * so after truncation its writes land at the new end). Bytes QEMU appends
 * between our read and the truncate can be lost; that is accepted.
 * Synchronous on purpose: a trim is a few reads and writes of at most the
 * budget, and keeping it off the event loop's I/O pool keeps the agent's
 * housekeeping deterministic under the simulation's fake timers.
 * Must never: grow the file, or drop the head (it holds the boot messages).
 */
import { closeSync, fstatSync, ftruncateSync, openSync, readSync, statSync, writeSync } from "node:fs";

const MARKER_RE = /^\n\[\.\.\. (\d+) bytes trimmed \.\.\.\]\n/;

/**
 * If `path` exceeds `budgetBytes`, keeps its first quarter and last part and
 * puts a `[... N bytes trimmed ...]` line between them (N counts every byte
 * dropped so far, across calls). Returns the number of bytes dropped now
 * (0 when under budget or absent). Throws on I/O errors other than ENOENT.
 */
export function trimConsoleLog(path: string, budgetBytes: number): number {
  const st = statSync(path, { throwIfNoEntry: false });
  if (!st || st.size <= budgetBytes) return 0; // the common case: one stat, no open
  let fd: number;
  try {
    fd = openSync(path, "r+");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return 0;
    throw e;
  }
  try {
    const size = fstatSync(fd).size;
    if (size <= budgetBytes) return 0;
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
    if (droppedNow <= 0) return 0;
    const tail = Buffer.alloc(tailBytes);
    readSync(fd, tail, 0, tailBytes, tailStart);
    const marker = Buffer.from(`\n[... ${prevTrimmed + droppedNow} bytes trimmed ...]\n`, "latin1");
    writeSync(fd, marker, 0, marker.length, headBytes);
    writeSync(fd, tail, 0, tailBytes, headBytes + marker.length);
    ftruncateSync(fd, headBytes + marker.length + tailBytes);
    return droppedNow;
  } finally {
    closeSync(fd);
  }
}
