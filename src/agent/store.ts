/**
 * The agent's local authority, agent.db (spec "Agent runtime and local
 * state"): placements with desired and observed state, processed command IDs
 * with payload digests, consumed delivery digests, and the observation outbox.
 *
 * The tables are declared once in ./storeSchema.ts; the file is created and
 * upgraded in place by the drizzle-kit migrations generated from them
 * (./migrations/, applied by src/storage/sqlite.ts `migrateDb` when the
 * store opens).
 *
 * Every command is persisted here before any side effect. Must never: store
 * a bootstrap payload (only its digest).
 */
import type { Database } from "bun:sqlite";
import { asc, eq, lte, ne, sql } from "drizzle-orm";
import { drizzle, type BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import { migrateDb, openDb } from "../storage/sqlite.ts";
import type {
  AgentCommand,
  CommandSpec,
  PlacementObservedState,
  PlacementUpdate,
  StartOrigin,
  VmExit,
} from "../protocol/agent.ts";
import { AGENT_MIGRATIONS } from "./migrations/index.ts";
import { commands, deliveries, outbox, placements } from "./storeSchema.ts";

/** Version of agent.db's schema: how many migrations (./migrations/) this build applies; the file's `PRAGMA user_version`. */
export const AGENT_SCHEMA_VERSION = AGENT_MIGRATIONS.length;

/** A local placement row. */
export type LocalPlacement = typeof placements.$inferSelect;

/** Most JSON bytes of observations sent in one envelope (MAX_ENVELOPE_BYTES is 256 KiB; acks and health share it). */
export const MAX_OUTBOX_BATCH_BYTES = 160 * 1024;

/** Fields an observation may set besides the state: the row's own columns, plus the exit diagnosis that only travels in the update. */
export type ObservationExtra = {
  errorCode?: string | null;
  workloadExitCode?: number;
  exit?: VmExit;
  /** How a templated class's placement came to run (on its `running` update; outbox only, issue 21). */
  start?: StartOrigin;
} & Partial<LocalPlacement>;

/** The desired state each command type sets (issue 21 adds paused and suspended). */
const DESIRED_OF: Record<AgentCommand["type"], LocalPlacement["desired"]> = {
  ensure_present: "present",
  ensure_running: "running",
  ensure_paused: "paused",
  ensure_suspended: "suspended",
  ensure_absent: "absent",
};

/** Outcome of recording a command. */
export type RecordResult = "accepted" | "duplicate" | "conflict";

/** The agent database. */
export class AgentStore {
  readonly sql: Database;
  readonly db: BunSQLiteDatabase;

  /** Prepared once: the statements every poll, observation and housekeeping pass runs. */
  private readonly q;

  constructor(path: string) {
    this.sql = openDb(path);
    migrateDb(this.sql, path, AGENT_MIGRATIONS);
    this.sql.exec("PRAGMA synchronous = FULL");
    this.db = drizzle({ client: this.sql });
    this.q = {
      byId: this.db
        .select()
        .from(placements)
        .where(eq(placements.placementId, sql.placeholder("id")))
        .prepare(),
      live: this.db.select().from(placements).where(ne(placements.observed, "absent")).prepare(),
      pending: this.db.select().from(outbox).orderBy(asc(outbox.seq)).limit(sql.placeholder("limit")).prepare(),
      anyPending: this.sql.prepare<{ one: number }, []>("SELECT 1 AS one FROM outbox LIMIT 1"),
      renewLease: this.sql.prepare<unknown, [number, string, number]>(
        "UPDATE placements SET lease_expires_at_ms = ? WHERE placement_id = ? AND lease_expires_at_ms <= ?",
      ),
      commandById: this.sql.prepare<{ digest: string }, [string]>("SELECT digest FROM commands WHERE command_id = ?"),
    };
  }

  /** Closes the database (the store's). */
  close(): void {
    this.sql.close();
  }

  /**
   * Persists a command before any side effect and applies its desired state.
   * Same ID and digest: duplicate. Same ID, other digest: conflict (nothing changes).
   */
  recordCommand(cmd: AgentCommand, digest: string, dirName: string, nowMs: number): RecordResult {
    return this.sql.transaction((): RecordResult => {
      const prior = this.q.commandById.get(cmd.commandId);
      if (prior) return prior.digest === digest ? "duplicate" : "conflict";
      this.db
        .insert(commands)
        .values({
          commandId: cmd.commandId,
          placementId: cmd.placementId,
          type: cmd.type,
          generation: cmd.generation,
          digest,
          receivedAtMs: nowMs,
        })
        .run();
      const desired = DESIRED_OF[cmd.type];
      const existing = this.placement(cmd.placementId);
      const lease = Date.parse(cmd.leaseExpiresAt);
      if (!existing) {
        this.db
          .insert(placements)
          .values({
            placementId: cmd.placementId,
            allocationId: cmd.allocationId,
            generation: cmd.generation,
            specJson: JSON.stringify(cmd.spec satisfies CommandSpec),
            dirName,
            desired,
            // Even an ensure_absent for a placement never seen here is driven (and so reported absent).
            observed: "accepted",
            errorCode: null,
            vmPid: null,
            vmStartTime: null,
            leaseExpiresAtMs: lease,
            workloadExitCode: null,
            updatedAtMs: nowMs,
          })
          .run();
      } else if (existing.desired !== "absent" && cmd.generation >= existing.generation) {
        // A resume of a suspended VM runs it as the next generation (issue 21): the placement takes it on.
        this.db
          .update(placements)
          .set({
            desired,
            generation: cmd.generation,
            leaseExpiresAtMs: Math.max(lease, existing.leaseExpiresAtMs),
            updatedAtMs: nowMs,
          })
          .where(eq(placements.placementId, cmd.placementId))
          .run();
      }
      return "accepted";
    })();
  }

  /** One placement, or undefined. */
  placement(id: string): LocalPlacement | undefined {
    return this.q.byId.get({ id });
  }

  /** Every placement not yet absent. */
  livePlacements(): LocalPlacement[] {
    return this.q.live.all();
  }

  /** Updates a placement row. */
  patch(id: string, patch: Partial<LocalPlacement>): void {
    this.db.update(placements).set(patch).where(eq(placements.placementId, id)).run();
  }

  /** Sets the observed state and queues the observation in one transaction. */
  observe(p: LocalPlacement, state: PlacementObservedState, extra: ObservationExtra, nowMs: number): void {
    this.sql.transaction(() => {
      const { errorCode, workloadExitCode, exit, start, ...rest } = extra;
      this.db
        .update(placements)
        .set({
          ...rest,
          observed: state,
          updatedAtMs: nowMs,
          ...(errorCode !== undefined ? { errorCode } : {}),
          ...(workloadExitCode !== undefined ? { workloadExitCode } : {}),
        })
        .where(eq(placements.placementId, p.placementId))
        .run();
      const u: Omit<PlacementUpdate, "seq"> = {
        placementId: p.placementId,
        allocationId: p.allocationId,
        generation: p.generation,
        state,
        at: new Date(nowMs).toISOString(),
        ...(errorCode ? { errorCode: errorCode as PlacementUpdate["errorCode"] } : {}),
        ...(workloadExitCode !== undefined ? { workloadExitCode } : {}),
        ...(exit ? { exit } : {}),
        ...(start ? { start } : {}),
      };
      this.db
        .insert(outbox)
        .values({ updateJson: JSON.stringify(u) })
        .run();
    })();
  }

  /**
   * Queued observations (seq assigned by the outbox), oldest first: at most
   * `limit`, and no more than `maxBytes` of JSON together (at least one), so
   * an envelope of them stays under its size bound.
   */
  pendingUpdates(limit: number, maxBytes = MAX_OUTBOX_BATCH_BYTES): PlacementUpdate[] {
    const out: PlacementUpdate[] = [];
    let bytes = 0;
    for (const r of this.q.pending.all({ limit })) {
      bytes += r.updateJson.length + 16;
      if (out.length > 0 && bytes > maxBytes) break;
      out.push({ ...(JSON.parse(r.updateJson) as Omit<PlacementUpdate, "seq">), seq: r.seq });
    }
    return out;
  }

  /** True when the outbox holds an observation the scheduler has not accepted. */
  hasPendingUpdates(): boolean {
    return this.q.anyPending.get() !== null;
  }

  /** Drops observations the scheduler accepted (seq ≤ `seq`). */
  ackUpdates(seq: number): void {
    this.db.delete(outbox).where(lte(outbox.seq, seq)).run();
  }

  /** The digest of an earlier consumed delivery, or null. */
  deliveryDigest(deliveryId: string): string | null {
    return this.db.select().from(deliveries).where(eq(deliveries.deliveryId, deliveryId)).get()?.digest ?? null;
  }

  /** Records a consumed delivery (digest only). */
  recordDelivery(deliveryId: string, placementId: string, digest: string): void {
    this.db.insert(deliveries).values({ deliveryId, placementId, digest }).onConflictDoNothing().run();
  }

  /** Renews leases from the scheduler's authoritative expiries. */
  applyLeases(leases: Record<string, string>): void {
    const entries = Object.entries(leases);
    if (!entries.length) return;
    this.sql.transaction(() => {
      for (const [id, iso] of entries) {
        const ms = Date.parse(iso);
        if (Number.isFinite(ms)) this.q.renewLease.run(ms, id, ms);
      }
    })();
  }
}
