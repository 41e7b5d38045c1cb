/**
 * The Leases object (issue 22, "Leases"; one instance, GLOBAL): an
 * allocation held for a person or a tool. A lease makes its allocation
 * (clientRequestId `lease/<leaseId>`, the VM's own TTL the class's longest,
 * as a backstop) and ends it when the lease's TTL passes or no activity came
 * for its idle timeout (alarm-driven, to the millisecond of the object's
 * alarm), after an `expiring_soon` event. Activity is a heartbeat, or a
 * connection grant issued for its VM (`bb exec`, `bb cp`, `bb proxy` each
 * ask for one), posted here by the Allocation. Shares let named principals
 * read it or use it (heartbeat, extend); anyone else gets NOT_FOUND.
 * Every cap (active leases, the owner's budget) is checked at create,
 * extend and heartbeat, so an ended or over-budget lease is never revived.
 * docs/leases.md.
 * Must never: revive an ended lease, or show a lease to a principal it was
 * not shared with.
 */
import { and, eq } from "drizzle-orm";
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { dbFor, prepared } from "../runtime/drizzle.ts";
import { BeachballError } from "../../protocol/errors.ts";
import { MAX_LEASE_SHARES, type LeaseAccess, type LeaseEvent, type LeaseView } from "../../protocol/leases.ts";
import { canonicalJson, digestOf, leaseAllocationRequestId } from "../../domain/identifiers.ts";
import { expiringSoonAt, leaseAccess, leaseDeadline } from "../../domain/leases.ts";
import { classSpec, createAllocationOf, workloadClassOf } from "../allocationRequests.ts";
import { GLOBAL, type SchedulerEnv } from "../env.ts";
import { LeaseMessage } from "./messages.ts";
import { leaseTable as t, type LeaseRow } from "./leaseSchema.ts";
import { iso, leaseQueries as queries, MAX_VM_TTL_SECONDS, pickShares, viewOf } from "./leaseView.ts";
import type { CreateLeaseCommand } from "./leaseView.ts";

/** See the module header. */
export class LeasesObject extends AuthorityObject<SchedulerEnv, LeaseMessage> {
  static readonly className = "Leases";
  static readonly messageSchema = LeaseMessage;
  static readonly tables = ["lease_records", "lease_events"] as const;

  private readonly q = prepared(this.state.storage, queries);
  private openLeases: Map<string, LeaseRow> | undefined;
  /** Creates waiting for their allocation, by owner NUL leaseId: they count against the cap. */
  private readonly creating = new Set<string>();
  /** Ended leases whose VM release did not go through yet: the alarm tries again (memory only; the VM's TTL is the backstop). */
  private readonly unreleased = new Map<string, LeaseRow>();
  private readonly eventSeq = new Map<string, number>();

  constructor(state: ObjectState<LeaseMessage>, env: SchedulerEnv) {
    super(state, env);
  }

  private get now(): number {
    return this.env.clock.wallMs();
  }

  private open(): Map<string, LeaseRow> {
    this.openLeases ??= new Map(this.q.open.all({ obj: this.state.name }).map((r) => [r.leaseId, r]));
    return this.openLeases;
  }

  /**
   * Makes a lease and its allocation (or answers the one a repeated body
   * made). Throws IDEMPOTENCY_CONFLICT, QUOTA_ACTIVE_LEASES (409: the
   * owner's active leases at the manifest's bound), UNKNOWN_WORKLOAD_CLASS,
   * and what the allocation's create throws (QUOTA_*, RATE_LIMITED,
   * COST_LIMIT_EXCEEDED); nothing is written for a refusal.
   */
  async create(cmd: CreateLeaseCommand): Promise<{ created: boolean; view: LeaseView }> {
    const existing = this.q.one.get({ obj: this.state.name, leaseId: cmd.leaseId });
    if (existing) {
      if (existing.bodyDigest !== cmd.bodyDigest)
        throw new BeachballError("IDEMPOTENCY_CONFLICT", "clientRequestId was used with a different request body");
      return { created: false, view: viewOf(existing, "owner") };
    }
    this.checkActiveCap(cmd.owner, 0);
    // Creates waiting for their allocation count against the cap too (calls interleave while this one awaits).
    const pending = `${cmd.owner}\u0000${cmd.leaseId}`;
    this.creating.add(pending);
    try {
      return await this.createWithAllocation(cmd);
    } finally {
      this.creating.delete(pending);
    }
  }

