/**
 * The allocation index: a rebuildable directory of each allocation's latest
 * view per identity, so listing is one ordered read of the index, never a
 * call to every allocation (issue "list paging is served from an index").
 * Not an authority: the Allocation object's own row is the truth; the index
 * lags by at most one inbox delivery.
 * Must never: list another identity's allocations.
 */
import { and, asc, eq, gt, sql } from "drizzle-orm";
import { checkerOf } from "../runtime/check.ts";
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { fromExcluded, placeholders, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import { AllocationView } from "../../protocol/api.ts";
import type { SchedulerEnv } from "../env.ts";
import { IndexMessage } from "./messages.ts";
import { allocationIndexTable as t } from "./singletonSchema.ts";

const obj = sql.placeholder("obj");
const thisEntry = and(eq(t.obj, obj), eq(t.allocationId, sql.placeholder("allocationId")));

/** The statements over allocation_index, built once per storage (../runtime/drizzle.ts). */
function queries(db: ObjectDb) {
  return {
    purge: db.delete(t).where(thisEntry).prepare(),
    /** A newer-or-equal version replaces the stored view; an older one changes nothing (issue 18 item 17). */
    upsert: db
      .insert(t)
      .values({ obj, ...placeholders("allocationId", "identity", "state", "createdAtMs", "viewJson", "viewVersion") })
      .onConflictDoUpdate({
        target: [t.obj, t.allocationId],
        set: fromExcluded(t, "state", "viewJson", "viewVersion"),
        setWhere: sql`excluded.view_version >= ${t.viewVersion}`,
      })
      .prepare(),
    has: db
      .select({ allocationId: t.allocationId })
      .from(t)
      .where(and(thisEntry, eq(t.identity, sql.placeholder("identity"))))
      .prepare(),
    list: db
      .select({ allocationId: t.allocationId, viewJson: t.viewJson })
      .from(t)
      .where(
        and(eq(t.obj, obj), eq(t.identity, sql.placeholder("identity")), gt(t.allocationId, sql.placeholder("cursor"))),
      )
      .orderBy(asc(t.allocationId))
      .limit(sql.placeholder("limit"))
      .prepare(),
  };
}

/** One listed allocation: its latest view, or, when the stored view fails its schema, a marker naming it. */
export type IndexEntry = { allocationId: string; view: AllocationView | null };

/** See the module header. */
export class AllocationIndexObject extends AuthorityObject<SchedulerEnv, IndexMessage> {
  static readonly className = "AllocationIndex";
  static readonly messageSchema = IndexMessage;
  static readonly tables = ["allocation_index"] as const;

  private readonly q = prepared(this.state.storage, queries);

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
    const name = this.state.name;
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
          this.q.purge.run({ obj: name, allocationId: m.allocationId });
          continue;
        }
        const v = m.view;
        this.q.upsert.run({
          obj: name,
          allocationId: v.allocationId,
          identity: m.identity,
          state: v.state,
          createdAtMs: Date.parse(v.createdAt),
          viewJson: JSON.stringify(v),
          viewVersion: m.version ?? 0,
        });
      }
      this.state.ackInbox(msgs[msgs.length - 1]!.seq);
    });
  }

  /** True if the index lists `allocationId` for `identity` (an allocation with a committed create). */
  has(identity: string, allocationId: string): boolean {
    this.onInbox();
    return this.q.has.get({ obj: this.state.name, allocationId, identity }) !== undefined;
  }

  /** Entries of `identity` after `cursor` (an allocation ID), in allocation-ID order, at most `limit`. */
  list(identity: string, cursor: string | null, limit: number): IndexEntry[] {
    this.onInbox();
    return this.q.list.all({ obj: this.state.name, identity, cursor: cursor ?? "", limit }).map((r) => {
      let v: unknown = null;
      try {
        v = JSON.parse(r.viewJson);
      } catch {
        v = null;
      }
      return { allocationId: r.allocationId, view: checkerOf(AllocationView)(v) ? v : null };
    });
  }
}
