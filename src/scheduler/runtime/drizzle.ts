/**
 * drizzle-orm over an object's storage, through drizzle's `durable-sqlite`
 * driver on both hosts (workerd's own `ctx.storage`, or the embedded
 * store's look-alike), and prepared statements built once per storage: on
 * the embedded host every instance of every class shares one storage, so
 * one set of prepared statements serves them all (each takes the instance
 * name as its `obj` placeholder).
 * Must never: build a statement on a hot path that could be prepared once.
 */
import { getTableColumns, sql, type Placeholder, type SQL } from "drizzle-orm";
import type { SQLiteTable } from "drizzle-orm/sqlite-core";
import { drizzle, type DrizzleSqliteDODatabase } from "drizzle-orm/durable-sqlite";
import type { ObjectStorage } from "./api.ts";

/** drizzle over one storage. */
export type ObjectDb = DrizzleSqliteDODatabase<Record<string, never>>;

const dbs = new WeakMap<object, ObjectDb>();
const built = new WeakMap<object, Map<unknown, unknown>>();

/** drizzle over `storage` (one per storage). */
export function dbFor(storage: ObjectStorage): ObjectDb {
  let db = dbs.get(storage);
  if (!db) {
    db = drizzle(storage as never) as unknown as ObjectDb;
    dbs.set(storage, db);
  }
  return db;
}

/** The result of `build(db)` for `storage`, built once per storage and builder. */
export function prepared<T>(storage: ObjectStorage, build: (db: ObjectDb) => T): T {
  let m = built.get(storage);
  if (!m) {
    m = new Map();
    built.set(storage, m);
  }
  let v = m.get(build) as T | undefined;
  if (v === undefined) {
    v = build(dbFor(storage));
    m.set(build, v);
  }
  return v;
}

/**
 * A named placeholder of a prepared statement typed as a value of `T`, for
 * the places drizzle's types take a value but not a bare placeholder (the
 * `set` of an update): `set({ n: param<number>("n") })`, then `.run({ n })`.
 */
export function param<T>(name: string): SQL<T> {
  return sql<T>`${sql.placeholder(name)}`;
}

/**
 * Named placeholders, each named as its field: `values({ obj,
 * ...placeholders("grantId", "hostId") })` inserts the `grantId` and
 * `hostId` parameters of `.run({ grantId, hostId })` into those columns.
 */
export function placeholders<K extends string>(...names: K[]): Record<K, Placeholder<K>> {
  const out = {} as Record<K, Placeholder<K>>;
  for (const n of names) out[n] = sql.placeholder(n);
  return out;
}

/**
 * The `set` of an upsert that takes each named column from the row that
 * conflicted: `onConflictDoUpdate({ target, set: fromExcluded(t, "state",
 * "viewJson") })` writes `state = excluded."state", view_json =
 * excluded."view_json"`. `keys` are the table's field names.
 */
export function fromExcluded<T extends SQLiteTable, K extends keyof T["_"]["columns"] & string>(
  table: T,
  ...keys: K[]
): Record<K, SQL> {
  const columns = getTableColumns(table) as Record<string, { name: string }>;
  const out = {} as Record<K, SQL>;
  for (const k of keys) out[k] = sql`excluded.${sql.identifier(columns[k]!.name)}`;
  return out;
}
