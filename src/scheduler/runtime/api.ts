/**
 * The object API every authority-object class is written against, whichever
 * host runs it: the embedded runtime of `bb scheduler serve`
 * (./embedded/) or workerd, the open-source Durable Objects runtime
 * (deploy/workerd/). docs/architecture.md, "The object runtime";
 * docs/adr/0120-object-runtime-storage.md.
 *
 * Owns the shapes only: the storage handle (Durable Objects' synchronous
 * `ctx.storage.sql` subset), the per-instance state an object receives
 * (`ObjectState`: name, storage, one alarm, a typed inbox, typed posts to
 * other objects), typed stubs (`Stub<T>`: every public method of the class,
 * called as an RPC that returns a promise), and the base class.
 * Semantics are Durable Objects' on both hosts: one instance per (class,
 * name) in memory; synchronous code runs without interleaving, but events
 * may interleave while an instance awaits a call to another object; writes
 * become durable before any output they caused leaves the process (the
 * output gate).
 * Must never: let an object reach another object except through a stub (a
 * synchronous call one way only) or a posted message (the other way), pass a
 * closure between objects, or hand an object an untyped service bag.
 */
import type { TSchema } from "@sinclair/typebox";

/** A value SQLite stores or returns. */
export type SqlValue = string | number | bigint | null | Uint8Array | ArrayBuffer;

/** Rows of one statement, as Durable Objects' `SqlStorageCursor` returns them (the subset drizzle and our code use). */
export interface SqlCursor<T = Record<string, SqlValue>> extends Iterable<T> {
  /** Every row as an object keyed by column name. */
  toArray(): T[];
  /** Exactly one row; throws if there is none or more than one. */
  one(): T;
  /** The next row (iterator protocol). */
  next(): IteratorResult<T>;
  /** The same rows as arrays of values, in column order. */
  raw(): Iterable<SqlValue[]> & { toArray(): SqlValue[][] };
  /** Column names of the result. */
  readonly columnNames: string[];
  /** Rows inserted, updated or deleted by the statement. */
  readonly rowsWritten: number;
}

/** Durable Objects' `ctx.storage.sql`: synchronous statements with positional `?` bindings. */
export interface SqlStorage {
  /** Runs one statement. Throws on an SQL error (constraint, syntax, I/O). */
  exec<T = Record<string, SqlValue>>(query: string, ...bindings: unknown[]): SqlCursor<T>;
}

/**
 * The storage handle drizzle's `durable-sqlite` driver needs: `sql` and
 * `transactionSync` (a function that runs atomically: all its writes or none).
 */
export interface ObjectStorage {
  readonly sql: SqlStorage;
  /** Runs `fn` atomically; a throw rolls back its writes and rethrows. */
  transactionSync<T>(fn: () => T): T;
}

/** One message as the receiving object reads it from its inbox. */
export interface InboxEntry<M> {
  /** Position in the inbox; acknowledge up to it with `ackInbox`. */
  seq: number;
  /** The sender's deduplication key: a second message with the same key is dropped. */
  messageId: string;
  /** The typed message (checked against the receiving class's schema when read). */
  message: M;
}

/** What an instance receives from its host (Durable Objects' `ctx`, plus the inbox and typed posts). */
export interface ObjectState<M> {
  /** The class name (stable: it keys stored rows). */
  readonly className: string;
  /** The instance name (for example an allocation ID or a host ID). */
  readonly name: string;
  /** Synchronous SQL; every table carries this instance's name in its `obj` column (one definition for both hosts). */
  readonly storage: ObjectStorage;
  /** Sets (or clears with null) this instance's one alarm, ms since the epoch. Part of the current transaction. */
  setAlarm(atMs: number | null): void;
  /** The armed alarm time, or null. */
  getAlarm(): number | null;
  /**
   * Appends `message` for the instance `name` of `to`'s class, in the current
   * transaction: it is delivered (at least once, deduplicated by
   * `messageId`) after the sender's writes are durable, and the receiver is
   * nudged (`onInbox`). The only way a call travels against the one-way rule.
   */
  post<T extends AnyAuthorityObject>(to: Namespace<T>, name: string, messageId: string, message: MessageOf<T>): void;
  /**
   * Like `post`, but a message still pending under the same `key` is
   * replaced by this one (for state that only matters in its latest
   * version: an index view, an advertisement).
   */
  postLatest<T extends AnyAuthorityObject>(to: Namespace<T>, name: string, key: string, message: MessageOf<T>): void;
  /** Up to `MAX_INBOX_BATCH` pending messages, oldest first. A message that fails its schema is set aside and reported, never returned. */
  readInbox(): InboxEntry<M>[];
  /** Acknowledges (deletes) inbox messages up to and including `seq`; call in the transaction that applied them. */
  ackInbox(seq: number): void;
  /** Deletes this instance's rows, alarm and inbox once the current call ends (retention). */
  deleteSelf(): void;
}

/**
 * Base class of every authority object. `E` is the typed environment (other
 * classes' namespaces, configuration, ports); `M` is the union of messages
 * this class receives (declared with a TypeBox schema in `messageSchema`).
 */
export abstract class AuthorityObject<E, M = never> {
  constructor(
    protected readonly state: ObjectState<M>,
    protected readonly env: E,
  ) {}
  /** Called when the alarm fires; the alarm is cleared if the handler does not set it again. */
  alarm(): Promise<void> | void {}
  /** Called after messages were appended to the inbox. */
  onInbox(): Promise<void> | void {}
  /** Called by the embedded host before it stops: end waits that would hold the stop (parked polls). */
  drain(): void {}
}

/** Any authority object. */
export type AnyAuthorityObject = AuthorityObject<any, any>;

/** The message union a class receives. */
export type MessageOf<T> = T extends AuthorityObject<any, infer M> ? M : never;

/** A constructor of an authority-object class with its stable name and message schema. */
export interface ObjectClass<T extends AnyAuthorityObject, E> {
  new (state: ObjectState<MessageOf<T>>, env: E): T;
  /** Stable class name: it keys stored rows and routes messages. */
  readonly className: string;
  /** TypeBox schema of `MessageOf<T>` (checked when a message is read), or null when the class receives none. */
  readonly messageSchema: TSchema | null;
  /** The class's own tables (each keyed by `obj`): what retention deletes with the instance. */
  readonly tables: readonly string[];
}

/** Base-class members that are not callable through a stub. */
type NotRpc = keyof AuthorityObject<unknown, unknown>;

/** Names of the public methods of `T` callable through a stub. */
export type RpcMethodNames<T> = {
  [K in keyof T]: K extends NotRpc ? never : T[K] extends (...args: never[]) => unknown ? K : never;
}[keyof T];

/** A typed stub: every public method of `T`, called as an RPC (a promise of the awaited result). A renamed method fails to compile. */
export type Stub<T> = {
  [K in RpcMethodNames<T>]: T[K] extends (...args: infer A) => infer R ? (...args: A) => Promise<Awaited<R>> : never;
};

/** The instances of one class: a stub per name (Durable Objects' namespace binding with `idFromName`). */
export interface Namespace<T extends AnyAuthorityObject> {
  /** The class name. */
  readonly className: string;
  /** The stub of the instance `name` (created on first use). */
  get(name: string): Stub<T>;
}
