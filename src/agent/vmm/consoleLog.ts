/**
 * Keeps a VM's console log under a byte budget (spec "Start": console.log
 * under a byte budget) while QEMU keeps appending to it.
 *
 * The file is rewritten in place (never renamed: QEMU holds an O_APPEND fd,
 * so after truncation its writes land at the new end). Bytes QEMU appends
 * between our read and the truncate can be lost; that is accepted.
 * Must never: grow the file, or drop the head (it holds the boot messages).
 */
import { open } from "node:fs/promises";

const MARKER_RE = /^\n\[\.\.\. (\d+) bytes trimmed \.\.\.\]\n/;

/**
 * If `path` exceeds `budgetBytes`, keeps its first quarter and last part and
 * puts a `[... N bytes trimmed ...]` line between them (N counts every byte
 * dropped so far, across calls). Returns the number of bytes dropped now
 * (0 when under budget or absent). Throws on I/O errors other than ENOENT.
 */
export async function trimConsoleLog(path: string, budgetBytes: number): Promise<number> {
  const fh = await open(path, "r+").catch((e: NodeJS.ErrnoException) => (e.code === "ENOENT" ? null : Promise.reject(e)));
  if (!fh) return 0;
  try {
    const size = (await fh.stat()).size;
    if (size <= budgetBytes) return 0;
    const headBytes = Math.floor(budgetBytes / 4);
    const probe = Buffer.alloc(64);
    const { bytesRead } = await fh.read(probe, 0, probe.length, headBytes);
    const prev = MARKER_RE.exec(probe.subarray(0, bytesRead).toString("latin1"));
    const prevTrimmed = prev ? Number(prev[1]) : 0;
    const prevMarkerBytes = prev ? prev[0].length : 0;
    const reserve = 64; // room for the marker line
    const tailBytes = Math.max(0, budgetBytes - headBytes - reserve);
    const tailStart = size - tailBytes;
    const droppedNow = tailStart - headBytes - prevMarkerBytes;
    if (droppedNow <= 0) return 0;
    const tail = Buffer.alloc(tailBytes);
    await fh.read(tail, 0, tailBytes, tailStart);
    const marker = Buffer.from(`\n[... ${prevTrimmed + droppedNow} bytes trimmed ...]\n`, "latin1");
    await fh.write(marker, 0, marker.length, headBytes);
    await fh.write(tail, 0, tailBytes, headBytes + marker.length);
    await fh.truncate(headBytes + marker.length + tailBytes);
    return droppedNow;
  } finally {
    await fh.close();
  }
}
