/**
 * The embedded runtime's storage: every object of every class in one SQLite
 * file, written through group commit behind an output gate
 * (docs/adr/0120-object-runtime-storage.md).
 *
 * Writes from any number of object calls accumulate in one open
 * transaction; it commits once per event-loop turn (`setImmediate`). A
 * caller that must not let an output leave before the writes it saw are
 * durable awaits `durable()` (the output gate). One file means one write-ahead
 * log: whatever a crash keeps is a prefix of the writes in program order, so
 * an intent written before a side effect is never missing when the effect
 * is there. `transactionSync` is a savepoint inside the open batch: its writes
 * are all kept or all rolled back.
 * Must never: commit in the middle of synchronous object code, release a
 * waiter of the output gate before its batch committed, or swallow a failed
 * commit (waiters get the error; the store reports itself unhealthy).
 */
import { Database, type Statement } from "bun:sqlite";
import { chmodSync, closeSync, existsSync, openSync } from "node:fs";
import type { SqlCursor, SqlStorage, SqlValue } from "../api.ts";
import { startCheckpointer, type Checkpointer } from "./checkpointer.ts";

/** Statements whose SQL starts like this only read. */
const READ_ONLY = /^\s*(select|with|pragma\s+\w+\s*$|explain)/i;
/** Writes with this clause answer rows (drizzle's `.returning()`, e.g. an insert that reports whether it wrote). */
const RETURNING = /(^|\s)returning\s/i;
/** Statements whose SQL starts like this change the schema (cached statements and their column names may be stale after one). */
const SCHEMA_CHANGE = /^\s*(create|alter|drop)\b/i;
/**
 * Most prepared statements kept (bun:sqlite's own `query` cache holds only
 * 20 SQL strings, fewer than the objects use, so it re-prepared on most
 * calls). Statements are few and fixed per build; the bound covers
 * column-set UPDATEs and DDL.
 */
export const MAX_CACHED_STATEMENTS = 512;

/** A prepared statement with what `exec` needs to know about it, computed once. */
interface Prepared {
  readonly stmt: Statement;
  readonly readOnly: boolean;
  /** A write with a RETURNING clause: its rows are read, and their count is the rows written. */
  readonly returning: boolean;
  readonly schemaChange: boolean;
  /** Column names of a read (empty for writes). */
  readonly columns: string[];
}

/** A cursor over rows already read (bun:sqlite returns them at once). */
class RowsCursor<T> implements SqlCursor<T> {
  private i = 0;
  constructor(
    readonly columnNames: string[],
    private readonly rows: SqlValue[][],
    readonly rowsWritten: number,
  ) {}
  private obj(r: SqlValue[]): T {
    const o: Record<string, SqlValue> = {};
    for (let c = 0; c < this.columnNames.length; c++) o[this.columnNames[c]!] = r[c]!;
    return o as T;
  }
  toArray(): T[] {
    const out = this.rows.slice(this.i).map((r) => this.obj(r));
    this.i = this.rows.length;
    return out;
  }
  one(): T {
    if (this.rows.length !== 1) throw new Error(`expected exactly one row, got ${this.rows.length}`);
    return this.obj(this.rows[0]!);
  }
  next(): IteratorResult<T> {
    if (this.i >= this.rows.length) return { done: true, value: undefined };
    return { done: false, value: this.obj(this.rows[this.i++]!) };
  }
  raw(): Iterable<SqlValue[]> & { toArray(): SqlValue[][] } {
    const rest = this.rows.slice(this.i);
    this.i = this.rows.length;
    return { toArray: () => rest, [Symbol.iterator]: () => rest[Symbol.iterator]() };
  }
  [Symbol.iterator](): Iterator<T> {
    return { next: () => this.next() };
  }
}

const NO_ROWS: SqlValue[][] = [];

/** Thrown to waiters of the output gate when the runtime was abandoned (simulated crash) before their batch committed. */
export class BatchAbandoned extends Error {
  constructor() {
    super("the batch was abandoned before it committed");
    this.name = "BatchAbandoned";
  }
}

