/**
 * The Usage object (issue 22, "Usage and cost"; one instance, GLOBAL):
 * records each allocation generation's VM time from the Allocation's word
 * that its VM was observed running to its word that the VM was observed
 * absent (or the allocation ended by fencing), and answers reports over a
 * window grouped by tenant, class or host. Intervals arrive by inbox only
 * (posted in the transaction of the allocation's change), so a report is
 * never ahead of the allocation's own events, and outlive the allocation's
 * record (USAGE_RETENTION_DAYS).
 * Must never: count time from a timeout alone, or show a tenant another's usage.
 */
import { and, eq, gt, isNull, lt, lte, or, sql } from "drizzle-orm";
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { dbFor, param, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import { USAGE_RETENTION_DAYS, type UsageGroup, type UsageReport } from "../../protocol/usage.ts";
import { usageTotals } from "../../domain/usage.ts";
import type { SchedulerEnv } from "../env.ts";
import { UsageMessage } from "./messages.ts";
import { usageIntervalTable as t, usageReservationTable as rt } from "./usageSchema.ts";
import { BeachballError } from "../../protocol/errors.ts";
import { overlapMs } from "../../domain/usage.ts";

const obj = sql.placeholder("obj");

function queries(db: ObjectDb) {
  return {
    end: db
      .update(t)
      .set({ endedAtMs: param<number>("atMs") })
      // A generation's absence ends it and any earlier one still open (a replacement's change may already name the next).
      .where(
        and(
          eq(t.obj, obj),
          eq(t.allocationId, sql.placeholder("allocationId")),
          lte(t.generation, sql.placeholder("generation")),
          isNull(t.endedAtMs),
        ),
      )
      .prepare(),
    window: db
      .select()
      .from(t)
      .where(
        and(
          eq(t.obj, obj),
          lt(t.startedAtMs, sql.placeholder("to")),
          or(isNull(t.endedAtMs), gt(t.endedAtMs, sql.placeholder("from"))),
        ),
      )
      .prepare(),
    reservation: db
      .select()
      .from(rt)
      .where(and(eq(rt.obj, obj), eq(rt.allocationId, sql.placeholder("allocationId"))))
      .prepare(),
    reservations: db
      .select()
      .from(rt)
      .where(and(eq(rt.obj, obj), eq(rt.tenant, sql.placeholder("tenant"))))
      .prepare(),
    unreserve: db
      .delete(rt)
      .where(and(eq(rt.obj, obj), eq(rt.allocationId, sql.placeholder("allocationId"))))
      .prepare(),
    purge: db
      .delete(t)
      .where(and(eq(t.obj, obj), lte(t.endedAtMs, sql.placeholder("before"))))
      .prepare(),
  };
}

/** See the module header. */
export class UsageObject extends AuthorityObject<SchedulerEnv, UsageMessage> {
  static readonly className = "Usage";
  static readonly messageSchema = UsageMessage;
  static readonly tables = ["usage_intervals", "usage_reservations"] as const;

  private readonly q = prepared(this.state.storage, queries);
  private nextPurgeAtMs = 0;

  constructor(state: ObjectState<UsageMessage>, env: SchedulerEnv) {
    super(state, env);
  }

  /** Applies started and ended intervals (each idempotent: the first start and the first end win; an end closes the generation and any earlier one still open). */
  override onInbox(): void {
    const msgs = this.state.readInbox();
    if (msgs.length === 0) return;
    const name = this.state.name;
    this.state.storage.transactionSync(() => {
      for (const { message: m } of msgs) {
        if (m.kind === "vm_started") {
          const { kind: _, atMs, ...rest } = m;
          // A later generation running ends any earlier one still open (never two intervals of one allocation at once).
          this.q.end.run({ obj: name, allocationId: m.allocationId, generation: m.generation - 1, atMs });
          dbFor(this.state.storage)
            .insert(t)
            .values({ obj: name, ...rest, startedAtMs: atMs, endedAtMs: null })
            .onConflictDoNothing()
            .run();
        } else {
          this.q.end.run({ obj: name, allocationId: m.allocationId, generation: m.generation, atMs: m.atMs });
          // The allocation ended: what it reserved of its owner's budget gives way to what it used.
          if (m.terminal) this.q.unreserve.run({ obj: name, allocationId: m.allocationId });
        }
      }
      this.state.ackInbox(msgs[msgs.length - 1]!.seq);
    });
  }

  /**
   * Reserves `reservedMicros` of `tenant`'s monthly budget (`budgetMicros`)
   * for allocation `allocationId` (idempotent by allocation): refused with
   * COST_LIMIT_EXCEEDED (429) when what the tenant used this calendar month
   * (UTC; VMs no longer reserving, at their classes' pricePerHour) plus its
   * live reservations plus this one would pass the budget. Nothing is
   * written for a refusal.
   */
  reserve(tenant: string, allocationId: string, reservedMicros: number, budgetMicros: number, ttlMs: number): void {
    this.onInbox();
    const name = this.state.name;
    if (this.q.reservation.get({ obj: name, allocationId })) return;
    const now = this.env.clock.wallMs();
    const d = new Date(now);
    const monthStart = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
    // A reservation whose end was never heard (a create that crashed midway) stops counting after its lifetime and an hour.
    const live = this.q.reservations
      .all({ obj: name, tenant })
      .filter((r) => r.expiresAtMs === 0 || r.expiresAtMs > now);
    const holding = new Set(live.map((r) => r.allocationId));
    const reserved = live.reduce((s, r) => s + r.reservedMicros, 0);
    const classes = this.env.config.manifest.workloadClasses;
    let spent = 0;
    for (const i of this.q.window.all({ obj: name, from: monthStart, to: now + 1 })) {
      if (i.tenant !== tenant || holding.has(i.allocationId)) continue;
      const price = classes[i.workloadClass]?.pricePerHour ?? 0;
      spent += Math.round((overlapMs(i.startedAtMs, i.endedAtMs, monthStart, now + 1, now) * price * 1e6) / 3_600_000);
    }
    if (spent + reserved + reservedMicros > budgetMicros)
      throw new BeachballError(
        "COST_LIMIT_EXCEEDED",
        `this would pass your monthly budget: ${fmt(spent)} used, ${fmt(reserved)} reserved by live allocations, ${fmt(reservedMicros)} for this one, budget ${fmt(budgetMicros)}`,
        { usedMicros: spent, reservedMicros: reserved, requestedMicros: reservedMicros, budgetMicros },
      );
    this.state.storage.transactionSync(() =>
      dbFor(this.state.storage)
        .insert(rt)
        .values({ obj: name, allocationId, tenant, reservedMicros, atMs: now, expiresAtMs: now + ttlMs + 3_600_000 })
        .run(),
    );
  }

  /** COST_LIMIT_EXCEEDED (429) when `tenant`'s use this month plus its live reservations already pass `budgetMicros` (a lease's heartbeat and extend ask). */
  checkBudget(tenant: string, budgetMicros: number): void {
    this.reserve(tenant, `check:${tenant}`, 0, budgetMicros, 0);
    this.unreserve(`check:${tenant}`);
  }

  /** Gives back what allocation `allocationId` reserved (its create was refused after the reservation). */
  unreserve(allocationId: string): void {
    this.state.storage.transactionSync(() => this.q.unreserve.run({ obj: this.state.name, allocationId }));
  }

  /**
   * Usage inside [fromMs, toMs) grouped `by`; `tenant` limits it to one
   * tenant's VMs (a controller's own report), null reports everyone (an
   * operator's). Open intervals count up to now.
   */
  report(tenant: string | null, fromMs: number, toMs: number, by: UsageGroup): UsageReport {
    this.onInbox();
    const now = this.env.clock.wallMs();
    if (now >= this.nextPurgeAtMs) {
      this.nextPurgeAtMs = now + 3_600_000;
      this.q.purge.run({ obj: this.state.name, before: now - USAGE_RETENTION_DAYS * 86_400_000 });
    }
    const rows = this.q.window.all({ obj: this.state.name, from: fromMs, to: toMs });
    const mine = tenant === null ? rows : rows.filter((r) => r.tenant === tenant);
    const { items, total } = usageTotals(mine, by, fromMs, toMs, now);
    return { from: new Date(fromMs).toISOString(), to: new Date(toMs).toISOString(), by, items, total };
  }
}

/** Micro-units as the currency's units, for a message. */
function fmt(micros: number): string {
  return (micros / 1e6).toFixed(2);
}
