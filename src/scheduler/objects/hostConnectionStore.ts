/**
 * The Host object's private-networking rows (./hostSchema.ts:
 * host_connectivity, host_connection_commands), read and written through
 * drizzle only, with prepared statements built once per storage
 * (../runtime/drizzle.ts). Every statement takes the host ID as `obj`.
 * Must never: decide anything (the rules are in src/domain/connectionCommands.ts
 * and src/domain/grantReconcile.ts), or store a private key or a token.
 */
import { and, asc, eq, gt, lt, ne, sql } from "drizzle-orm";
import type { ObjectStorage } from "../runtime/api.ts";
import { fromExcluded, param, placeholders, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import { MAX_CONNECTION_COMMANDS_PER_POLL } from "../../protocol/agent.ts";
import { GRANT_EXPIRY_GRACE_MS } from "../../domain/grants.ts";
import type { CommandStatus, HeldGrant } from "../../domain/grantReconcile.ts";
import { connectionCommandTable as cmd, connectivityTable } from "./hostSchema.ts";

/** The stored connectivity row (the host endpoint's latest public facts). */
export type ConnectivityRow = typeof connectivityTable.$inferSelect;
/** One stored configure_connection command. */
export type ConnectionCommandRow = typeof cmd.$inferSelect;

const obj = sql.placeholder("obj");
const commandId = sql.placeholder("commandId");
const byCommand = and(eq(cmd.obj, obj), eq(cmd.commandId, commandId));

/** Builds the statements over host_connectivity and the reads of host_connection_commands. */
function prepareReads(db: ObjectDb) {
  return {
    connectivity: db.select().from(connectivityTable).where(eq(connectivityTable.obj, obj)).prepare(),
    upsertConnectivity: db
      .insert(connectivityTable)
      .values({ obj, ...placeholders("publicKey", "candidatesJson", "agentEpoch", "seq", "updatedAtMs") })
      .onConflictDoUpdate({
        target: connectivityTable.obj,
        set: fromExcluded(connectivityTable, "publicKey", "candidatesJson", "agentEpoch", "seq", "updatedAtMs"),
      })
      .prepare(),
    command: db.select().from(cmd).where(byCommand).prepare(),
    held: db
      .select({
        grantId: cmd.grantId,
        placementId: sql<string>`MAX(${cmd.placementId})`,
        generation: sql<number>`MAX(${cmd.generation})`,
        expiresAtMs: sql<number>`MAX(${cmd.expiresAtMs})`,
        apply: sql<CommandStatus | null>`MAX(CASE WHEN ${cmd.action} = 'apply' THEN ${cmd.status} END)`,
        revoke: sql<CommandStatus | null>`MAX(CASE WHEN ${cmd.action} = 'revoke' THEN ${cmd.status} END)`,
      })
      .from(cmd)
      .where(and(eq(cmd.obj, obj), gt(cmd.expiresAtMs, sql.placeholder("now"))))
      .groupBy(cmd.grantId)
      .prepare(),
    anyPending: db
      .select({ commandId: cmd.commandId })
      .from(cmd)
      .where(and(eq(cmd.obj, obj), eq(cmd.status, "pending")))
      .limit(1)
      .prepare(),
    pending: db
      .select()
      .from(cmd)
      .where(and(eq(cmd.obj, obj), eq(cmd.status, "pending")))
      .orderBy(asc(cmd.createdAtMs), asc(cmd.commandId))
      .limit(MAX_CONNECTION_COMMANDS_PER_POLL)
      .prepare(),
  };
}

/** Builds the writes of host_connection_commands. */
function prepareWrites(db: ObjectDb) {
  return {
    insert: db
      .insert(cmd)
      .values({
        obj,
        commandId,
        ...placeholders("grantId", "action", "networkId", "allocationId", "placementId", "generation"),
        ...placeholders("connectionId", "grantJson", "relayMapJson", "expiresAtMs", "createdAtMs"),
        status: "pending",
      })
      .onConflictDoNothing()
      .returning({ commandId: cmd.commandId })
      .prepare(),
    setStatus: db
      .update(cmd)
      .set({ status: param<CommandStatus>("status") })
      .where(byCommand)
      .prepare(),
    supersedeIfPending: db
      .update(cmd)
      .set({ status: "superseded" })
      .where(and(byCommand, eq(cmd.status, "pending")))
      .prepare(),
    setClientCandidates: db
      .update(cmd)
      .set({
        clientCandidatesJson: param<string>("json"),
        clientCandidateUpdates: sql`${cmd.clientCandidateUpdates} + 1`,
        status: "pending",
      })
      .where(byCommand)
      .prepare(),
    prune: db
      .delete(cmd)
      .where(
        and(
          eq(cmd.obj, obj),
          ne(cmd.status, "pending"),
          lt(cmd.createdAtMs, sql.placeholder("cutoff")),
          sql`${cmd.expiresAtMs} + ${sql.placeholder("grace")} < ${sql.placeholder("now")}`,
        ),
      )
      .prepare(),
  };
}

function prepareConnectionQueries(db: ObjectDb) {
  return { ...prepareReads(db), ...prepareWrites(db) };
}

/** See the module header. One per Host instance. */
export class HostConnectionStore {
  private readonly q: ReturnType<typeof prepareConnectionQueries>;

  /** `name` is the host ID (the instance name). */
  constructor(
    storage: ObjectStorage,
    private readonly name: string,
  ) {
    this.q = prepared(storage, prepareConnectionQueries);
  }

  /** The host endpoint's stored connectivity, or null before its first connectivity_update. */
  connectivity(): ConnectivityRow | null {
    return this.q.connectivity.get({ obj: this.name }) ?? null;
  }

  /** Stores the endpoint's connectivity (replacing the stored one). */
  setConnectivity(row: Omit<ConnectivityRow, "obj">): void {
    this.q.upsertConnectivity.run({ obj: this.name, ...row });
  }

  /** The command `commandId`, if queued here (until pruned). */
  command(commandId: string): ConnectionCommandRow | undefined {
    return this.q.command.get({ obj: this.name, commandId });
  }

  /** True if command `commandId` was ever queued here (until pruned). */
  has(commandId: string): boolean {
    return this.command(commandId) !== undefined;
  }

  /** Each grant with a command whose grant expires after `nowMs`, with where its apply and revoke stand. */
  heldGrants(nowMs: number): HeldGrant[] {
    return this.q.held.all({ obj: this.name, now: nowMs });
  }

  /** Queues `row` as pending; false (nothing written) when a command with its ID exists already. */
  insert(
    row: Omit<ConnectionCommandRow, "obj" | "status" | "clientCandidatesJson" | "clientCandidateUpdates">,
  ): boolean {
    // One statement: the conflict clause decides, and RETURNING answers a row only when one was written.
    return this.q.insert.get({ obj: this.name, ...row }) !== undefined;
  }

  /** Sets command `commandId`'s status. */
  setStatus(commandId: string, status: CommandStatus): void {
    this.q.setStatus.run({ obj: this.name, commandId, status });
  }

  /** Supersedes command `commandId` if it is still pending. */
  supersedeIfPending(commandId: string): void {
    this.q.supersedeIfPending.run({ obj: this.name, commandId });
  }

  /** Stores the client's candidates `json` with apply `commandId`, counts the change and makes the apply pending. */
  setClientCandidates(commandId: string, json: string): void {
    this.q.setClientCandidates.run({ obj: this.name, commandId, json });
  }

  /** True if a command waits for the agent. */
  hasPending(): boolean {
    return this.q.anyPending.get({ obj: this.name }) !== undefined;
  }

  /** The pending commands, oldest first (≤ MAX_CONNECTION_COMMANDS_PER_POLL). */
  pending(): ConnectionCommandRow[] {
    return this.q.pending.all({ obj: this.name });
  }

  /** Deletes settled commands created before `cutoffMs` whose grant expired more than GRANT_EXPIRY_GRACE_MS before `nowMs`. */
  prune(cutoffMs: number, nowMs: number): void {
    this.q.prune.run({ obj: this.name, cutoff: cutoffMs, grace: GRANT_EXPIRY_GRACE_MS, now: nowMs });
  }
}
