/**
 * Alarm writes of the open batch, held in memory until it commits
 * (docs/adr/0120-object-runtime-storage.md, decision 4): the last value per
 * instance is written to `_alarm` just before COMMIT, inside it, so a
 * reconcile pass that arms its safety-net alarm and re-arms it when it ends
 * writes one row, not two. The timer writes them before it reads `_alarm`.
 * Every change made inside a savepoint is undone if the savepoint rolls back.
 * Must never: lose a held alarm (commit writes it; a rollback restores the
 * value before), or let a stored value shadow a newer held one.
 */
import { readAlarm, writeAlarm } from "../stateRows.ts";
import type { SqlStore } from "./sqlStore.ts";

interface HeldAlarm {
  readonly cls: string;
  readonly obj: string;
  readonly at: number | null;
}

/** See the module header. Keys are the runtime's instance keys (class and name). */
export class PendingAlarms {
  private readonly held = new Map<string, HeldAlarm>();

  constructor(private readonly store: SqlStore) {}

  /** Sets (or with null clears) the alarm of (cls, obj), ms since the epoch, in the open batch. */
  set(k: string, cls: string, obj: string, at: number | null): void {
    const before = this.held.get(k);
    this.store.markDirty();
    this.held.set(k, { cls, obj, at });
    this.store.onRollback(() => {
      if (before) this.held.set(k, before);
      else this.held.delete(k);
    });
  }

  /** The alarm of (cls, obj): the one held in the open batch, else the stored one. */
  get(k: string, cls: string, obj: string): number | null {
    const h = this.held.get(k);
    return h ? h.at : readAlarm(this.store.sql, cls, obj);
  }

  /** Names of instances of `cls` with an alarm held (armed, not cleared). */
  armedNames(cls: string): string[] {
    return [...this.held.values()].filter((h) => h.cls === cls && h.at !== null).map((h) => h.obj);
  }

  /** Forgets the held alarm of `k` (its rows are being deleted). */
  drop(k: string): void {
    const before = this.held.get(k);
    if (!before) return;
    this.held.delete(k);
    this.store.onRollback(() => {
      if (!this.held.has(k)) this.held.set(k, before);
    });
  }

  /** Writes the held alarms to `_alarm` in the open batch. */
  flush(): void {
    if (this.held.size === 0) return;
    const held = [...this.held];
    this.held.clear();
    for (const [, h] of held) writeAlarm(this.store.sql, h.cls, h.obj, h.at);
    this.store.onRollback(() => {
      for (const [k, h] of held) if (!this.held.has(k)) this.held.set(k, h);
    });
  }

  /** Forgets everything (the batch failed or was abandoned: its alarm writes are gone with its other writes). */
  clear(): void {
    this.held.clear();
  }
}
