/**
 * Tables the object runtime itself keeps beside each class's own tables,
 * on both hosts (one drizzle definition; the migrations in
 * src/scheduler/migrations/ create them): the one alarm per instance, the
 * inbox, the outbox a host uses when the target lives in another database
 * (workerd), and quarantined instances. Every row names its instance by
 * class and name, so the embedded host can keep every class in one file
 * and workerd one object per file with the same statements.
 * Must never: hold a secret or a bootstrap payload (message bodies are
 * observations, index rows and alerts).
 */
import { index, integer, primaryKey, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";

/** The one alarm of each instance (ms since the epoch). */
export const alarmTable = sqliteTable(
  "_alarm",
  {
    cls: text("cls").notNull(),
    obj: text("obj").notNull(),
    atMs: integer("at_ms").notNull(),
  },
  (t) => [primaryKey({ columns: [t.cls, t.obj] }), index("_alarm_due").on(t.atMs)],
);

/** Pending inbox messages, deduplicated per instance by message ID while pending. */
export const inboxTable = sqliteTable(
  "_inbox",
  {
    seq: integer("seq").primaryKey({ autoIncrement: true }),
    cls: text("cls").notNull(),
    obj: text("obj").notNull(),
    messageId: text("message_id").notNull(),
    /** The message as JSON, checked against the receiving class's schema when read. */
    body: text("body").notNull(),
  },
  (t) => [uniqueIndex("_inbox_dedup").on(t.cls, t.obj, t.messageId)],
);

/** Messages waiting to leave for an instance in another database (workerd); drained after the sender's writes are durable. */
export const outboxTable = sqliteTable("_outbox", {
  seq: integer("seq").primaryKey({ autoIncrement: true }),
  cls: text("cls").notNull(),
  obj: text("obj").notNull(),
  targetCls: text("target_cls").notNull(),
  targetObj: text("target_obj").notNull(),
  messageId: text("message_id").notNull(),
  body: text("body").notNull(),
  /** 1: replaces a message still pending under the same ID (postLatest). */
  latest: integer("latest", { mode: "boolean" }).notNull(),
});

/** Instances whose stored state failed its checks: calls to them fail with OBJECT_DAMAGED until an operator repairs them. */
export const quarantineTable = sqliteTable(
  "_quarantine",
  {
    cls: text("cls").notNull(),
    obj: text("obj").notNull(),
    reason: text("reason").notNull(),
    atMs: integer("at_ms").notNull(),
  },
  (t) => [primaryKey({ columns: [t.cls, t.obj] })],
);

/** Runtime facts: the storage health probe's last write. */
export const metaTable = sqliteTable("_meta", {
  key: text("key").primaryKey(),
  value: text("value").notNull(),
});