  private async createWithAllocation(cmd: CreateLeaseCommand): Promise<{ created: boolean; view: LeaseView }> {
    const cls = workloadClassOf(this.env.config.manifest, cmd.body.workloadClass);
    const vmTtl = Math.min(cls.maxTtlSeconds ?? MAX_VM_TTL_SECONDS, MAX_VM_TTL_SECONDS);
    const allocBody = {
      clientRequestId: leaseAllocationRequestId(cmd.leaseId),
      workloadClass: cmd.body.workloadClass,
      labels: cmd.body.labels ?? {},
      ttlSeconds: vmTtl,
    };
    // The allocation first: a crash after it leaves a VM its own TTL ends; a retry of the same body finishes the lease.
    const { view } = await createAllocationOf(
      this.env,
      cmd.owner,
      allocBody,
      cls,
      digestOf(canonicalJson(allocBody)),
      classSpec(cls),
    );
    const raced = this.q.one.get({ obj: this.state.name, leaseId: cmd.leaseId });
    if (raced) {
      if (raced.bodyDigest !== cmd.bodyDigest)
        throw new BeachballError("IDEMPOTENCY_CONFLICT", "clientRequestId was used with a different request body");
      return { created: false, view: viewOf(raced, "owner") };
    }
    const now = this.now;
    const row: LeaseRow = {
      obj: this.state.name,
      leaseId: cmd.leaseId,
      seq: now,
      owner: cmd.owner,
      clientRequestId: cmd.body.clientRequestId,
      bodyDigest: cmd.bodyDigest,
      workloadClass: cmd.body.workloadClass,
      allocationId: view.allocationId,
      labelsJson: JSON.stringify(cmd.body.labels ?? {}),
      state: "active",
      reason: null,
      createdAtMs: now,
      expiresAtMs: Math.min(now + cmd.body.ttlSeconds * 1000, Date.parse(view.expiresAt)),
      vmExpiresAtMs: Date.parse(view.expiresAt),
      idleMs: cmd.body.idleSeconds === undefined ? null : cmd.body.idleSeconds * 1000,
      lastActivityAtMs: now,
      warnedForMs: null,
      endedAtMs: null,
      sharesJson: "{}",
    };
    this.state.storage.transactionSync(() => {
      dbFor(this.state.storage).insert(t).values(row).run();
      this.event(row.leaseId, "lease.created", { allocationId: row.allocationId, expiresAt: iso(row.expiresAtMs) });
      this.open().set(row.leaseId, row);
      this.arm();
    });
    return { created: true, view: viewOf(row, "owner") };
  }

  /** The lease as `principal` may see it. Throws NOT_FOUND. */
  get(principal: string, leaseId: string): LeaseView {
    const { row, access } = this.visible(principal, leaseId);
    return viewOf(row, access);
  }

  /** Every lease `principal` owns or was shared, newest first (at most 200). */
  list(principal: string): LeaseView[] {
    const out: LeaseView[] = [];
    for (const r of this.q.newest.all({ obj: this.state.name })) {
      const a = leaseAccess(r.owner, JSON.parse(r.sharesJson) as Record<string, LeaseAccess>, principal);
      if (a) out.push(viewOf(this.open().get(r.leaseId) ?? r, a));
      if (out.length >= 200) break;
    }
    return out;
  }

  /** The lease's events after `after`. Throws NOT_FOUND. */
  events(principal: string, leaseId: string, after: number, limit: number): LeaseEvent[] {
    this.visible(principal, leaseId);
    return this.q.events.all({ obj: this.state.name, leaseId, after, limit }).map((e) => ({
      seq: e.seq,
      type: e.type,
      at: iso(e.atMs),
      leaseId: e.leaseId,
      ...(e.dataJson ? { data: JSON.parse(e.dataJson) as Record<string, unknown> } : {}),
    }));
  }

  /**
   * Activity from the owner or a `use` share: the idle deadline moves to now.
   * Throws NOT_FOUND, FORBIDDEN (read only), LEASE_ENDED (409: expired or
   * released, never revived), QUOTA_ACTIVE_LEASES, COST_LIMIT_EXCEEDED.
   */
  async heartbeat(principal: string, leaseId: string): Promise<LeaseView> {
    const row = await this.usable(principal, leaseId);
    return this.update(row, { lastActivityAtMs: this.now }, null, principal);
  }

  /** The lease now ends `ttlSeconds` from now, never past its VM's lifetime. Throws as heartbeat. */
  async extend(principal: string, leaseId: string, ttlSeconds: number): Promise<LeaseView> {
    const row = await this.usable(principal, leaseId);
    const expiresAtMs = Math.min(this.now + ttlSeconds * 1000, row.vmExpiresAtMs);
    return this.update(
      row,
      { expiresAtMs, lastActivityAtMs: this.now },
      { type: "lease.extended", data: { expiresAt: iso(expiresAtMs) } },
      principal,
    );
  }

