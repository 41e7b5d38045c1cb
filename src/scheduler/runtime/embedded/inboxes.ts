/**
 * The embedded runtime's inboxes (docs/adr/0120-object-runtime-storage.md,
 * decision 4): rows in `_inbox` appended in the sender's transaction, plus
 * the latest-only messages of the open batch held in memory
 * (./pendingInbox.ts), and which instances may have stored messages, so a
 * read of an empty inbox costs no statement.
 * Must never: hand a receiver a stored message after a held one that was
 * sent later, forget that an instance has stored messages (a savepoint that
 * rolls back restores what it changed; a failed commit re-reads the table),
 * or hand out a message that fails the receiver's schema.
 */
import type { TSchema } from "@sinclair/typebox";
import type { InboxEntry } from "../api.ts";
import { checkerOf, firstError } from "../check.ts";
import { ackInbox, insertInbox, MAX_INBOX_BATCH, MAX_MESSAGE_BYTES, readInbox } from "../stateRows.ts";
import { HELD_SEQ_BASE, PendingInbox } from "./pendingInbox.ts";
import type { SqlStore } from "./sqlStore.ts";

/** One instance's view of its inbox: read pending messages, acknowledge them. */
export interface InboxReader<M> {
  read(): InboxEntry<M>[];
  ack(seq: number): void;
}

/** See the module header. Keys are the runtime's instance keys (`key(cls, obj)`). */
export class Inboxes {
  /** Instances that may have rows in `_inbox`, with the version of the latest append. */
  private readonly versions = new Map<string, number>();
  private seq = 0;
  private readonly held: PendingInbox;

  constructor(
    private readonly store: SqlStore,
    private readonly key: (cls: string, obj: string) => string,
  ) {
    this.held = new PendingInbox(store);
  }

  /** Appends a message for (cls, obj) now; false if one with the same ID is still pending. Held messages for it are written first (order). */
  post(cls: string, obj: string, messageId: string, body: string): boolean {
    this.flushFor(this.key(cls, obj));
    const inserted = insertInbox(this.store.sql, cls, obj, messageId, body);
    if (inserted) this.stored(this.key(cls, obj));
    return inserted;
  }

  /** Holds a latest-only message for (cls, obj) until the batch commits. Throws if the body is over MAX_MESSAGE_BYTES. */
  postLatest(cls: string, obj: string, messageKey: string, body: string): void {
    if (body.length > MAX_MESSAGE_BYTES)
      throw new Error(`message ${messageKey} for ${cls} ${obj} is ${body.length} bytes (limit ${MAX_MESSAGE_BYTES})`);
    this.held.upsert(this.key(cls, obj), cls, obj, messageKey, body);
  }

  /** The inbox of (cls, obj) as its instance reads it: stored messages first, then held ones, checked against `schema`. */
  reader<M>(cls: string, obj: string, schema: TSchema | null): InboxReader<M> {
    const k = this.key(cls, obj);
    const sql = this.store.sql;
    const drop = (id: string, why: string) =>
      console.error(`beachball: ${cls} ${obj} dropped message ${id}: it ${why}`);
    let readVersion = -1;
    let readAll = false;
    // The last stored message handed out with held ones (acknowledging a held one acknowledges it too).
    let lastStoredSeq: number | null = null;
    return {
      read: () => {
        const version = this.versions.get(k);
        let rows: InboxEntry<M>[] = [];
        lastStoredSeq = null;
        readVersion = -1;
        readAll = true;
        if (version !== undefined) {
          rows = readInbox<M>(sql, cls, obj, schema, drop);
          readVersion = version;
          readAll = rows.length < MAX_INBOX_BATCH;
          if (rows.length === 0 && readAll) this.forget(k, version);
        }
        // Held messages come after the stored ones, and only when every stored one was read.
        if (!readAll || !this.held.has(k)) return rows;
        lastStoredSeq = rows.length > 0 ? rows[rows.length - 1]!.seq : null;
        for (const m of this.held.read(k, MAX_INBOX_BATCH - rows.length)) {
          const checked = decode<M>(m.body, schema, cls);
          if (typeof checked === "string") {
            drop(m.key, checked);
            this.held.discard(k, m.seq);
          } else rows.push({ seq: m.seq, messageId: m.key, message: checked.value });
        }
        return rows;
      },
      ack: (seq) => {
        if (seq >= HELD_SEQ_BASE) {
          this.held.ack(k, seq);
          if (lastStoredSeq !== null) ackInbox(sql, cls, obj, lastStoredSeq);
        } else ackInbox(sql, cls, obj, seq);
        if (readAll && this.versions.get(k) === readVersion) this.forget(k, readVersion);
      },
    };
  }

  /** Instance keys with stored or held messages (to nudge at start). */
  pending(): string[] {
    return [...new Set([...this.versions.keys(), ...this.held.targets().map((t) => this.key(t.cls, t.obj))])];
  }

  /** Names of instances of `cls` with held messages. */
  heldNames(cls: string): string[] {
    return this.held
      .targets()
      .filter((t) => t.cls === cls)
      .map((t) => t.obj);
  }

  /** Forgets the held messages of instance `k` (its rows are being deleted). */
  drop(k: string): void {
    this.held.drop(k);
  }

  /** Writes every held message to `_inbox` (just before COMMIT). */
  flushAll(): void {
    for (const t of this.held.targets()) this.stored(this.key(t.cls, t.obj));
    this.held.flushAll();
  }

  /** Re-reads which instances have stored messages (at start, and after a failed commit brought back rows it had deleted). */
  rebuild(): void {
    this.versions.clear();
    for (const r of this.store.sql.exec<{ cls: string; obj: string }>("SELECT DISTINCT cls, obj FROM _inbox").toArray())
      this.versions.set(this.key(r.cls, r.obj), ++this.seq);
  }

  /** Forgets the held messages (the batch failed or was abandoned: they are gone with its other writes). */
  clearHeld(): void {
    this.held.clear();
  }

  private flushFor(k: string): void {
    if (!this.held.has(k)) return;
    this.stored(k);
    this.held.flush(k);
  }

  /** Rows were appended to `_inbox` for instance `k`. */
  private stored(k: string): void {
    const before = this.versions.get(k);
    this.versions.set(k, ++this.seq);
    this.store.onRollback(() => {
      if (before === undefined) this.versions.delete(k);
      else this.versions.set(k, before);
    });
  }

  /** Instance `k` read every stored message up to `version`: it has none left (restored if the savepoint rolls back). */
  private forget(k: string, version: number): void {
    this.versions.delete(k);
    this.store.onRollback(() => {
      if (!this.versions.has(k)) this.versions.set(k, version);
    });
  }
}

/** A held message's body decoded and checked against the receiver's schema, or why it is dropped. */
function decode<M>(body: string, schema: TSchema | null, cls: string): { value: M } | string {
  let v: unknown;
  try {
    v = JSON.parse(body);
  } catch {
    return "is not JSON";
  }
  if (!schema) return `${cls} receives no messages`;
  if (!checkerOf(schema)(v)) return `does not match ${cls}'s message schema: ${firstError(schema, v)}`;
  return { value: v as M };
}
