/**
 * The Operations object (spec "Observability and retention"): durably
 * records alerts, deduplicated by ID, for operators to read. Alerts arrive
 * by inbox from Allocation, Host and HostDirectory objects and from the
 * runtime's quarantine (never by a synchronous call).
 * Must never: hold a secret, payload or raw request body.
 */
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import type { AlertItem } from "../../protocol/views.ts";
import type { SchedulerEnv } from "../env.ts";
import { OperationsMessage } from "./messages.ts";

/** Most alerts kept; older ones are pruned first. */
export const MAX_RETAINED_ALERTS = 10_000;

/** See the module header. */
export class OperationsObject extends AuthorityObject<SchedulerEnv, OperationsMessage> {
  static readonly className = "Operations";
  static readonly messageSchema = OperationsMessage;
  static readonly tables = ["operations_alerts"] as const;

  constructor(state: ObjectState<OperationsMessage>, env: SchedulerEnv) {
    super(state, env);
  }

  override onInbox(): void {
    const msgs = this.state.readInbox();
    if (msgs.length === 0) return;
    const sql = this.state.storage.sql;
    this.state.storage.transactionSync(() => {
      for (const { message: a } of msgs) {
        sql.exec(
          "INSERT OR IGNORE INTO operations_alerts (obj, alert_id, type, subject, reason, at_ms) VALUES (?, ?, ?, ?, ?, ?)",
          this.state.name,
          a.alertId,
          a.type,
          a.subject,
          a.reason,
          a.atMs,
        );
      }
      sql.exec(
        "DELETE FROM operations_alerts WHERE obj = ? AND seq <= (SELECT MAX(seq) FROM operations_alerts WHERE obj = ?) - ?",
        this.state.name,
        this.state.name,
        MAX_RETAINED_ALERTS,
      );
      this.state.ackInbox(msgs[msgs.length - 1]!.seq);
    });
  }

  /** Records an alert raised by the host itself (a quarantined object), deduplicated by ID. */
  raise(a: OperationsMessage): void {
    this.state.storage.sql.exec(
      "INSERT OR IGNORE INTO operations_alerts (obj, alert_id, type, subject, reason, at_ms) VALUES (?, ?, ?, ?, ?, ?)",
      this.state.name,
      a.alertId,
      a.type,
      a.subject,
      a.reason,
      a.atMs,
    );
  }

  /** Alerts after sequence `after`, oldest first. */
  list(after: number, limit: number): AlertItem[] {
    this.onInbox();
    return this.state.storage.sql
      .exec<{ seq: number; alert_id: string; type: string; subject: string; reason: string; at_ms: number }>(
        "SELECT seq, alert_id, type, subject, reason, at_ms FROM operations_alerts WHERE obj = ? AND seq > ? ORDER BY seq LIMIT ?",
        this.state.name,
        after,
        limit,
      )
      .toArray()
      .map((r) => ({
        seq: r.seq,
        alertId: r.alert_id,
        type: r.type,
        subject: r.subject,
        reason: r.reason,
        at: new Date(r.at_ms).toISOString(),
        runbook: `https://beachball.dev/runbooks#${r.type.replaceAll(".", "-")}`,
      }));
  }
}
