/**
 * The Host object's rows (./hostSchema.ts), read and written through drizzle
 * only: the host row and its capacity-consuming placements cached in memory
 * (the instance is their only writer), the agent command queue, the
 * per-session update sequence numbers and the consumed-delivery digests.
 * Prepared statements are built once per storage (../runtime/drizzle.ts);
 * patches of a varying shape go through drizzle's update builder.
 * Must never: decide anything (the rules are in src/domain/host*.ts and the
 * Host object's parts), or keep a cached row a rolled-back transaction wrote.
 */
import { and, eq, lt, ne, sql } from "drizzle-orm";
import type { ObjectStorage } from "../runtime/api.ts";
import { fromExcluded, dbFor, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import { BeachballError } from "../../protocol/errors.ts";
import { MAX_COMMANDS_PER_POLL, type AgentCommand } from "../../protocol/agent.ts";
import { commandIdFor } from "../../domain/identifiers.ts";
import { commandTable, deliveryTable, hostTable, placementTable, updateSeqTable } from "./hostSchema.ts";

/** The stored host row. */
export type HostRow = typeof hostTable.$inferSelect;
/** One stored placement. */
export type PlacementRow = typeof placementTable.$inferSelect;
/** The stored state of a host command. */
type CommandStatus = (typeof commandTable.$inferSelect)["status"];

const obj = sql.placeholder("obj");
const placementId = sql.placeholder("placementId");

/** Builds the Host object's prepared statements (once per storage; every one takes the host ID as `obj`). */
function prepareHostQueries(db: ObjectDb) {
  return { ...prepareReads(db), ...prepareCommandWrites(db), ...prepareSessionWrites(db) };
}

/** Reads of the host row, placements, pending commands and consumed deliveries. */
function prepareReads(db: ObjectDb) {
  return {
    host: db.select().from(hostTable).where(eq(hostTable.obj, obj)).prepare(),
    consuming: db
      .select()
      .from(placementTable)
      .where(and(eq(placementTable.obj, obj), ne(placementTable.state, "absent")))
      .prepare(),
    byId: db
      .select()
      .from(placementTable)
      .where(and(eq(placementTable.obj, obj), eq(placementTable.placementId, sql.placeholder("id"))))
      .prepare(),
    byKey: db
      .select()
      .from(placementTable)
      .where(and(eq(placementTable.obj, obj), eq(placementTable.reservationKey, sql.placeholder("key"))))
      .prepare(),
    pending: db
      .select()
      .from(commandTable)
      .where(and(eq(commandTable.obj, obj), eq(commandTable.status, "pending")))
      .orderBy(commandTable.createdAtMs)
      .limit(MAX_COMMANDS_PER_POLL)
      .prepare(),
    delivery: db
      .select()
      .from(deliveryTable)
      .where(and(eq(deliveryTable.obj, obj), eq(deliveryTable.deliveryId, sql.placeholder("id"))))
      .prepare(),
    lastSeq: db
      .select({ lastSeq: updateSeqTable.lastSeq })
      .from(updateSeqTable)
      .where(and(eq(updateSeqTable.obj, obj), eq(updateSeqTable.placementId, placementId)))
      .prepare(),
  };
}

/** Writes of leases and of the agent command queue, and retention. */
function prepareCommandWrites(db: ObjectDb) {
  return {
    renewLeases: db
      .update(placementTable)
      .set({ leaseExpiresAtMs: sql`${sql.placeholder("lease")}` })
      .where(and(eq(placementTable.obj, obj), ne(placementTable.state, "absent"), ne(placementTable.desired, "absent")))
      .prepare(),
    enqueue: db
      .insert(commandTable)
      .values({
        obj,
        commandId: sql.placeholder("commandId"),
        placementId,
        type: sql.placeholder("type"),
        generation: sql.placeholder("generation"),
        status: "pending",
        createdAtMs: sql.placeholder("now"),
      })
      .onConflictDoNothing()
      .prepare(),
    supersedeAll: db
      .update(commandTable)
      .set({ status: "superseded" })
      .where(and(eq(commandTable.obj, obj), eq(commandTable.status, "pending")))
      .prepare(),
    supersedeFor: db
      .update(commandTable)
      .set({ status: "superseded" })
      .where(
        and(eq(commandTable.obj, obj), eq(commandTable.placementId, placementId), eq(commandTable.status, "pending")),
      )
      .prepare(),
    ack: db
      .update(commandTable)
      .set({ status: sql`${sql.placeholder("status")}` })
      .where(
        and(
          eq(commandTable.obj, obj),
          eq(commandTable.commandId, sql.placeholder("commandId")),
          eq(commandTable.status, "pending"),
        ),
      )
      .prepare(),
    pruneCommands: db
      .delete(commandTable)
      .where(
        and(
          eq(commandTable.obj, obj),
          ne(commandTable.status, "pending"),
          lt(commandTable.createdAtMs, sql.placeholder("cutoff")),
        ),
      )
      .prepare(),
    prunePlacements: db
      .delete(placementTable)
      .where(
        and(
          eq(placementTable.obj, obj),
          eq(placementTable.state, "absent"),
          lt(placementTable.updatedAtMs, sql.placeholder("cutoff")),
        ),
      )
      .prepare(),
  };
}

/** Writes of the per-session update sequence numbers and consumed deliveries. */
function prepareSessionWrites(db: ObjectDb) {
  return {
    recordSeq: db
      .insert(updateSeqTable)
      .values({ obj, placementId, lastSeq: sql.placeholder("seq") })
      .onConflictDoUpdate({
        target: [updateSeqTable.obj, updateSeqTable.placementId],
        set: fromExcluded(updateSeqTable, "lastSeq"),
      })
      .prepare(),
    clearSeqs: db.delete(updateSeqTable).where(eq(updateSeqTable.obj, obj)).prepare(),
    consumed: db
      .insert(deliveryTable)
      .values({
        obj,
        deliveryId: sql.placeholder("deliveryId"),
        placementId,
        generation: sql.placeholder("generation"),
        digest: sql.placeholder("digest"),
        consumedAtMs: sql.placeholder("now"),
      })
      .onConflictDoNothing()
      .prepare(),
  };
}

/** See the module header. One per Host instance. */
export class HostStore {
  private readonly q: ReturnType<typeof prepareHostQueries>;
  private readonly db: ObjectDb;
  private cachedRow: HostRow | null | undefined;
  /** Capacity-consuming placements (state ≠ absent), by ID. */
  private live: Map<string, PlacementRow> | undefined;

  /** `name` is the host ID (the instance name). */
  constructor(
    private readonly storage: ObjectStorage,
    private readonly name: string,
  ) {
    this.q = prepared(storage, prepareHostQueries);
    this.db = dbFor(storage);
  }

  /** Runs `fn` atomically; the cached copies are dropped if it throws (they may hold rolled-back writes). */
  atomically<T>(fn: () => T): T {
    try {
      return this.storage.transactionSync(fn);
    } catch (e) {
      this.cachedRow = undefined;
      this.live = undefined;
      throw e;
    }
  }

  /** The host row, or null before enrollment. */
  row(): HostRow | null {
    if (this.cachedRow === undefined) this.cachedRow = this.q.host.get({ obj: this.name }) ?? null;
    return this.cachedRow;
  }

  /** The host row. Throws NOT_FOUND before enrollment. */
  mustRow(): HostRow {
    const r = this.row();
    if (!r) throw new BeachballError("NOT_FOUND", "host is not registered");
    return r;
  }

  /** Inserts the host row of a first enrollment (no placements yet). */
  insertHost(row: HostRow): void {
    this.db.insert(hostTable).values(row).run();
    this.cachedRow = row;
    this.live = new Map();
  }

  /** Applies `patch` to the host row (in the caller's transaction) and to the cached copy. */
  setRow(patch: Partial<HostRow>): void {
    const r = this.mustRow();
    if (Object.keys(patch).length === 0) return;
    this.db.update(hostTable).set(patch).where(eq(hostTable.obj, this.name)).run();
    this.cachedRow = { ...r, ...patch };
  }

  /** Records a published advertisement's revision in the cached row only (the next heartbeat's row write stores it). */
  noteAdvertised(adRevision: number, adPublishedAtMs: number): void {
    const r = this.row();
    if (r) this.cachedRow = { ...r, adRevision, adPublishedAtMs };
  }

  /** The capacity-consuming placements (state ≠ absent), by ID. */
  placements(): Map<string, PlacementRow> {
    if (!this.live) this.live = new Map(this.q.consuming.all({ obj: this.name }).map((p) => [p.placementId, p]));
    return this.live;
  }

  /** A placement by ID, absent ones included (until pruned). */
  placement(id: string): PlacementRow | undefined {
    return this.placements().get(id) ?? this.q.byId.get({ obj: this.name, id });
  }

  /** The placement reserved under reservation `key`, if any. */
  placementByKey(key: string): PlacementRow | undefined {
    return this.q.byKey.get({ obj: this.name, key });
  }

  /** Inserts a new (reserved) placement. */
  insertPlacement(p: PlacementRow): void {
    this.db.insert(placementTable).values(p).run();
    this.placements().set(p.placementId, p);
  }

  /** Applies `patch` to placement `p`; returns the updated row. */
  setPlacement(p: PlacementRow, patch: Partial<PlacementRow>): PlacementRow {
    this.db
      .update(placementTable)
      .set(patch)
      .where(and(eq(placementTable.obj, this.name), eq(placementTable.placementId, p.placementId)))
      .run();
    const next = { ...p, ...patch };
    if (next.state === "absent") this.placements().delete(p.placementId);
    else this.placements().set(p.placementId, next);
    return next;
  }

  /** Moves the lease of every placement not absent and not going to `lease` (`renewed`: those whose lease changes). */
  renewLeases(renewed: PlacementRow[], lease: number): void {
    if (renewed.length === 0) return;
    this.q.renewLeases.run({ obj: this.name, lease });
    for (const p of renewed) this.placements().set(p.placementId, { ...p, leaseExpiresAtMs: lease });
  }

  /** Queues a command for the agent (idempotent: its ID is deterministic). */
  enqueue(placementId: string, type: AgentCommand["type"], generation: number, nowMs: number, step = 0): void {
    const commandId = commandIdFor(placementId, type, generation, step);
    this.q.enqueue.run({ obj: this.name, commandId, placementId, type, generation, now: nowMs });
  }

  /** Supersedes the pending commands of `placementId`, or of every placement when null. */
  supersedePending(placementId: string | null): void {
    if (placementId === null) this.q.supersedeAll.run({ obj: this.name });
    else this.q.supersedeFor.run({ obj: this.name, placementId });
  }

  /** Records the agent's acknowledgement of a pending command. */
  ackCommand(commandId: string, status: Extract<CommandStatus, "acked" | "rejected">): void {
    this.q.ack.run({ obj: this.name, commandId, status });
  }

  /** Pending commands, oldest first (≤ MAX_COMMANDS_PER_POLL). */
  pendingCommands() {
    return this.q.pending.all({ obj: this.name });
  }

  /** Forgets every placement's applied sequence number (a session opened). */
  clearUpdateSeqs(): void {
    this.q.clearSeqs.run({ obj: this.name });
  }

  /** The last sequence number applied to `placementId` in this session (0: none). */
  lastAppliedSeq(placementId: string): number {
    return this.q.lastSeq.get({ obj: this.name, placementId })?.lastSeq ?? 0;
  }

  /** Records `seq` as the last one applied to `placementId`. */
  recordSeq(placementId: string, seq: number): void {
    this.q.recordSeq.run({ obj: this.name, placementId, seq });
  }

  /** The digest of consumed delivery `deliveryId`, if it was consumed. */
  consumedDelivery(deliveryId: string) {
    return this.q.delivery.get({ obj: this.name, id: deliveryId });
  }

  /** Records a consumed delivery's ID and digest (never its bytes; idempotent). */
  recordConsumed(d: { deliveryId: string; placementId: string; generation: number; digest: string }, nowMs: number) {
    this.q.consumed.run({ obj: this.name, ...d, now: nowMs });
  }

  /** Deletes settled commands and absent placements older than `cutoffMs`. */
  prune(cutoffMs: number): void {
    this.q.pruneCommands.run({ obj: this.name, cutoff: cutoffMs });
    this.q.prunePlacements.run({ obj: this.name, cutoff: cutoffMs });
  }
}
