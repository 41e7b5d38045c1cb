/**
 * The Operations object (spec "Observability and retention"): durably
 * records alerts, deduplicated by ID, for operators to read. Alerts arrive
 * by inbox from Allocation, Host and HostDirectory objects and from the
 * runtime's quarantine (never by a synchronous call).
 * Must never: hold a secret, payload or raw request body.
 */
import { and, asc, eq, gt, lte, max, sql } from "drizzle-orm";
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { placeholders, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import type { AlertItem } from "../../protocol/views.ts";
import type { SchedulerEnv } from "../env.ts";
import { OperationsMessage } from "./messages.ts";
import { alertTable } from "./singletonSchema.ts";

/** Most alerts kept; older ones are pruned first. */
export const MAX_RETAINED_ALERTS = 10_000;

const queries = (db: ObjectDb) => {
  const obj = sql.placeholder("obj");
  const t = alertTable;
  return {
    insert: db
      .insert(t)
      .values({
        obj,
        ...placeholders("alertId", "type", "subject", "reason", "atMs"),
      })
      .onConflictDoNothing()
      .prepare(),
    /** Deletes all but the newest MAX_RETAINED_ALERTS. */
    prune: db
      .delete(t)
      .where(
        and(
          eq(t.obj, obj),
          lte(
            t.seq,
            sql`(${db
              .select({ m: max(t.seq) })
              .from(t)
              .where(eq(t.obj, obj))}) - ${MAX_RETAINED_ALERTS}`,
          ),
        ),
      )
      .prepare(),
    after: db
      .select()
      .from(t)
      .where(and(eq(t.obj, obj), gt(t.seq, sql.placeholder("after"))))
      .orderBy(asc(t.seq))
      .limit(sql.placeholder("limit"))
      .prepare(),
  };
};

/** See the module header. */
export class OperationsObject extends AuthorityObject<SchedulerEnv, OperationsMessage> {
  static readonly className = "Operations";
  static readonly messageSchema = OperationsMessage;
  static readonly tables = ["operations_alerts"] as const;

  private readonly q = prepared(this.state.storage, queries);

  constructor(state: ObjectState<OperationsMessage>, env: SchedulerEnv) {
    super(state, env);
  }

  override onInbox(): void {
    const msgs = this.state.readInbox();
    if (msgs.length === 0) return;
    this.state.storage.transactionSync(() => {
      for (const { message: a } of msgs) this.raise(a);
      this.q.prune.run({ obj: this.state.name });
      this.state.ackInbox(msgs[msgs.length - 1]!.seq);
    });
  }

  /** Records an alert raised by the host itself (a quarantined object), deduplicated by ID. */
  raise(a: OperationsMessage): void {
    this.q.insert.run({
      obj: this.state.name,
      alertId: a.alertId,
      type: a.type,
      subject: a.subject,
      reason: a.reason,
      atMs: a.atMs,
    });
  }

  /** Alerts after sequence `after`, oldest first. */
  list(after: number, limit: number): AlertItem[] {
    this.onInbox();
    return this.q.after.all({ obj: this.state.name, after, limit }).map((r) => ({
      seq: r.seq,
      alertId: r.alertId,
      type: r.type,
      subject: r.subject,
      reason: r.reason,
      at: new Date(r.atMs).toISOString(),
      runbook: `https://beachball.dev/runbooks#${r.type.replaceAll(".", "-")}`,
    }));
  }
}