  /** The owner ends the lease and releases its VM (idempotent). Throws NOT_FOUND, FORBIDDEN (a share). */
  async release(principal: string, leaseId: string): Promise<LeaseView> {
    const { row, access } = this.visible(principal, leaseId);
    if (access !== "owner") throw new BeachballError("FORBIDDEN", "only the owner may release a lease");
    if (row.endedAtMs === null) this.end(row, "released", "RELEASED");
    await this.releaseVm(row);
    return this.get(principal, leaseId);
  }

  /** The owner shares the lease with `principal` (read or use) or takes it back (access null). Throws NOT_FOUND, FORBIDDEN, VALIDATION_FAILED (no such principal, too many shares). */
  share(owner: string, leaseId: string, principal: string, access: LeaseAccess | null): LeaseView {
    const { row, access: mine } = this.visible(owner, leaseId);
    if (mine !== "owner") throw new BeachballError("FORBIDDEN", "only the owner may share a lease");
    // A share can always be taken back, even from a principal the manifest no longer names.
    if (
      (access !== null && !this.env.config.manifest.principals.some((p) => p.id === principal)) ||
      principal === owner
    )
      throw new BeachballError(
        "VALIDATION_FAILED",
        `/principal: no other principal ${JSON.stringify(principal)} in the manifest`,
      );
    const shares = JSON.parse(row.sharesJson) as Record<string, LeaseAccess>;
    if (access === null) delete shares[principal];
    else shares[principal] = access;
    if (Object.keys(shares).length > MAX_LEASE_SHARES)
      throw new BeachballError("VALIDATION_FAILED", `a lease is shared with at most ${MAX_LEASE_SHARES} principals`);
    const ev = { type: access ? "lease.shared" : "lease.unshared", data: { principal, ...(access ? { access } : {}) } };
    return this.update(row, { sharesJson: JSON.stringify(shares) }, ev, owner);
  }

  override onInbox(): void {
    const msgs = this.state.readInbox();
    if (msgs.length === 0) return;
    this.state.storage.transactionSync(() => {
      for (const { message: m } of msgs) {
        const row = [...this.open().values()].find((r) => r.allocationId === m.allocationId);
        if (!row) continue;
        // Activity counts only before the deadline it would move (a grant after the idle end revives nothing).
        if (m.kind === "activity") {
          if (m.atMs < leaseDeadline(row).atMs)
            this.write(row, { lastActivityAtMs: Math.max(row.lastActivityAtMs, m.atMs) }, null);
        } else this.end(row, "expired", "VM_ENDED");
      }
      this.state.ackInbox(msgs[msgs.length - 1]!.seq);
      this.arm();
    });
  }

  /** Ends the leases whose deadline passed (releasing their VMs) and warns those about to end. */
  override async alarm(): Promise<void> {
    this.onInbox();
    const now = this.now;
    const ended: LeaseRow[] = [];
    this.state.storage.transactionSync(() => {
      for (const r of [...this.open().values()]) {
        const d = leaseDeadline(r);
        if (now >= d.atMs) {
          this.end(r, "expired", d.reason);
          ended.push(r);
        } else if (now >= expiringSoonAt(r, r.createdAtMs) && r.warnedForMs !== d.atMs)
          this.write(
            r,
            { warnedForMs: d.atMs },
            { type: "lease.expiring_soon", data: { at: iso(d.atMs), reason: d.reason } },
          );
      }
      this.arm();
    });
    for (const r of [...ended, ...this.unreleased.values()]) await this.releaseVm(r);
  }

  private visible(principal: string, leaseId: string): { row: LeaseRow; access: "owner" | LeaseAccess } {
    const row = this.open().get(leaseId) ?? this.q.one.get({ obj: this.state.name, leaseId });
    const access = row
      ? leaseAccess(row.owner, JSON.parse(row.sharesJson) as Record<string, LeaseAccess>, principal)
      : null;
    if (!row || !access) throw new BeachballError("NOT_FOUND", "no such lease");
    return { row, access };
  }

  /** A lease the caller may use now: active, under every cap. */
  private async usable(principal: string, leaseId: string): Promise<LeaseRow> {
    this.onInbox();
    const { row, access } = this.visible(principal, leaseId);
    if (access === "read") throw new BeachballError("FORBIDDEN", "this lease is shared with you to read only");
    // A deadline that passed ends the lease now, whatever the alarm's timing.
    if (row.endedAtMs === null && this.now >= leaseDeadline(row).atMs) {
      this.state.storage.transactionSync(() => this.end(row, "expired", leaseDeadline(row).reason));
      await this.releaseVm(row);
    }
    const cur = this.open().get(leaseId);
    if (!cur) throw new BeachballError("LEASE_ENDED", `the lease ended (${row.reason ?? "expired"}); make a new one`);
    this.checkActiveCap(cur.owner, 1);
    const budget = this.env.config.manifest.principals.find((p) => p.id === cur.owner)?.monthlyBudget;
    if (budget !== undefined) await this.env.Usage.get(GLOBAL).checkBudget(cur.owner, Math.round(budget * 1e6));
    // It may have ended while the budget was checked (a release, the alarm, its VM's end): never write a stale row back.
    const after = this.open().get(leaseId);
    if (!after) throw new BeachballError("LEASE_ENDED", "the lease ended; make a new one");
    return after;
  }

