/**
 * The Network object's statements over its grants and allocations
 * (./networkSchema.ts), prepared once per storage: lookups, counts for the
 * bounds, the marks of a grant's life (issued, revoked, revoke observed,
 * gone), the fence of a generation, and the times the alarm may be due.
 * Rules are not here: which grant is stale or gone is decided by
 * src/domain/grants.ts over the rows these return.
 * Must never: decide a rule in SQL that the domain functions own.
 */
import { and, asc, count, eq, gt, isNotNull, isNull, lt, lte, min, sql } from "drizzle-orm";
import { param, placeholders, type ObjectDb } from "../runtime/drizzle.ts";
import { networkAllocationTable, networkGrantTable } from "./networkSchema.ts";

/** A grant's facts as stored (./networkSchema.ts). */
export type GrantRow = typeof networkGrantTable.$inferSelect;

const obj = sql.placeholder("obj");
const g = networkGrantTable;
const a = networkAllocationTable;
const mine = eq(g.obj, obj);
const ofAllocation = and(mine, eq(g.allocationId, sql.placeholder("id")));
const upTo = lte(g.generation, sql.placeholder("generation"));
const thisAllocation = and(eq(a.obj, obj), eq(a.allocationId, sql.placeholder("id")));

/** The statements (build with `prepared(storage, networkQueries)`). */
export const networkQueries = (db: ObjectDb) => ({
  ...grantLookups(db),
  ...grantMarks(db),
  ...grantScans(db),
  ...allocationMarks(db),
});

/** One grant, and the counts the bounds read. */
function grantLookups(db: ObjectDb) {
  return {
    grant: db
      .select()
      .from(g)
      .where(and(mine, eq(g.grantId, sql.placeholder("grantId"))))
      .prepare(),
    liveOfAllocation: db
      .select({ n: count() })
      .from(g)
      .where(and(ofAllocation, isNull(g.revokedAtMs), gt(g.expiresAtMs, sql.placeholder("now"))))
      .prepare(),
    held: db
      .select({ n: count() })
      .from(g)
      .where(and(mine, isNull(g.goneAtMs)))
      .prepare(),
  };
}

/** The marks of a grant's life: issued, revoked, revoke observed, gone, forgotten. */
function grantMarks(db: ObjectDb) {
  return {
    insert: db
      .insert(g)
      .values({
        obj,
        ...placeholders(
          "grantId",
          "generation",
          "hostId",
          "placementId",
          "clientAddress",
          "connectionId",
          "expiresAtMs",
        ),
        allocationId: sql.placeholder("id"),
        issuedAtMs: sql.placeholder("now"),
        revokedAtMs: null,
        revokeObservedAtMs: null,
        goneAtMs: null,
      })
      .prepare(),
    markRevoked: db
      .update(g)
      .set({ revokedAtMs: param<number>("now") })
      .where(and(mine, eq(g.grantId, sql.placeholder("grantId"))))
      .prepare(),
    markRevokeObserved: db
      .update(g)
      .set({ revokeObservedAtMs: param<number>("atMs") })
      .where(
        and(
          mine,
          eq(g.grantId, sql.placeholder("grantId")),
          eq(g.hostId, sql.placeholder("hostId")),
          isNull(g.revokeObservedAtMs),
        ),
      )
      .prepare(),
    markGone: db
      .update(g)
      .set({ goneAtMs: param<number>("now") })
      .where(and(mine, eq(g.grantId, sql.placeholder("grantId"))))
      .prepare(),
    forgetGoneBefore: db
      .delete(g)
      .where(and(mine, isNotNull(g.goneAtMs), lt(g.goneAtMs, sql.placeholder("before"))))
      .prepare(),
  };
}

/** The sets of grants a fence, a settle pass, the alarm and the operator view read. */
function grantScans(db: ObjectDb) {
  return {
    /** Grants of generations up to `generation` of the allocation not yet revoked (nor gone). */
    unrevokedUpTo: db
      .select()
      .from(g)
      .where(and(ofAllocation, upTo, isNull(g.revokedAtMs), isNull(g.goneAtMs)))
      .prepare(),
    /** Grants of generations up to `generation` of the allocation not yet gone. */
    openUpTo: db
      .select()
      .from(g)
      .where(and(ofAllocation, upTo, isNull(g.goneAtMs)))
      .prepare(),
    openOfAllocation: db
      .select()
      .from(g)
      .where(and(ofAllocation, isNull(g.goneAtMs)))
      .prepare(),
    open: db
      .select()
      .from(g)
      .where(and(mine, isNull(g.goneAtMs)))
      .prepare(),
    /** Revoked grants whose host has not acknowledged, still unexpired (their revokes are resent). */
    unacknowledged: db
      .select()
      .from(g)
      .where(
        and(
          mine,
          isNotNull(g.revokedAtMs),
          isNull(g.revokeObservedAtMs),
          isNull(g.goneAtMs),
          gt(g.expiresAtMs, sql.placeholder("now")),
        ),
      )
      .prepare(),
    /** Grants not yet revoked nor gone, with what the stale-grant rule reads of their allocation. */
    unrevokedWithAllocation: db
      .select({ grant: g, alloc: { closedGeneration: a.closedGeneration, terminalAtMs: a.terminalAtMs } })
      .from(g)
      .leftJoin(a, and(eq(a.obj, g.obj), eq(a.allocationId, g.allocationId)))
      .where(and(mine, isNull(g.revokedAtMs), isNull(g.goneAtMs)))
      .prepare(),
    /** The three times the alarm may be due for: earliest expiry, a revoke to resend, earliest gone grant. */
    alarmTimes: db
      .select({
        expiry: sql<number | null>`MIN(CASE WHEN ${g.goneAtMs} IS NULL THEN ${g.expiresAtMs} END)`,
        resend: sql<
          number | null
        >`MIN(CASE WHEN ${g.goneAtMs} IS NULL AND ${g.revokedAtMs} IS NOT NULL AND ${g.revokeObservedAtMs} IS NULL AND ${g.expiresAtMs} > ${sql.placeholder("now")} THEN 1 END)`,
        forget: min(g.goneAtMs),
      })
      .from(g)
      .where(mine)
      .prepare(),
    all: db.select().from(g).where(mine).orderBy(asc(g.issuedAtMs), asc(g.grantId)).prepare(),
  };
}

/** The allocation's marks: a fenced or closed generation, its end, the end of a wait. */
function allocationMarks(db: ObjectDb) {
  return {
    fence: db
      .update(a)
      .set({
        closedGeneration: sql`MAX(${a.closedGeneration}, ${sql.placeholder("generation")})`,
        waitingGeneration: param<number>("generation"),
      })
      .where(thisAllocation)
      .prepare(),
    closeGeneration: db
      .update(a)
      .set({ closedGeneration: sql`MAX(${a.closedGeneration}, ${sql.placeholder("generation")})` })
      .where(thisAllocation)
      .prepare(),
    markTerminal: db
      .update(a)
      .set({ terminalAtMs: param<number>("now") })
      .where(and(thisAllocation, isNull(a.terminalAtMs)))
      .prepare(),
    stopWaiting: db.update(a).set({ waitingGeneration: 0 }).where(thisAllocation).prepare(),
  };
}
