/**
 * SQLite files for every role that keeps state on disk (the scheduler's
 * object runtime, the agent's local store): how a file is opened, its
 * pragmas, and the schema-version check.
 *
 * Lower layer: imports nothing of ours. WAL with synchronous=NORMAL is
 * durable across a process crash; the last commits can be lost on power
 * loss (docs/architecture.md, "Storage"). Database files are private:
 * mode 0600 (SQLite gives its -wal and -shm files the database's mode) in a
 * directory of mode 0700.
 * Must never: open a file another way than the one here, or leave a
 * database readable by other users.
 */
import { Database } from "bun:sqlite";
import { chmodSync, closeSync, mkdirSync, openSync, statSync } from "node:fs";
import { dirname } from "node:path";

/** Mode of every database file (and of its -wal and -shm files). */
export const DB_FILE_MODE = 0o600;
/** Mode of a directory that holds database files. */
export const DB_DIR_MODE = 0o700;

/** Sets `path` to `mode` when its permission bits differ (a missing path is skipped). */
function ensureMode(path: string, mode: number): void {
  let current: number;
  try {
    current = statSync(path).mode & 0o777;
  } catch {
    return;
  }
  if (current !== mode) chmodSync(path, mode);
}

/**
 * Refuses a database written by a build with another schema version, with a
 * clear message, instead of failing later on a missing column. There are no
 * migrations yet: the fix is a fresh data directory.
 */
export function checkSchemaVersion(sql: Database, file: string, expected: number): void {
  const found = sql.query<{ user_version: number }, []>("PRAGMA user_version").get()?.user_version ?? 0;
  if (found !== 0 && found !== expected) {
    sql.close();
    throw new Error(
      `${file} has schema version ${found} but this build expects ${expected}; this release has no migrations: move the data directory aside and start fresh`,
    );
  }
}

/**
 * Opens a SQLite file in WAL mode with synchronous=NORMAL (durable across
 * process crashes; see the module header). Creates its directory (0700) and
 * the file (0600) as needed, and tightens an existing file, its -wal and
 * -shm, and its directory to those modes.
 */
export function openDb(file: string): Database {
  const dir = dirname(file);
  mkdirSync(dir, { recursive: true, mode: DB_DIR_MODE });
  ensureMode(dir, DB_DIR_MODE);
  // Created (or tightened) before SQLite opens it, so no moment exists where another user could open it.
  closeSync(openSync(file, "a", DB_FILE_MODE));
  for (const f of [file, `${file}-wal`, `${file}-shm`]) ensureMode(f, DB_FILE_MODE);
  const db = new Database(file, { create: true, strict: true });
  // synchronous is set before the switch to WAL so that switch does not wait for fsync (a new object's file has nothing to lose yet).
  db.exec(
    "PRAGMA synchronous = NORMAL; PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON;",
  );
  return db;
}