/** See the module header. */
export class SqlStore {
  readonly db: Database;
  /** Durable Objects' `ctx.storage.sql`, over the shared file. */
  readonly sql: SqlStorage;
  private open = false;
  private dirty = false;
  private depth = 0;
  private waiters: { resolve: () => void; reject: (e: unknown) => void }[] = [];
  private afterCommit: (() => void)[] = [];
  /** Undo actions for in-memory state changed inside each open savepoint (innermost last). */
  private undo: (() => void)[][] = [];
  /** Writes held in memory until the batch commits; run just before COMMIT (./pendingInbox.ts). */
  private beforeCommit: (() => void) | null = null;
  private readonly cache = new Map<string, Prepared>();
  private closed = false;
  private checkpointer: Checkpointer | null = null;
  /** Savepoints rolled back so far: a cache of a write made before may no longer hold. */
  rollbacks = 0;
  /** Commits so far (for benchmarks and tests). */
  commits = 0;
  /** SQL statements run so far, transaction control included (for benchmarks). */
  statements = 0;
  /** The last failed commit, until a later commit succeeds. */
  failure: Error | null = null;

  /**
   * Opens (creating it 0600 if needed) the store file. `onCommitFailure` is
   * told when a batch could not commit (its writes are gone; in-memory
   * copies of them must be dropped).
   */
  constructor(
    readonly file: string,
    private readonly onCommitFailure: (e: Error) => void = () => undefined,
  ) {
    // 0600 before SQLite opens it: its -wal and -shm files take the database file's mode.
    if (file !== ":memory:") {
      if (!existsSync(file)) closeSync(openSync(file, "a", 0o600));
      for (const f of [file, `${file}-wal`, `${file}-shm`]) if (existsSync(f)) chmodSync(f, 0o600);
    }
    this.db = new Database(file, { create: true, strict: true });
    this.db.exec(
      "PRAGMA synchronous = NORMAL; PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON;",
    );
    const store = this;
    this.sql = { exec: (q, ...b) => store.exec(q, b) };
  }

  /** The prepared statement of `query` (prepared once; the oldest is finalized past MAX_CACHED_STATEMENTS). */
  private statement(query: string): Prepared {
    const found = this.cache.get(query);
    if (found) return found;
    if (this.cache.size >= MAX_CACHED_STATEMENTS) {
      const [oldest, p] = this.cache.entries().next().value!;
      this.cache.delete(oldest);
      p.stmt.finalize();
    }
    const stmt = this.db.prepare(query);
    const readOnly = READ_ONLY.test(query);
    const returning = !readOnly && RETURNING.test(query);
    const p: Prepared = {
      stmt,
      readOnly,
      returning,
      schemaChange: SCHEMA_CHANGE.test(query),
      columns: readOnly || returning ? stmt.columnNames : [],
    };
    this.cache.set(query, p);
    return p;
  }

  /** Finalizes every cached statement (after a schema change). */
  private forgetStatements(): void {
    for (const p of this.cache.values()) p.stmt.finalize();
    this.cache.clear();
  }

  private exec<T>(query: string, bindings: unknown[]): SqlCursor<T> {
    this.statements++;
    const p = this.statement(query);
    const args = bindings as never[];
    if (p.readOnly) return new RowsCursor<T>(p.columns, p.stmt.values(...args) as SqlValue[][], 0);
    this.begin();
    if (p.returning) {
      const rows = p.stmt.values(...args) as SqlValue[][];
      if (rows.length > 0) this.dirty = true;
      return new RowsCursor<T>(p.columns, rows, rows.length);
    }
    const r = p.stmt.run(...args);
    if (r.changes > 0) this.dirty = true;
    if (p.schemaChange) this.forgetStatements();
    return new RowsCursor<T>([], NO_ROWS, r.changes);
  }

  /** A cached statement for transaction control (parsed once, not on every savepoint). */
  private control(sql: string): void {
    this.statements++;
    this.statement(sql).stmt.run();
  }

  /** Opens the batch if none is open and schedules its commit for the end of this event-loop turn. */
  private begin(): void {
    if (this.open) return;
    if (this.closed) throw new Error("the object store is closed");
    this.control("BEGIN");
    this.open = true;
    setImmediate(() => this.commit());
  }

