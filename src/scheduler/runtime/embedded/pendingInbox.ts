/**
 * Latest-only messages (`postLatest`) of the open batch, held in memory
 * until the batch commits (docs/adr/0120-object-runtime-storage.md, "Profile
 * and numbers after"). A message replaced within the batch, or read and
 * acknowledged by its receiver within the batch, never costs a statement:
 * an advertisement a Host publishes and the directory applies in the same
 * turn, or an allocation's index view posted at create and again at the end
 * of its first pass. What is still held when the batch commits is appended
 * to `_inbox` just before COMMIT, so it is durable exactly when the writes of
 * the sender's transaction are (the batch commits as a whole).
 *
 * Order per receiver is the inbox's: held messages come after the rows in
 * `_inbox`; a plain `post` to a receiver first appends what is held for it
 * (`flush`), so messages are read in the order they were sent. Every change
 * made inside a savepoint is undone if the savepoint rolls back.
 * Must never: lose a held message (commit appends it; a rollback restores
 * it), hand out a message twice in one batch once acknowledged, or write
 * outside the open batch.
 */
import { upsertInbox } from "../stateRows.ts";
import type { SqlStore } from "./sqlStore.ts";

/** Positions of held messages start here, above any `_inbox` sequence number this store will reach. */
export const HELD_SEQ_BASE = 2 ** 52;

/** One held message: its latest-only key, JSON body and position. */
export interface HeldMessage {
  readonly key: string;
  body: string;
  readonly seq: number;
}

interface Held {
  readonly cls: string;
  readonly obj: string;
  items: HeldMessage[];
}

/** See the module header. Keys are the runtime's instance keys (class and name). */
export class PendingInbox {
  private readonly held = new Map<string, Held>();
  private nextSeq = HELD_SEQ_BASE;

  constructor(private readonly store: SqlStore) {}

  /** True if messages are held for instance `k`. */
  has(k: string): boolean {
    return this.held.has(k);
  }

  /** Instance keys with held messages (class and name). */
  targets(): { cls: string; obj: string }[] {
    return [...this.held.values()].map((h) => ({ cls: h.cls, obj: h.obj }));
  }

  /** Holds `body` for (cls, obj) under `key`, replacing a held message with the same key in place (as `_inbox` does). */
  upsert(k: string, cls: string, obj: string, key: string, body: string): void {
    this.store.markDirty();
    let h = this.held.get(k);
    if (!h) {
      h = { cls, obj, items: [] };
      this.held.set(k, h);
      this.store.onRollback(() => {
        if (this.held.get(k) === h) this.held.delete(k);
      });
    }
    const same = h.items.find((m) => m.key === key);
    if (same) {
      const before = same.body;
      same.body = body;
      this.store.onRollback(() => {
        same.body = before;
      });
      return;
    }
    const m: HeldMessage = { key, body, seq: this.nextSeq++ };
    h.items.push(m);
    const list = h;
    this.store.onRollback(() => {
      list.items = list.items.filter((x) => x !== m);
    });
  }

  /** The messages held for instance `k`, oldest first (at most `limit`). */
  read(k: string, limit: number): readonly HeldMessage[] {
    return this.held.get(k)?.items.slice(0, Math.max(0, limit)) ?? [];
  }

  /** Drops the messages held for `k` up to and including position `seq` (the receiver applied them). */
  ack(k: string, seq: number): void {
    const h = this.held.get(k);
    if (!h) return;
    const before = h.items;
    h.items = before.filter((m) => m.seq > seq);
    if (h.items.length === 0) this.held.delete(k);
    this.store.onRollback(() => {
      h.items = before;
      this.held.set(k, h);
    });
  }

  /** Drops the one held message at position `seq` (it failed the receiver's schema). */
  discard(k: string, seq: number): void {
    const h = this.held.get(k);
    if (!h) return;
    const before = h.items;
    h.items = before.filter((m) => m.seq !== seq);
    if (h.items.length === 0) this.held.delete(k);
    this.store.onRollback(() => {
      h.items = before;
      this.held.set(k, h);
    });
  }

  /** Appends what is held for `k` to `_inbox` in the open batch (before a plain post to it, and at commit). */
  flush(k: string): void {
    const h = this.held.get(k);
    if (!h) return;
    this.held.delete(k);
    for (const m of h.items) upsertInbox(this.store.sql, h.cls, h.obj, m.key, m.body);
    this.store.onRollback(() => {
      this.held.set(k, h);
    });
  }

  /** Appends everything held (just before the batch commits). */
  flushAll(): void {
    for (const k of [...this.held.keys()]) this.flush(k);
  }

  /** Forgets what is held for `k` (its instance was deleted). */
  drop(k: string): void {
    const h = this.held.get(k);
    if (!h) return;
    this.held.delete(k);
    this.store.onRollback(() => {
      this.held.set(k, h);
    });
  }

  /** Forgets everything (the batch failed or was abandoned: its messages are gone with its other writes). */
  clear(): void {
    this.held.clear();
  }
}
