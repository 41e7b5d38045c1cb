/**
 * Hashing a blob file off the main thread: SHA-256 of a file computed in a
 * worker (its own read of the file), so the build can parse the same blob
 * (reading only its headers) on the main thread meanwhile, on the other
 * core. The worker comes from a source string (as the scheduler's
 * checkpointer's does), so it works in the compiled `bb` binary too.
 *
 * Owns: the worker's lifetime (one per hash, ended when it answers or
 * fails). Must never: leave the worker running after the promise settled.
 */

const WORKER_SOURCE = `
import { openSync, readSync, closeSync } from "node:fs";
import { createHash } from "node:crypto";
self.onmessage = (e) => {
  const { path, limit, chunk } = e.data;
  try {
    const fd = openSync(path, "r");
    const h = createHash("sha256");
    const buf = Buffer.allocUnsafe(chunk);
    let size = 0;
    try {
      for (;;) {
        const got = readSync(fd, buf, 0, chunk, null);
        if (got === 0) break;
        size += got;
        if (size > limit) break;
        h.update(buf.subarray(0, got));
      }
    } finally { closeSync(fd); }
    postMessage({ ok: true, hex: size > limit ? "" : h.digest("hex"), size });
  } catch (err) { postMessage({ ok: false, error: String(err) }); }
};
`;

/** Bytes the worker reads at a time. */
const HASH_READ_BYTES = 1 << 20;

/**
 * SHA-256 (lowercase hex) and byte count of the file at `path`, computed in
 * a worker thread. Stops counting past `limit` + 1 bytes (then `hex` is "").
 * Rejects with a plain Error when the file cannot be read.
 */
export function hashFileOffThread(path: string, limit: number): Promise<{ hex: string; size: number }> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(URL.createObjectURL(new Blob([WORKER_SOURCE], { type: "application/javascript" })));
    worker.onmessage = (e: MessageEvent<{ ok: boolean; hex?: string; size?: number; error?: string }>) => {
      worker.terminate();
      if (e.data.ok) resolve({ hex: e.data.hex!, size: e.data.size! });
      else reject(new Error(`hashing ${path} failed: ${e.data.error}`));
    };
    worker.onerror = (e) => {
      worker.terminate();
      reject(new Error(`hashing ${path} failed: ${e.message}`));
    };
    worker.postMessage({ path, limit, chunk: HASH_READ_BYTES });
  });
}
