/**
 * WAL checkpoints of the embedded store on a second thread
 * (docs/adr/0120-object-runtime-storage.md): with `synchronous=NORMAL` a
 * commit does not fsync, a checkpoint does, and SQLite runs it inside the
 * commit that crosses the WAL threshold, stalling every object call on the
 * main thread for the copy and the fsync. Here the main connection never
 * checkpoints on its own (`wal_autocheckpoint = 0`); a Bun Worker with its
 * own connection runs PASSIVE checkpoints (which never block the writer)
 * every CHECKPOINT_INTERVAL_MS. If the worker cannot run or falls behind
 * (the WAL grows past MAX_WAL_BYTES), the main thread checkpoints itself.
 * Must never: leave the WAL to grow without bound, or checkpoint in a way
 * that blocks the writer.
 */
import { statSync } from "node:fs";
import type { Database } from "bun:sqlite";

/** How often the worker checkpoints, ms. */
export const CHECKPOINT_INTERVAL_MS = 250;
/** WAL size past which the main thread checkpoints itself, bytes. */
export const MAX_WAL_BYTES = 64 * 1024 * 1024;

const WORKER_SOURCE = `
import { Database } from "bun:sqlite";
let db;
self.onmessage = (e) => {
  const m = e.data;
  try {
    if (m.open) { db = new Database(m.open); db.exec("PRAGMA busy_timeout = 1000"); }
    else if (m.checkpoint && db) { db.query("PRAGMA wal_checkpoint(PASSIVE)").get(); postMessage({ ok: true }); }
    else if (m.close) { if (db) db.close(); self.close(); }
  } catch (err) { postMessage({ ok: false, error: String(err) }); }
};
`;

/** A running checkpointer; `stop()` ends the worker (the caller checkpoints at close). */
export interface Checkpointer {
  /** Checkpoints completed so far (by the worker or, as a fallback, here). */
  readonly completed: number;
  /** True if checkpoints run on the worker thread. */
  readonly inWorker: boolean;
  stop(): void;
}

/**
 * Starts background checkpoints for `file` (opened by `db` on this thread).
 * Falls back to the main thread (only when `idle()`: no write transaction
 * open on `db`) when a Worker cannot start or falls behind.
 */
export function startCheckpointer(file: string, db: Database, idle: () => boolean): Checkpointer {
  db.exec("PRAGMA wal_autocheckpoint = 0");
  const state = { completed: 0 };
  let worker: Worker | null = null;
  try {
    worker = new Worker(URL.createObjectURL(new Blob([WORKER_SOURCE], { type: "application/javascript" })));
    worker.onmessage = (e: MessageEvent<{ ok: boolean; error?: string }>) => {
      if (e.data.ok) state.completed++;
      else console.error(`beachball: background checkpoint of ${file} failed: ${e.data.error}`);
    };
    worker.postMessage({ open: file });
    worker.unref?.();
  } catch {
    worker = null;
  }
  const timer = setInterval(() => {
    let walBytes = 0;
    try {
      walBytes = statSync(`${file}-wal`).size;
    } catch {
      walBytes = 0;
    }
    if (worker && walBytes <= MAX_WAL_BYTES) worker.postMessage({ checkpoint: true });
    else if (walBytes > 0 && idle()) {
      db.query("PRAGMA wal_checkpoint(PASSIVE)").get();
      state.completed++;
    }
  }, CHECKPOINT_INTERVAL_MS);
  timer.unref?.();
  return {
    get completed() {
      return state.completed;
    },
    get inWorker() {
      return worker !== null;
    },
    stop() {
      clearInterval(timer);
      worker?.postMessage({ close: true });
      worker?.terminate();
      worker = null;
    },
  };
}
