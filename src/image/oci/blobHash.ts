/**
 * Hashing files off the main thread: SHA-256 of a file computed in a
 * worker (its own read of the file), so the build can parse the same blob
 * (reading only its headers) on the main thread meanwhile, on the other
 * core. The worker comes from a source string (as the scheduler's
 * checkpointer's does), so it works in the compiled `bb` binary too.
 *
 * One worker serves every request, one file at a time in the order asked
 * (a build's layers, then its squashfs): starting a worker costs about
 * 40 ms of CPU (a JavaScript VM of its own), and on the 2 cores a build
 * has, hashing three layers at once is no faster than one after another.
 *
 * Owns: the worker's lifetime (started by the first request, ended as soon
 * as no request is pending, and when it fails: every pending request is
 * then rejected). Must never: leave the worker running once every promise
 * it owes has settled.
 */

const WORKER_SOURCE = `
import { openSync, readSync, closeSync } from "node:fs";
import { createHash } from "node:crypto";
self.onmessage = (e) => {
  const { id, path, limit, chunk } = e.data;
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
    postMessage({ id, ok: true, hex: size > limit ? "" : h.digest("hex"), size });
  } catch (err) { postMessage({ id, ok: false, error: String(err) }); }
};
`;

/** Bytes the worker reads at a time. */
const HASH_READ_BYTES = 1 << 20;

type Reply = { id: number; ok: boolean; hex?: string; size?: number; error?: string };
interface Pending {
  path: string;
  resolve: (r: { hex: string; size: number }) => void;
  reject: (e: Error) => void;
}

let worker: Worker | null = null;
let nextId = 0;
const pending = new Map<number, Pending>();

function stop(): void {
  worker?.terminate();
  worker = null;
}

function started(): Worker {
  if (worker) return worker;
  const w = new Worker(URL.createObjectURL(new Blob([WORKER_SOURCE], { type: "application/javascript" })));
  w.onmessage = (e: MessageEvent<Reply>) => {
    const p = pending.get(e.data.id);
    if (!p) return;
    pending.delete(e.data.id);
    if (pending.size === 0) stop();
    if (e.data.ok) p.resolve({ hex: e.data.hex!, size: e.data.size! });
    else p.reject(new Error(`hashing ${p.path} failed: ${e.data.error}`));
  };
  w.onerror = (e) => {
    const all = [...pending.values()];
    pending.clear();
    stop();
    for (const p of all) p.reject(new Error(`hashing ${p.path} failed: ${e.message}`));
  };
  worker = w;
  return w;
}

/**
 * SHA-256 (lowercase hex) and byte count of the file at `path`, computed in
 * the shared hashing worker (after the requests made before this one).
 * Stops counting past `limit` + 1 bytes (then `hex` is ""). Rejects with a
 * plain Error when the file cannot be read or the worker fails.
 */
export function hashFileOffThread(path: string, limit: number): Promise<{ hex: string; size: number }> {
  return new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { path, resolve, reject });
    started().postMessage({ id, path, limit, chunk: HASH_READ_BYTES });
  });
}

/** True while the hashing worker runs (some request is pending); for tests of its lifetime. */
export function hashWorkerRunning(): boolean {
  return worker !== null;
}
