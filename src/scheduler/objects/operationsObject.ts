/**
 * The Operations object (spec "Observability and retention"): durably
 * records alerts, deduplicated by ID, for operators to read. Alerts arrive
 * by inbox from Allocation and Host objects (never by a synchronous call).
 * Must never: hold a secret, payload or raw request body.
 */
import { AuthorityObject } from "../runtime/objectRuntime.ts";
import type { Alert } from "../../protocol/views.ts";

/** Most alerts kept; older ones are pruned first. */
export const MAX_RETAINED_ALERTS = 10_000;


/** See the module header. */
export class OperationsObject extends AuthorityObject {
  static readonly className = "Operations";

  constructor(ctx: ConstructorParameters<typeof AuthorityObject>[0]) {
    super(ctx);
    ctx.sql.exec(
      "CREATE TABLE IF NOT EXISTS alerts (seq INTEGER PRIMARY KEY AUTOINCREMENT, alert_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL, subject TEXT NOT NULL, reason TEXT NOT NULL, at_ms INTEGER NOT NULL)",
    );
  }

  override onInbox(): void {
    const msgs = this.ctx.readInbox();
    if (msgs.length === 0) return;
    this.ctx.sql.transaction(() => {
      for (const m of msgs) {
        if (m.kind !== "alert") continue;
        const b = m.body as { type: string; subject: string; reason: string; atMs: number };
        this.ctx.sql.query("INSERT OR IGNORE INTO alerts (alert_id, type, subject, reason, at_ms) VALUES (?, ?, ?, ?, ?)").run(m.messageId, b.type, b.subject, b.reason, b.atMs);
      }
      this.ctx.sql.query("DELETE FROM alerts WHERE seq <= (SELECT MAX(seq) FROM alerts) - ?").run(MAX_RETAINED_ALERTS);
      this.ctx.ackInbox(msgs[msgs.length - 1]!.seq);
    })();
  }

  /** Alerts after sequence `after`, oldest first. */
  list(after: number, limit: number): (Alert & { seq: number })[] {
    this.onInbox();
    return this.ctx.sql
      .query<{ seq: number; alert_id: string; type: string; subject: string; reason: string; at_ms: number }, [number, number]>(
        "SELECT * FROM alerts WHERE seq > ? ORDER BY seq LIMIT ?",
      )
      .all(after, limit)
      .map((r) => ({ seq: r.seq, alertId: r.alert_id, type: r.type, subject: r.subject, reason: r.reason, at: new Date(r.at_ms).toISOString(), runbook: `https://beachball.dev/runbooks#${r.type.replaceAll(".", "-")}` }));
  }
}
