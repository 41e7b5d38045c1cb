/**
 * The allocation index: a rebuildable directory of allocation IDs per
 * identity, for listing. Not an authority: the Allocation object's own row
 * is the truth; the index may lag by one inbox delivery.
 */
import { AuthorityObject } from "../runtime/objectRuntime.ts";

/** One index row. */
export interface IndexEntry {
  allocationId: string;
  state: string;
  createdAtMs: number;
}

/** See the module header. */
export class AllocationIndexObject extends AuthorityObject {
  static readonly className = "AllocationIndex";

  constructor(ctx: ConstructorParameters<typeof AuthorityObject>[0]) {
    super(ctx);
    ctx.sql.exec(`CREATE TABLE IF NOT EXISTS entries (allocation_id TEXT PRIMARY KEY, identity TEXT NOT NULL, state TEXT NOT NULL, created_at_ms INTEGER NOT NULL);
      CREATE INDEX IF NOT EXISTS entries_identity ON entries (identity, created_at_ms, allocation_id);`);
  }

  override onInbox(): void {
    const msgs = this.ctx.readInbox();
    if (msgs.length === 0) return;
    this.ctx.sql.transaction(() => {
      for (const m of msgs) {
        if (m.kind === "purge") {
          this.ctx.sql.query("DELETE FROM entries WHERE allocation_id = ?").run((m.body as { allocationId: string }).allocationId);
          continue;
        }
        if (m.kind !== "upsert") continue;
        const b = m.body as { allocationId: string; identity: string; state: string; createdAtMs: number };
        this.ctx.sql
          .query("INSERT INTO entries (allocation_id, identity, state, created_at_ms) VALUES (?, ?, ?, ?) ON CONFLICT(allocation_id) DO UPDATE SET state = excluded.state")
          .run(b.allocationId, b.identity, b.state, b.createdAtMs);
      }
      this.ctx.ackInbox(msgs[msgs.length - 1]!.seq);
    })();
  }

  /** Entries of `identity` after `cursor` (an allocation ID), oldest first, at most `limit`. */
  list(identity: string, cursor: string | null, limit: number): IndexEntry[] {
    this.onInbox();
    const rows = this.ctx.sql
      .query<{ allocation_id: string; state: string; created_at_ms: number }, [string, string, number]>(
        "SELECT allocation_id, state, created_at_ms FROM entries WHERE identity = ? AND allocation_id > ? ORDER BY allocation_id LIMIT ?",
      )
      .all(identity, cursor ?? "", limit);
    return rows.map((r) => ({ allocationId: r.allocation_id, state: r.state, createdAtMs: r.created_at_ms }));
  }
}
