/**
 * The authority-object runtime: hosts named object instances the way a
 * Durable Object platform does (docs/architecture.md, "The object
 * runtime"; docs/adr/0002-object-runtime.md).
 *
 * Owns: one SQLite database per (class, name) under the data directory, a
 * serial mailbox per instance, one alarm per instance (persisted in a
 * registry so a restart re-arms every alarm without opening every database),
 * and a transactional outbox that turns `post()` into an append to the
 * target's inbox plus a nudge (never awaited inside the caller's turn).
 * Must never: let two turns of one instance interleave, or let an object
 * wait on an object that may wait on it.
 */
import { Database } from "bun:sqlite";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { drizzle, type BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import { createHash } from "node:crypto";
import type { Clock, Randomness } from "./ports.ts";
import { BeachballError } from "../../protocol/errors.ts";
import { checkSchemaVersion, openDb } from "../../storage/sqlite.ts";

/** Maximum open object instances kept in memory; idle ones beyond it are closed. */
export const MAX_OPEN_OBJECTS = 2048;
/** Message IDs each object remembers for deduplication. */
export const MAX_SEEN_MESSAGES = 10_000;
/** Maximum inbox messages delivered to one object per turn. */
export const MAX_INBOX_BATCH = 256;
/** How long a fired alarm stays armed in the registry as a retry, in case the process dies mid-turn, ms. */
export const ALARM_RETRY_MS = 5_000;
/** Alarm polling period in ms: the latest an alarm can fire after its due time. */
export const ALARM_TICK_MS = 100;

/** A message appended to an object's inbox. */
export interface InboxMessage {
  /** Deduplication key: a second post with the same ID is ignored. */
  messageId: string;
  /** Message kind, chosen by the receiving class. */
  kind: string;
  /** JSON-serialisable body. Never a secret. */
  body: unknown;
}

/** What an object receives from its host. */
export interface ObjectContext {
  /** The class name of this instance. */
  readonly className: string;
  /** The instance name. */
  readonly name: string;
  /** Raw bun:sqlite handle for schema creation and transactions. */
  readonly sql: Database;
  /** drizzle-orm over `sql`. */
  readonly db: BunSQLiteDatabase;
  readonly clock: Clock;
  readonly random: Randomness;
  /** In-memory services the deployment wires in (signals, delivery hub, config). Never persisted. */
  readonly services: unknown;
  /** Sets (or clears with null) this object's single alarm, in ms since the epoch. */
  setAlarm(atMs: number | null): void;
  /** The currently armed alarm time, or null. */
  getAlarm(): number | null;
  /**
   * Appends a message to this object's outbox. Call inside the same
   * transaction as the state change it announces; the runtime moves it into
   * the target's inbox after the turn and nudges the target.
   */
  post(className: string, name: string, message: InboxMessage): void;
  /** Reads up to MAX_INBOX_BATCH pending inbox messages (oldest first). */
  readInbox(): (InboxMessage & { seq: number })[];
  /** Deletes inbox messages up to and including `seq` (call in the applying transaction). */
  ackInbox(seq: number): void;
  /**
   * Deletes this object once the current turn ends: its database files and
   * registry row go, and later turns see a fresh, empty instance.
   * Used by retention (spec "Observability and retention").
   */
  deleteSelf(): void;
  /** Calls another object (one way only: see the module header). */
  call<T extends AuthorityObject, R>(cls: ObjectClass<T>, name: string, fn: (o: T) => R | Promise<R>): Promise<R>;
}

/** Base class of every authority object. */
export abstract class AuthorityObject {
  constructor(protected readonly ctx: ObjectContext) {}
  /** Called when the alarm fires. The alarm is cleared before the call. */
  alarm(): Promise<void> | void {}
  /** Called after messages were appended to the inbox. */
  onInbox(): Promise<void> | void {}
}

/** Thrown by a call after the fault hook crashed the runtime (simulation only). */
export class SimulatedCrash extends Error {
  constructor() {
    super("simulated scheduler crash");
    this.name = "SimulatedCrash";
  }
}

/** Runtime options. */
export interface RuntimeOptions {
  /**
   * Simulation hook consulted before each object-to-object call (after the
   * caller's intent is persisted, before the side effect). Returning true
   * crashes the runtime: that call and every later one throw SimulatedCrash.
   */
  faultHook?: (fromClass: string, toClass: string) => boolean;
}

/** A constructor of an authority object class with its stable class name. */
export interface ObjectClass<T extends AuthorityObject> {
  new (ctx: ObjectContext): T;
  /** Stable class name used in paths and the registry. */
  readonly className: string;
  /** Version of the class's schema (default 1); bump it when the tables change. */
  readonly schemaVersion?: number;
}

interface Instance {
  obj: AuthorityObject;
  sql: Database;
  file: string;
  deleted: boolean;
  deleteRequested: boolean;
  tail: Promise<unknown>;
  busy: number;
  lastUsed: number;
}

const RUNTIME_SCHEMA = `
CREATE TABLE IF NOT EXISTS _inbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS _outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, target_class TEXT NOT NULL, target_name TEXT NOT NULL, message_id TEXT NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS _alarm (id INTEGER PRIMARY KEY CHECK (id = 1), at_ms INTEGER);
CREATE TABLE IF NOT EXISTS _inbox_seen (message_id TEXT PRIMARY KEY);
`;

/**
 * Hosts authority objects for one data directory. Create one per process;
 * call `start()` to re-arm persisted alarms and drain outboxes, `close()` to stop.
 */
export class ObjectRuntime {
  private readonly instances = new Map<string, Instance>();
  private readonly classes = new Map<string, ObjectClass<AuthorityObject>>();
  private readonly registry: Database;
  private timer: ReturnType<typeof setInterval> | undefined;
  private closed = false;
  private crashed = false;
  private readonly background = new Set<Promise<unknown>>();

  constructor(
    private readonly dataDir: string,
    readonly clock: Clock,
    readonly random: Randomness,
    classes: ObjectClass<AuthorityObject>[],
    private readonly services: unknown = {},
    private readonly options: RuntimeOptions = {},
  ) {
    mkdirSync(join(dataDir, "objects"), { recursive: true, mode: 0o700 });
    for (const c of classes) this.classes.set(c.className, c);
    this.registry = openDb(join(dataDir, "registry.db"));
    this.registry.exec(
      "CREATE TABLE IF NOT EXISTS objects (class TEXT NOT NULL, name TEXT NOT NULL, alarm_at INTEGER, outbox INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (class, name))",
    );
  }

  /** Starts the alarm ticker and drains outboxes left by a previous process. */
  start(): void {
    const pending = this.registry.query<{ class: string; name: string }, []>("SELECT class, name FROM objects WHERE outbox = 1").all();
    for (const p of pending) this.spawn(this.withInstance(p.class, p.name, () => undefined));
    this.timer = setInterval(() => this.tick(), ALARM_TICK_MS);
  }

  /** Drains outboxes left by a previous process without starting the ticker (simulation drives `tick()` itself). */
  recover(): void {
    const pending = this.registry.query<{ class: string; name: string }, []>("SELECT class, name FROM objects WHERE outbox = 1").all();
    for (const p of pending) this.spawn(this.withInstance(p.class, p.name, () => undefined));
  }

  /** True after the fault hook crashed this runtime. */
  get isCrashed(): boolean {
    return this.crashed;
  }

  /** Abandons a crashed runtime: lets in-flight turns fail, then closes every database without running more work. */
  async abandon(): Promise<void> {
    this.crashed = true;
    await this.close();
  }

  /** Runs `fn` on the named instance inside its mailbox (one turn at a time). */
  call<T extends AuthorityObject, R>(cls: ObjectClass<T>, name: string, fn: (o: T) => R | Promise<R>): Promise<R> {
    return this.withInstance(cls.className, name, (o) => fn(o as T));
  }

  /** True if the named instance was ever created (a registry lookup; opens nothing). */
  exists(className: string, name: string): boolean {
    return !!this.registry.query("SELECT 1 FROM objects WHERE class = ? AND name = ?").get(className, name);
  }

  /** Names of registered objects of a class (registry scan; for tools and tests). */
  listNames(className: string): string[] {
    return this.registry.query<{ name: string }, [string]>("SELECT name FROM objects WHERE class = ?").all(className).map((r) => r.name);
  }

  /** Waits for background work (outbox drains, nudges) to settle. For tests and shutdown. */
  async idle(): Promise<void> {
    while (this.background.size > 0) await Promise.allSettled([...this.background]);
  }

  /** Stops alarms, waits for in-flight turns, and closes every database. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    await this.idle();
    for (const inst of this.instances.values()) await inst.tail.catch(() => undefined);
    for (const inst of this.instances.values()) inst.sql.close();
    this.instances.clear();
    this.registry.close();
  }

  private spawn(p: Promise<unknown>): void {
    const q = p.catch((e) => this.crashed || this.closed || console.error("beachball: background object work failed:", e)).finally(() => this.background.delete(q));
    this.background.add(q);
  }

  private withInstance<R>(className: string, name: string, fn: (o: AuthorityObject) => R | Promise<R>): Promise<R> {
    if (this.crashed) return Promise.reject(new SimulatedCrash());
    if (this.closed) return Promise.reject(new BeachballError("SHUTTING_DOWN", "the scheduler is shutting down", { retryAfterSeconds: 1 }));
    let inst: Instance;
    try {
      inst = this.open(className, name);
    } catch (e) {
      return Promise.reject(e);
    }
    inst.busy++;
    const run = inst.tail.then(async () => {
      if (inst.deleted) return this.withInstance(className, name, fn);
      inst.lastUsed = this.clock.now();
      try {
        return await fn(inst.obj);
      } finally {
        this.drainOutbox(className, name, inst.sql);
        if (inst.deleteRequested) this.destroy(className, name, inst);
      }
    });
    inst.tail = run.catch(() => undefined).finally(() => {
      inst.busy--;
    });
    return run;
  }

  private destroy(className: string, name: string, inst: Instance): void {
    inst.deleted = true;
    inst.sql.close();
    for (const suffix of ["", "-wal", "-shm"]) rmSync(inst.file + suffix, { force: true });
    this.registry.query("DELETE FROM objects WHERE class = ? AND name = ?").run(className, name);
    this.instances.delete(`${className}\u0000${name}`);
  }

  private open(className: string, name: string): Instance {
    const key = `${className}\u0000${name}`;
    const found = this.instances.get(key);
    if (found) return found;
    const cls = this.classes.get(className);
    if (!cls) throw new Error(`unknown object class ${className}`);
    this.evictIdle();
    const dir = join(this.dataDir, "objects", className);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const file = join(dir, `${createHash("sha256").update(name).digest("hex").slice(0, 40)}.db`);
    const sql = openDb(file);
    checkSchemaVersion(sql, file, cls.schemaVersion ?? 1);
    sql.exec(RUNTIME_SCHEMA);
    this.registry.query("INSERT OR IGNORE INTO objects (class, name) VALUES (?, ?)").run(className, name);
    const holder: { inst?: Instance } = {};
    const ctx = this.makeContext(className, name, sql, () => {
      if (holder.inst) holder.inst.deleteRequested = true;
    });
    const inst: Instance = { obj: new cls(ctx), sql, file, deleted: false, deleteRequested: false, tail: Promise.resolve(), busy: 0, lastUsed: this.clock.now() };
    sql.exec(`PRAGMA user_version = ${cls.schemaVersion ?? 1}`);
    holder.inst = inst;
    this.instances.set(key, inst);
    return inst;
  }

  private evictIdle(): void {
    if (this.instances.size < MAX_OPEN_OBJECTS) return;
    const idle = [...this.instances.entries()].filter(([, i]) => i.busy === 0).sort((a, b) => a[1].lastUsed - b[1].lastUsed);
    for (const [key, inst] of idle.slice(0, Math.ceil(MAX_OPEN_OBJECTS / 8))) {
      inst.sql.close();
      this.instances.delete(key);
    }
  }

  private makeContext(className: string, name: string, sql: Database, deleteSelf: () => void): ObjectContext {
    const rt = this;
    return {
      className,
      name,
      sql,
      db: drizzle({ client: sql }),
      clock: this.clock,
      random: this.random,
      services: this.services,
      setAlarm(atMs) {
        sql.query("INSERT INTO _alarm (id, at_ms) VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET at_ms = excluded.at_ms").run(atMs);
        rt.registry.query("UPDATE objects SET alarm_at = ? WHERE class = ? AND name = ?").run(atMs, className, name);
      },
      getAlarm() {
        return sql.query<{ at_ms: number | null }, []>("SELECT at_ms FROM _alarm WHERE id = 1").get()?.at_ms ?? null;
      },
      post(targetClass, targetName, m) {
        sql
          .query("INSERT INTO _outbox (target_class, target_name, message_id, kind, body) VALUES (?, ?, ?, ?, ?)")
          .run(targetClass, targetName, m.messageId, m.kind, JSON.stringify(m.body));
        rt.registry.query("UPDATE objects SET outbox = 1 WHERE class = ? AND name = ?").run(className, name);
      },
      readInbox() {
        return sql
          .query<{ seq: number; message_id: string; kind: string; body: string }, [number]>(
            "SELECT seq, message_id, kind, body FROM _inbox ORDER BY seq LIMIT ?",
          )
          .all(MAX_INBOX_BATCH)
          .map((r) => ({ seq: r.seq, messageId: r.message_id, kind: r.kind, body: JSON.parse(r.body) as unknown }));
      },
      ackInbox(seq) {
        sql.query("DELETE FROM _inbox WHERE seq <= ?").run(seq);
      },
      deleteSelf,
      call: (cls, n, fn) => {
        if (rt.crashed || rt.options.faultHook?.(className, cls.className)) {
          rt.crashed = true;
          return Promise.reject(new SimulatedCrash());
        }
        return rt.call(cls, n, fn);
      },
    };
  }

  /** Moves outbox rows into their targets' inboxes (deduplicated) and nudges each target. */
  private drainOutbox(className: string, name: string, sql: Database): void {
    const rows = sql
      .query<{ seq: number; target_class: string; target_name: string; message_id: string; kind: string; body: string }, []>(
        "SELECT * FROM _outbox ORDER BY seq",
      )
      .all();
    if (rows.length === 0) return;
    const targets = new Map<string, [string, string]>();
    for (const r of rows) {
      if (!this.classes.has(r.target_class)) {
        sql.query("DELETE FROM _outbox WHERE seq = ?").run(r.seq);
        continue;
      }
      const target = this.open(r.target_class, r.target_name);
      // Deduplicated by message ID even after the first copy was applied (the last MAX_SEEN_MESSAGES IDs are remembered).
      target.sql.transaction(() => {
        if (target.sql.query("INSERT OR IGNORE INTO _inbox_seen (message_id) VALUES (?)").run(r.message_id).changes === 0) return;
        target.sql.query("INSERT OR IGNORE INTO _inbox (message_id, kind, body) VALUES (?, ?, ?)").run(r.message_id, r.kind, r.body);
        target.sql.query("DELETE FROM _inbox_seen WHERE rowid <= (SELECT MAX(rowid) FROM _inbox_seen) - ?").run(MAX_SEEN_MESSAGES);
      })();
      sql.query("DELETE FROM _outbox WHERE seq = ?").run(r.seq);
      targets.set(`${r.target_class}\u0000${r.target_name}`, [r.target_class, r.target_name]);
    }
    this.registry.query("UPDATE objects SET outbox = 0 WHERE class = ? AND name = ?").run(className, name);
    for (const [tc, tn] of targets.values()) this.spawn(this.withInstance(tc, tn, (o) => o.onInbox()));
  }

  /** Fires every alarm that is due now (the ticker calls this; a simulation calls it directly). */
  tick(): void {
    if (this.closed) return;
    const now = this.clock.now();
    const due = this.registry
      .query<{ class: string; name: string; alarm_at: number }, [number]>(
        "SELECT class, name, alarm_at FROM objects WHERE alarm_at IS NOT NULL AND alarm_at <= ? ORDER BY alarm_at, class, name LIMIT 256",
      )
      .all(now);
    for (const d of due) {
      // Not cleared but pushed back: if this process dies before the turn, the alarm fires again after a restart.
      this.registry.query("UPDATE objects SET alarm_at = ? WHERE class = ? AND name = ? AND alarm_at = ?").run(now + ALARM_RETRY_MS, d.class, d.name, d.alarm_at);
      this.spawn(
        this.withInstance(d.class, d.name, (o) => {
          const ctx = (o as unknown as { ctx: ObjectContext }).ctx;
          const at = ctx.getAlarm();
          if (at === null || at > this.clock.now()) return ctx.setAlarm(at);
          // The object's own alarm row stays until alarm() returns, so a crash inside it leaves the retry armed.
          return Promise.resolve(o.alarm()).then(() => {
            if (ctx.getAlarm() === at) ctx.setAlarm(null);
          });
        }),
      );
    }
  }
}
