/**
 * Applies schema migrations to an object store, on both hosts (the embedded
 * file once at start; each workerd object's database when it first wakes):
 * every migration not yet recorded in `_migrations`, in order, each in its
 * own transaction. A database that records a migration this build does not
 * know was written by a newer build: refused with a clear error, never
 * modified.
 * Must never: skip, reorder or re-run a recorded migration.
 */
import type { ObjectStorage } from "./api.ts";

/** A migration: a tag and its SQL statements separated by drizzle-kit's `--> statement-breakpoint`. */
export interface MigrationText {
  tag: string;
  sql: string;
}

/** Thrown when the database was migrated by another build than this one. */
export class MigrationMismatch extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MigrationMismatch";
  }
}

/**
 * Brings `storage` up to `migrations`. Returns how many were applied.
 * Throws MigrationMismatch when the recorded history is not a prefix of
 * `migrations` (`where` names the database in the message).
 */
export function migrate(storage: ObjectStorage, migrations: readonly MigrationText[], where: string): number {
  const sql = storage.sql;
  sql.exec(
    "CREATE TABLE IF NOT EXISTS _migrations (idx INTEGER PRIMARY KEY, tag TEXT NOT NULL, applied_at_ms INTEGER NOT NULL)",
  );
  const done = sql.exec<{ idx: number; tag: string }>("SELECT idx, tag FROM _migrations ORDER BY idx").toArray();
  for (const d of done) {
    const known = migrations[d.idx];
    if (!known)
      throw new MigrationMismatch(
        `${where} was migrated by a newer build (migration ${d.idx} ${d.tag} is unknown to this one); run the newer build, or restore a backup`,
      );
    if (known.tag !== d.tag)
      throw new MigrationMismatch(`${where} records migration ${d.idx} as ${d.tag}, but this build's is ${known.tag}`);
  }
  let applied = 0;
  for (let i = done.length; i < migrations.length; i++) {
    const m = migrations[i]!;
    storage.transactionSync(() => {
      for (const stmt of m.sql.split("--> statement-breakpoint")) if (stmt.trim()) sql.exec(stmt);
      sql.exec("INSERT INTO _migrations (idx, tag, applied_at_ms) VALUES (?, ?, ?)", i, m.tag, Date.now());
    });
    applied++;
  }
  return applied;
}
