/**
 * Statements over the runtime's own tables (./runtimeSchema.ts) that both
 * hosts share: an instance's alarm row, its inbox, and decoding inbox
 * messages against the receiving class's schema.
 * Must never: hand a receiver a message that failed its schema (it is set
 * aside and reported instead), or read another instance's rows.
 */
import type { TSchema } from "@sinclair/typebox";
import { checkerOf, firstError } from "./check.ts";
import type { InboxEntry, SqlStorage } from "./api.ts";

/** Most inbox messages handed to one instance per read. */
export const MAX_INBOX_BATCH = 256;
/** Largest message body kept in an inbox, bytes of JSON. */
export const MAX_MESSAGE_BYTES = 64 * 1024;

/** The armed alarm of (cls, obj), or null. */
export function readAlarm(sql: SqlStorage, cls: string, obj: string): number | null {
  const r = sql.exec<{ at_ms: number }>("SELECT at_ms FROM _alarm WHERE cls = ? AND obj = ?", cls, obj).next();
  return r.done ? null : r.value.at_ms;
}

/** Arms (or with null clears) the alarm of (cls, obj). */
export function writeAlarm(sql: SqlStorage, cls: string, obj: string, atMs: number | null): void {
  if (atMs === null) sql.exec("DELETE FROM _alarm WHERE cls = ? AND obj = ?", cls, obj);
  else
    sql.exec(
      "INSERT INTO _alarm (cls, obj, at_ms) VALUES (?, ?, ?) ON CONFLICT (cls, obj) DO UPDATE SET at_ms = excluded.at_ms",
      cls,
      obj,
      Math.floor(atMs),
    );
}

/** Appends a message to the inbox of (cls, obj); false if one with the same ID is still pending. Throws if the body is over MAX_MESSAGE_BYTES. */
export function insertInbox(sql: SqlStorage, cls: string, obj: string, messageId: string, body: string): boolean {
  if (body.length > MAX_MESSAGE_BYTES)
    throw new Error(`message ${messageId} for ${cls} ${obj} is ${body.length} bytes (limit ${MAX_MESSAGE_BYTES})`);
  return (
    sql.exec("INSERT OR IGNORE INTO _inbox (cls, obj, message_id, body) VALUES (?, ?, ?, ?)", cls, obj, messageId, body)
      .rowsWritten > 0
  );
}

/** Appends a message under `key`, replacing the body of one still pending under the same key. Throws if the body is over MAX_MESSAGE_BYTES. */
export function upsertInbox(sql: SqlStorage, cls: string, obj: string, key: string, body: string): void {
  if (body.length > MAX_MESSAGE_BYTES)
    throw new Error(`message ${key} for ${cls} ${obj} is ${body.length} bytes (limit ${MAX_MESSAGE_BYTES})`);
  sql.exec(
    "INSERT INTO _inbox (cls, obj, message_id, body) VALUES (?, ?, ?, ?) ON CONFLICT (cls, obj, message_id) DO UPDATE SET body = excluded.body",
    cls,
    obj,
    key,
    body,
  );
}

/** Deletes inbox messages of (cls, obj) up to and including `seq`. */
export function ackInbox(sql: SqlStorage, cls: string, obj: string, seq: number): void {
  sql.exec("DELETE FROM _inbox WHERE cls = ? AND obj = ? AND seq <= ?", cls, obj, seq);
}

/**
 * Up to MAX_INBOX_BATCH pending messages of (cls, obj), oldest first,
 * decoded and checked against `schema`. A message that is not JSON or does
 * not match is deleted and passed to `reject` (with why), never returned.
 */
export function readInbox<M>(
  sql: SqlStorage,
  cls: string,
  obj: string,
  schema: TSchema | null,
  reject: (messageId: string, why: string) => void,
): InboxEntry<M>[] {
  const rows = sql
    .exec<{ seq: number; message_id: string; body: string }>(
      "SELECT seq, message_id, body FROM _inbox WHERE cls = ? AND obj = ? ORDER BY seq LIMIT ?",
      cls,
      obj,
      MAX_INBOX_BATCH,
    )
    .toArray();
  const out: InboxEntry<M>[] = [];
  for (const r of rows) {
    let why: string | null = null;
    let message: unknown;
    try {
      message = JSON.parse(r.body);
      if (!schema) why = `${cls} receives no messages`;
      else if (!checkerOf(schema)(message))
        why = `does not match ${cls}'s message schema: ${firstError(schema, message)}`;
    } catch {
      why = "is not JSON";
    }
    if (why === null) {
      out.push({ seq: r.seq, messageId: r.message_id, message: message as M });
      continue;
    }
    sql.exec("DELETE FROM _inbox WHERE seq = ?", r.seq);
    reject(r.message_id, why);
  }
  return out;
}