  /** Runs `fn` atomically inside the open batch (a savepoint). `fn` must be synchronous. */
  transactionSync<T>(fn: () => T): T {
    this.begin();
    const name = `sp${++this.depth}`;
    this.control(`SAVEPOINT ${name}`);
    this.undo.push([]);
    try {
      const r = fn();
      if (r && typeof (r as { then?: unknown }).then === "function")
        throw new Error("transactionSync needs a synchronous function");
      this.control(`RELEASE ${name}`);
      // Kept: an enclosing savepoint that rolls back must still undo these.
      const done = this.undo.pop()!;
      const outer = this.undo[this.undo.length - 1];
      if (outer) for (const u of done) outer.push(u);
      return r;
    } catch (e) {
      this.control(`ROLLBACK TO ${name}`);
      this.control(`RELEASE ${name}`);
      this.rollbacks++;
      const undone = this.undo.pop()!;
      for (let i = undone.length - 1; i >= 0; i--) undone[i]!();
      throw e;
    } finally {
      this.depth--;
    }
  }

  /**
   * Registers how to undo an in-memory change made now: it runs if the
   * innermost open savepoint rolls back (nothing to register outside one:
   * the batch as a whole either commits or fails, and a failure is handled
   * by its owner).
   */
  onRollback(fn: () => void): void {
    this.undo[this.undo.length - 1]?.push(fn);
  }

  /** Sets the writes to run just before each COMMIT (inside the batch; a throw fails the commit). */
  setBeforeCommit(fn: () => void): void {
    this.beforeCommit = fn;
  }

  /** Marks the open batch as holding writes (for writes made outside `exec`, such as DDL). */
  markDirty(): void {
    this.begin();
    this.dirty = true;
  }

  /** Runs `fn` after the open batch commits (at once if no batch is open). Dropped if the batch fails. */
  onCommitted(fn: () => void): void {
    if (!this.open) fn();
    else this.afterCommit.push(fn);
  }

  /** True while writes wait for the next commit. */
  get pending(): boolean {
    return this.open && this.dirty;
  }

  /**
   * The output gate: resolves once every write made so far is durable (at
   * once when none waits). Rejects with the commit's error if it failed.
   */
  durable(): Promise<void> {
    if (!this.open || !this.dirty) return Promise.resolve();
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /** Commits the open batch now (group commit calls this once per event-loop turn). */
  commit(): void {
    if (!this.open || this.depth > 0) return;
    let heldFailure: { error: unknown } | null = null;
    try {
      this.beforeCommit?.();
    } catch (e) {
      heldFailure = { error: e };
    }
    const waiters = this.waiters;
    const after = this.afterCommit;
    this.waiters = [];
    this.afterCommit = [];
    this.open = false;
    const wrote = this.dirty;
    this.dirty = false;
    try {
      if (heldFailure) throw heldFailure.error;
      this.control("COMMIT");
      if (wrote) this.commits++;
      this.failure = null;
    } catch (e) {
      try {
        this.db.exec("ROLLBACK");
      } catch {
        /* the failed COMMIT may already have rolled back */
      }
      const err = e instanceof Error ? e : new Error(String(e));
      this.failure = err;
      for (const w of waiters) w.reject(err);
      this.onCommitFailure(err);
      return;
    }
    for (const w of waiters) w.resolve();
    for (const f of after) f();
  }

  /** Rolls the open batch back and rejects its waiters (a simulated crash loses unflushed writes, as a real one would). */
  abandon(): void {
    const waiters = this.waiters;
    this.waiters = [];
    this.afterCommit = [];
    if (this.open) {
      try {
        this.db.exec("ROLLBACK");
      } catch {
        /* nothing to roll back */
      }
    }
    this.open = false;
    this.dirty = false;
    for (const w of waiters) w.reject(new BatchAbandoned());
  }

  /** Moves WAL checkpoints (and their fsync) off this thread (./checkpointer.ts). */
  checkpointInBackground(): Checkpointer {
    this.checkpointer ??= startCheckpointer(this.file, this.db, () => !this.open);
    return this.checkpointer;
  }

  /** Commits what is open and closes the file. */
  close(): void {
    this.checkpointer?.stop();
    this.commit();
    this.closed = true;
    this.forgetStatements();
    this.db.close();
  }

  /** Abandons the open batch and closes the file without committing (simulated crash). */
  closeAbandoned(): void {
    this.checkpointer?.stop();
    this.abandon();
    this.closed = true;
    this.forgetStatements();
    this.db.close();
  }
}
