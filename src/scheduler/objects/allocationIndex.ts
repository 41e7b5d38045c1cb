/**
 * The allocation index: a rebuildable directory of each allocation's latest
 * view per identity, so listing is one ordered read of the index, never a
 * call to every allocation (issue "list paging is served from an index").
 * Not an authority: the Allocation object's own row is the truth; the index
 * lags by at most one inbox delivery.
 * Must never: list another identity's allocations.
 */
import { checkerOf } from "../runtime/check.ts";
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { AllocationView } from "../../protocol/api.ts";
import type { SchedulerEnv } from "../env.ts";
import { IndexMessage } from "./messages.ts";

/** One listed allocation: its latest view, or, when the stored view fails its schema, a marker naming it. */
export type IndexEntry = { allocationId: string; view: AllocationView | null };

/** See the module header. */
export class AllocationIndexObject extends AuthorityObject<SchedulerEnv, IndexMessage> {
  static readonly className = "AllocationIndex";
  static readonly messageSchema = IndexMessage;
  static readonly tables = ["allocation_index"] as const;

  constructor(state: ObjectState<IndexMessage>, env: SchedulerEnv) {
    super(state, env);
  }

  /**
   * Applies the inbox: per allocation, a purge deletes its entry (and wins
   * over any view in the same read); otherwise the highest-versioned view
   * is written, and only over an entry of a lower or equal version, so the
   * index never goes backwards however deliveries were ordered (issue 18
   * item 17). A view without a version (an earlier release's) counts as 0.
   */
  override onInbox(): void {
    const msgs = this.state.readInbox();
    if (msgs.length === 0) return;
    const sql = this.state.storage.sql;
    const newest = new Map<string, IndexMessage>();
    for (const { message: m } of msgs) {
      const id = m.kind === "purge" ? m.allocationId : m.view.allocationId;
      const seen = newest.get(id);
      if (!seen || m.kind === "purge" || (seen.kind === "upsert" && (m.version ?? 0) >= (seen.version ?? 0))) {
        if (seen?.kind !== "purge") newest.set(id, m);
      }
    }
    this.state.storage.transactionSync(() => {
      for (const m of newest.values()) {
        if (m.kind === "purge") {
          sql.exec("DELETE FROM allocation_index WHERE obj = ? AND allocation_id = ?", this.state.name, m.allocationId);
          continue;
        }
        const v = m.view;
        sql.exec(
          "INSERT INTO allocation_index (obj, allocation_id, identity, state, created_at_ms, view_json, view_version) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (obj, allocation_id) DO UPDATE SET state = excluded.state, view_json = excluded.view_json, view_version = excluded.view_version WHERE excluded.view_version >= allocation_index.view_version",
          this.state.name,
          v.allocationId,
          m.identity,
          v.state,
          Date.parse(v.createdAt),
          JSON.stringify(v),
          m.version ?? 0,
        );
      }
      this.state.ackInbox(msgs[msgs.length - 1]!.seq);
    });
  }

  /** True if the index lists `allocationId` for `identity` (an allocation with a committed create). */
  has(identity: string, allocationId: string): boolean {
    this.onInbox();
    return !this.state.storage.sql
      .exec(
        "SELECT 1 FROM allocation_index WHERE obj = ? AND allocation_id = ? AND identity = ?",
        this.state.name,
        allocationId,
        identity,
      )
      .next().done;
  }

  /** Entries of `identity` after `cursor` (an allocation ID), in allocation-ID order, at most `limit`. */
  list(identity: string, cursor: string | null, limit: number): IndexEntry[] {
    this.onInbox();
    return this.state.storage.sql
      .exec<{ allocation_id: string; view_json: string }>(
        "SELECT allocation_id, view_json FROM allocation_index WHERE obj = ? AND identity = ? AND allocation_id > ? ORDER BY allocation_id LIMIT ?",
        this.state.name,
        identity,
        cursor ?? "",
        limit,
      )
      .toArray()
      .map((r) => {
        let v: unknown = null;
        try {
          v = JSON.parse(r.view_json);
        } catch {
          v = null;
        }
        return { allocationId: r.allocation_id, view: checkerOf(AllocationView)(v) ? v : null };
      });
  }
}
