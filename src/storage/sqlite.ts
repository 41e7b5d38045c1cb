/**
 * SQLite files for every role that keeps state on disk (the scheduler's
 * object runtime, the agent's local store): how a file is opened, its
 * pragmas, and the schema-version check.
 *
 * Lower layer: imports nothing of ours. WAL with synchronous=NORMAL is
 * durable across a process crash; the last commits can be lost on power
 * loss (docs/architecture.md, "Storage").
 * Must never: open a file another way than the one here.
 */
import { Database } from "bun:sqlite";

/**
 * Refuses a database written by a build with another schema version, with a
 * clear message, instead of failing later on a missing column. There are no
 * migrations yet: the fix is a fresh data directory.
 */
export function checkSchemaVersion(sql: Database, file: string, expected: number): void {
  const found = sql.query<{ user_version: number }, []>("PRAGMA user_version").get()?.user_version ?? 0;
  if (found !== 0 && found !== expected) {
    sql.close();
    throw new Error(`${file} has schema version ${found} but this build expects ${expected}; this release has no migrations: move the data directory aside and start fresh`);
  }
}

/** Opens a SQLite file in WAL mode with synchronous=NORMAL (durable across process crashes; see the module header). */
export function openDb(file: string): Database {
  const db = new Database(file, { create: true, strict: true });
  // synchronous is set before the switch to WAL so that switch does not wait for fsync (a new object's file has nothing to lose yet).
  db.exec("PRAGMA synchronous = NORMAL; PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON;");
  return db;
}