  private checkActiveCap(owner: string, counted: number): void {
    const cap = this.env.config.manifest.limits.maxActiveLeasesPerController ?? 50;
    const active =
      [...this.open().values()].filter((r) => r.owner === owner).length +
      [...this.creating].filter((k) => k.startsWith(`${owner}\u0000`)).length;
    if (active - counted >= cap)
      throw new BeachballError("QUOTA_ACTIVE_LEASES", `you hold ${active} active leases; the limit is ${cap}`, {
        limit: cap,
      });
  }

  private update(
    row: LeaseRow,
    patch: Partial<LeaseRow>,
    ev: { type: string; data?: Record<string, unknown> } | null,
    principal: string,
  ): LeaseView {
    const next = this.state.storage.transactionSync(() => {
      const n = this.write(row, patch, ev);
      this.arm();
      return n;
    });
    return viewOf(
      next,
      leaseAccess(next.owner, JSON.parse(next.sharesJson) as Record<string, LeaseAccess>, principal)!,
    );
  }

  /** Writes `patch` (and an event) over the row; inside a transaction. */
  private write(
    row: LeaseRow,
    patchIn: Partial<LeaseRow>,
    ev: { type: string; data?: Record<string, unknown> } | null,
  ): LeaseRow {
    let patch = patchIn;
    const stored = this.open().get(row.leaseId) ?? this.q.one.get({ obj: this.state.name, leaseId: row.leaseId });
    // An ended lease stays ended: only its shares (and nothing else) may still change, and a stale write is dropped.
    if (stored && stored.endedAtMs !== null) {
      patch = pickShares(patch);
      if (patch.sharesJson === undefined) return stored;
    }
    const next = { ...(stored ?? row), ...patch };
    dbFor(this.state.storage)
      .update(t)
      .set(patch)
      .where(and(eq(t.obj, this.state.name), eq(t.leaseId, row.leaseId)))
      .run();
    if (ev) this.event(row.leaseId, ev.type, ev.data);
    if (next.endedAtMs === null) this.open().set(row.leaseId, next);
    else this.open().delete(row.leaseId);
    return next;
  }

  private end(row: LeaseRow, state: "expired" | "released", reason: string): void {
    this.write(
      row,
      { state, reason, endedAtMs: this.now },
      { type: state === "released" ? "lease.released" : "lease.expired", data: { reason } },
    );
  }

  private async releaseVm(row: LeaseRow): Promise<void> {
    this.unreleased.delete(row.leaseId);
    await this.env.Allocation.get(row.allocationId)
      .release(row.owner)
      .then(() => undefined)
      .catch((e: unknown) => {
        this.unreleased.set(row.leaseId, row);
        this.state.storage.transactionSync(() =>
          this.state.setAlarm(Math.min(this.state.getAlarm() ?? Infinity, this.now + 5_000)),
        );
        this.env.log.warn("lease release not done", {
          leaseId: row.leaseId,
          code: e instanceof BeachballError ? e.code : String(e),
        });
      });
  }

  private event(leaseId: string, type: string, data?: Record<string, unknown>): void {
    let seq = this.eventSeq.get(leaseId);
    if (seq === undefined) seq = this.q.lastEvent.get({ obj: this.state.name, leaseId })?.m ?? 0;
    this.eventSeq.set(leaseId, ++seq);
    this.q.insertEvent.run({
      obj: this.state.name,
      leaseId,
      seq,
      type,
      atMs: this.now,
      dataJson: data ? JSON.stringify(data) : null,
    });
  }

  /** The alarm at the next deadline or warning of an open lease. */
  private arm(): void {
    let at: number | null = null;
    for (const r of this.open().values()) {
      const d = leaseDeadline(r);
      const warn = expiringSoonAt(r, r.createdAtMs);
      const next = r.warnedForMs !== d.atMs && warn < d.atMs ? warn : d.atMs;
      at = at === null ? next : Math.min(at, next);
    }
    if (this.unreleased.size > 0) at = Math.min(at ?? Number.POSITIVE_INFINITY, this.now + 5_000);
    this.state.setAlarm(at === null ? null : Math.max(at, this.now));
  }
}
