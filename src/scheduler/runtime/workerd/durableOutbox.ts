/**
 * The outbox of one workerd object (./durableInstance.ts): a post lands in
 * the sender's own database and leaves by RPC after the sender's call.
 * Rows are read oldest first, at most MAX_OUTBOX_BATCH per pass, and
 * deleted only once their target acknowledged them.
 * Must never: keep two pending latest-only rows for one (target, key).
 */
import type { SqlStorage } from "../api.ts";

/** Most outbox rows read per delivery pass. */
export const MAX_OUTBOX_BATCH = 256;

/** One pending outbox row. */
export interface OutboxRow {
  seq: number;
  target_cls: string;
  target_obj: string;
  message_id: string;
  body: string;
  latest: number;
}

/** Where a post comes from and goes to. */
export interface OutboxAddress {
  cls: string;
  obj: string;
  targetCls: string;
  targetObj: string;
}

/** Appends a post; a latest-only one first replaces any pending row with the same key for the same target. */
export function writeOutbox(
  sql: SqlStorage,
  at: OutboxAddress,
  messageId: string,
  body: string,
  latest: boolean,
): void {
  if (latest)
    sql.exec(
      "DELETE FROM _outbox WHERE target_cls = ? AND target_obj = ? AND message_id = ?",
      at.targetCls,
      at.targetObj,
      messageId,
    );
  sql.exec(
    "INSERT INTO _outbox (cls, obj, target_cls, target_obj, message_id, body, latest) VALUES (?, ?, ?, ?, ?, ?, ?)",
    at.cls,
    at.obj,
    at.targetCls,
    at.targetObj,
    messageId,
    body,
    latest ? 1 : 0,
  );
}

/** The oldest pending rows (at most MAX_OUTBOX_BATCH), grouped by target in seq order. */
export function readOutboxByTarget(sql: SqlStorage): OutboxRow[][] {
  const rows = sql
    .exec<OutboxRow>(
      "SELECT seq, target_cls, target_obj, message_id, body, latest FROM _outbox ORDER BY seq LIMIT ?",
      MAX_OUTBOX_BATCH,
    )
    .toArray();
  const byTarget = new Map<string, OutboxRow[]>();
  for (const r of rows) {
    const k = `${r.target_cls}\u0000${r.target_obj}`;
    byTarget.set(k, [...(byTarget.get(k) ?? []), r]);
  }
  return [...byTarget.values()];
}

/** Drops delivered rows. */
export function deleteOutbox(sql: SqlStorage, rows: readonly OutboxRow[]): void {
  for (const r of rows) sql.exec("DELETE FROM _outbox WHERE seq = ?", r.seq);
}

/** Whether any row is still pending. */
export function outboxPending(sql: SqlStorage): boolean {
  return sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM _outbox").one().n > 0;
}
