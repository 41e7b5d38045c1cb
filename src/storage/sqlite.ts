/**
 * SQLite files for every role that keeps state on disk (the scheduler's
 * object runtime, the agent's local store): how a file is opened, its
 * pragmas, and how a role's own file is migrated in place.
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

/** One migration: drizzle-kit's tag and its SQL (statements split by `--> statement-breakpoint`). */
export interface Migration {
  tag: string;
  sql: string;
}

/**
 * Brings a role's own database file up to `migrations` in place: its
 * `PRAGMA user_version` counts the migrations applied; each one not yet
 * applied runs in order, in its own transaction together with the new
 * count. Returns how many were applied. A file whose count is above
 * `migrations.length` was written by a newer build: it is closed and
 * refused with a clear error naming `file`, never modified.
 */
export function migrateDb(sql: Database, file: string, migrations: readonly Migration[]): number {
  const found = sql.query<{ user_version: number }, []>("PRAGMA user_version").get()?.user_version ?? 0;
  if (found > migrations.length) {
    sql.close();
    throw new Error(
      `${file} has schema version ${found} but this build knows only ${migrations.length} migrations; it was written by a newer build: run that build, or restore a backup`,
    );
  }
  for (let i = found; i < migrations.length; i++)
    sql.transaction(() => {
      for (const stmt of migrations[i]!.sql.split("--> statement-breakpoint")) if (stmt.trim()) sql.exec(stmt);
      sql.exec(`PRAGMA user_version = ${i + 1}`);
    })();
  return migrations.length - found;
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
