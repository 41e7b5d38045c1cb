/**
 * Tables of the RunQueue object (issue 22, "Runs"; the one definition,
 * migrations are generated from it): each run's record with its queue
 * entry (one row: a run cannot exist without its place in the queue), its
 * events, and each tenant's last dispatch (the fairness order's second key).
 * The script and environment rest only while the run waits for its VM; they
 * are cleared in the transaction that records the guest consumed them or
 * that ends the run.
 */
import { index, integer, primaryKey, sqliteTable, text } from "drizzle-orm/sqlite-core";

/** One run: its definition, state, timings (ms since the epoch) and outcome. */
export const runTable = sqliteTable(
  "run_records",
  {
    obj: text("obj").notNull(),
    runId: text("run_id").notNull(),
    /** Submission order across the queue (the fairness order's last key; the list's cursor). */
    seq: integer("seq").notNull(),
    tenant: text("tenant").notNull(),
    clientRequestId: text("client_request_id").notNull(),
    bodyDigest: text("body_digest").notNull(),
    workloadClass: text("workload_class").notNull(),
    state: text("state").notNull(),
    outcome: text("outcome"),
    reason: text("reason"),
    exitCode: integer("exit_code"),
    allocationId: text("allocation_id"),
    hostId: text("host_id"),
    labelsJson: text("labels_json").notNull(),
    budgetMs: integer("budget_ms").notNull(),
    scriptDigest: text("script_digest").notNull(),
    /** The script (base64) while the run waits; null once consumed or ended. */
    scriptBase64: text("script_base64"),
    /** The environment (JSON) while the run waits; null once consumed or ended. */
    envJson: text("env_json"),
    queuedAtMs: integer("queued_at_ms").notNull(),
    queueDeadlineAtMs: integer("queue_deadline_at_ms").notNull(),
    dispatchedAtMs: integer("dispatched_at_ms"),
    placedAtMs: integer("placed_at_ms"),
    readyAtMs: integer("ready_at_ms"),
    runningAtMs: integer("running_at_ms"),
    exitedAtMs: integer("exited_at_ms"),
    endedAtMs: integer("ended_at_ms"),
    cleanupPending: integer("cleanup_pending", { mode: "boolean" }).notNull(),
    /** The allocation generation the script was handed to (written before the delivery): a later generation never gets it again. */
    deliveredGeneration: integer("delivered_generation"),
    /** The last code its allocation's create was refused with, while it retries (DISPATCH_RETRYING). */
    dispatchError: text("dispatch_error"),
  },
  (t) => [
    primaryKey({ columns: [t.obj, t.runId] }),
    index("run_records_tenant").on(t.obj, t.tenant, t.seq),
    index("run_records_open").on(t.obj, t.endedAtMs),
  ],
);
/** A run's row. */
export type RunRow = typeof runTable.$inferSelect;

/** A run's events, numbered per run from 1. */
export const runEventTable = sqliteTable(
  "run_events",
  {
    obj: text("obj").notNull(),
    runId: text("run_id").notNull(),
    seq: integer("seq").notNull(),
    type: text("type").notNull(),
    state: text("state").notNull(),
    atMs: integer("at_ms").notNull(),
    dataJson: text("data_json"),
  },
  (t) => [primaryKey({ columns: [t.obj, t.runId, t.seq] })],
);

/** When each tenant was last given a slot (ms since the epoch). */
export const runTenantTable = sqliteTable(
  "run_tenants",
  {
    obj: text("obj").notNull(),
    tenant: text("tenant").notNull(),
    lastDispatchAtMs: integer("last_dispatch_at_ms").notNull(),
  },
  (t) => [primaryKey({ columns: [t.obj, t.tenant] })],
);
