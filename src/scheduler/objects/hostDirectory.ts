/**
 * The host directory: a rebuildable cache of Host advertisements, served
 * from memory, that picks candidates (spec "Placement: choosing a host"),
 * and the queue of allocations waiting for capacity (issue "Freed capacity
 * sits idle while work waits"). Not an authority: the Host's reservation is
 * the only place capacity is consumed; a stale hint can only cause a
 * rejected reservation.
 *
 * An allocation that finds no candidate is registered as a waiter (in the
 * same call). When an advertisement shows capacity a host did not have
 * before (free resources grew, or the host became schedulable), the oldest
 * waiters that now fit are woken by message, oldest first, and the host's
 * hint is debited for each, so a request that arrives later does not take
 * the capacity from an older one.
 * Must never: let an older revision overwrite a newer one, or call an
 * Allocation (wake-ups travel by message).
 */
import { and, eq, lt, sql } from "drizzle-orm";
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { fromExcluded, placeholders, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import { add, sub, type Resources } from "../../domain/capacity.ts";
import {
  explainNoCandidate,
  filterReason,
  rankCandidates,
  supersedes,
  type Advertisement,
  type NoCandidateExplanation,
  type PlacementRequest,
} from "../../domain/placement.ts";
import { healthFromHeartbeat } from "../../domain/health.ts";
import type { CandidateAnswer } from "../../domain/reconcile.ts";
import type { SchedulerEnv } from "../env.ts";
import { DirectoryMessage, AdvertisementSchema } from "./messages.ts";
import { DIRECTORY_TABLES, directoryAdTable, directoryWaiterTable } from "./hostDirectorySchema.ts";
import { checkerOf } from "../runtime/check.ts";
import { Type } from "@sinclair/typebox";

/** Advertisements older than this are dropped, ms (spec: 24 hours). */
export const AD_MAX_AGE_MS = 24 * 3600_000;
/** Most candidates ranked for one placement round (the allocation tries the first). */
export const MAX_CANDIDATES = 8;
/** Most waiters one advertisement wakes. */
export const MAX_WAKES_PER_AD = 64;
/** Most allocations waiting for capacity at once (each is a pending allocation; admission bounds those). */
export const MAX_WAITERS = 200_000;
/**
 * Longest a host's stored advertisement lags the one in memory, ms: the
 * copy on disk only seeds the cache after a restart (hosts re-advertise on
 * their next heartbeat), so it is rewritten at most this often per host.
 */
export const AD_PERSIST_MS = 5_000;
/** How long a woken allocation keeps first claim on the host that woke it, ms. */
export const EARMARK_MS = 10_000;

/** A placement request as an Allocation sends it (plain data: it crosses an RPC). */
export interface CandidateRequest extends Omit<PlacementRequest, "exclude"> {
  /** Hosts already asked this round. */
  exclude: string[];
  /** Register as a waiter when no host fits: creation time (age order) and when the wait ends. */
  waiter?: { createdAtMs: number; untilMs: number };
}

interface Waiter {
  allocationId: string;
  createdAtMs: number;
  untilMs: number;
  req: PlacementRequest;
  shape: string;
}

const WaiterRequest = Type.Object({
  resources: Type.Object({
    cpuMillis: Type.Integer(),
    memoryMiB: Type.Integer(),
    ephemeralDiskMiB: Type.Integer(),
    slots: Type.Integer(),
  }),
  imageDigest: Type.String(),
  architecture: Type.String(),
  regions: Type.Union([Type.Array(Type.String()), Type.Null()]),
  requiredLabels: Type.Record(Type.String(), Type.String()),
  agentProtocolVersion: Type.String(),
  onlyHost: Type.Optional(Type.String()),
});

const queries = (db: ObjectDb) => {
  const obj = sql.placeholder("obj");
  return {
    ads: db.select().from(directoryAdTable).where(eq(directoryAdTable.obj, obj)).prepare(),
    waiters: db.select().from(directoryWaiterTable).where(eq(directoryWaiterTable.obj, obj)).prepare(),
    deleteWaiter: db
      .delete(directoryWaiterTable)
      .where(and(eq(directoryWaiterTable.obj, obj), eq(directoryWaiterTable.allocationId, sql.placeholder("id"))))
      .prepare(),
    upsertAd: db
      .insert(directoryAdTable)
      .values({ obj, ...placeholders("hostId", "revision", "adJson", "receivedAtMs") })
      .onConflictDoUpdate({
        target: [directoryAdTable.obj, directoryAdTable.hostId],
        set: fromExcluded(directoryAdTable, "revision", "adJson", "receivedAtMs"),
      })
      .prepare(),
    /** A waiter's row replaced whole (as INSERT OR REPLACE did: the table has no other unique key). */
    putWaiter: db
      .insert(directoryWaiterTable)
      .values({ obj, ...placeholders("allocationId", "createdAtMs", "untilMs", "requestJson") })
      .onConflictDoUpdate({
        target: [directoryWaiterTable.obj, directoryWaiterTable.allocationId],
        set: fromExcluded(directoryWaiterTable, "createdAtMs", "untilMs", "requestJson"),
      })
      .prepare(),
    dropAdsBefore: db
      .delete(directoryAdTable)
      .where(and(eq(directoryAdTable.obj, obj), lt(directoryAdTable.receivedAtMs, sql.placeholder("cutoff"))))
      .prepare(),
  };
};

/** The request part that decides fit (waiters with the same shape queue together). */
function shapeOf(req: Omit<PlacementRequest, "allocationId" | "exclude">): string {
  return JSON.stringify([
    req.resources,
    req.imageDigest,
    req.architecture,
    req.regions,
    req.requiredLabels,
    req.agentProtocolVersion,
    req.onlyHost ?? null,
  ]);
}

/** True if a host could take work at `nowMs` regardless of the request's size. */
function usable(ad: Advertisement, nowMs: number): boolean {
  return (
    ad.adminState === "active" &&
    ad.isolationHealthy &&
    ad.unschedulable.length === 0 &&
    healthFromHeartbeat(ad.heartbeatAtMs, nowMs) === "healthy"
  );
}

/** True if `next` offers capacity `prev` did not (the event that wakes waiters). */
function gained(prev: Advertisement | undefined, next: Advertisement, prevUsable: boolean, nowMs: number): boolean {
  if (!usable(next, nowMs)) return false;
  if (!prev || !prevUsable) return true;
  const a = prev.free;
  const b = next.free;
  return (
    b.slots > a.slots ||
    b.cpuMillis > a.cpuMillis ||
    b.memoryMiB > a.memoryMiB ||
    b.ephemeralDiskMiB > a.ephemeralDiskMiB
  );
}

/** See the module header. */
export class HostDirectoryObject extends AuthorityObject<SchedulerEnv, DirectoryMessage> {
  static readonly className = "HostDirectory";
  static readonly messageSchema = DirectoryMessage;
  static readonly tables = DIRECTORY_TABLES;

  private readonly q = prepared(this.state.storage, queries);
  private ads: Map<string, Advertisement> | undefined;
  /** Waiters by allocation, and per shape in age order. */
  private readonly waiting = new Map<string, Waiter>();
  private readonly queues = new Map<string, Waiter[]>();
  private readonly earmarks = new Map<string, { hostId: string; untilMs: number; resources: Resources }>();
  /** Cached explanations per shape, valid until the next advertisement. */
  private readonly explained = new Map<string, NoCandidateExplanation>();
  /** When each host's advertisement was last written, ms. */
  private readonly persistedAt = new Map<string, number>();

  constructor(state: ObjectState<DirectoryMessage>, env: SchedulerEnv) {
    super(state, env);
  }

  private load(): Map<string, Advertisement> {
    if (this.ads) return this.ads;
    const ads = new Map<string, Advertisement>();
    const now = this.env.clock.wallMs();
    for (const r of this.q.ads.all({ obj: this.state.name })) {
      if (now - r.receivedAtMs > AD_MAX_AGE_MS) continue;
      const ad: unknown = JSON.parse(r.adJson);
      if (checkerOf(AdvertisementSchema)(ad)) ads.set(ad.hostId, ad);
    }
    for (const w of this.q.waiters.all({ obj: this.state.name })) {
      const req: unknown = JSON.parse(w.requestJson);
      if (!checkerOf(WaiterRequest)(req)) continue;
      this.enqueue({
        allocationId: w.allocationId,
        createdAtMs: w.createdAtMs,
        untilMs: w.untilMs,
        req: { ...req, allocationId: w.allocationId, exclude: new Set() },
        shape: shapeOf(req),
      });
    }
    this.ads = ads;
    this.state.setAlarm(now + 3600_000);
    return ads;
  }

  private enqueue(w: Waiter): void {
    this.waiting.set(w.allocationId, w);
    let q = this.queues.get(w.shape);
    if (!q) this.queues.set(w.shape, (q = []));
    let i = q.length;
    while (
      i > 0 &&
      (q[i - 1]!.createdAtMs > w.createdAtMs ||
        (q[i - 1]!.createdAtMs === w.createdAtMs && q[i - 1]!.allocationId > w.allocationId))
    )
      i--;
    q.splice(i, 0, w);
  }

  private dequeue(allocationId: string): void {
    const w = this.waiting.get(allocationId);
    if (!w) return;
    this.waiting.delete(allocationId);
    const q = this.queues.get(w.shape);
    const i = q ? q.indexOf(w) : -1;
    if (q && i >= 0) q.splice(i, 1);
    if (q && q.length === 0) this.queues.delete(w.shape);
    this.q.deleteWaiter.run({ obj: this.state.name, id: allocationId });
  }

  /** Applies pending advertisements (newer revisions only) and wakes waiters for capacity they show. */
  override onInbox(): void {
    const ads = this.load();
    const msgs = this.state.readInbox();
    if (msgs.length === 0) return;
    const now = this.env.clock.wallMs();
    this.state.storage.transactionSync(() => {
      for (const { message } of msgs) {
        const ad = message.ad;
        const prev = ads.get(ad.hostId);
        if (!supersedes(prev, ad)) continue;
        const prevUsable = prev !== undefined && usable(prev, now);
        ads.set(ad.hostId, ad);
        this.explained.clear();
        if (this.waiting.size > 0 && gained(prev, ad, prevUsable, now)) this.wake(ad, now);
        if (now - (this.persistedAt.get(ad.hostId) ?? 0) < AD_PERSIST_MS) continue;
        this.persistedAt.set(ad.hostId, now);
        this.q.upsertAd.run({
          obj: this.state.name,
          hostId: ad.hostId,
          revision: ad.revision,
          adJson: JSON.stringify(ad),
          receivedAtMs: now,
        });
      }
      this.state.ackInbox(msgs[msgs.length - 1]!.seq);
    });
  }

  /** Wakes the oldest waiters that fit `ad`, debiting its hint for each (bounded by MAX_WAKES_PER_AD). */
  private wake(ad: Advertisement, now: number): void {
    for (let n = 0; n < MAX_WAKES_PER_AD; n++) {
      let oldest: Waiter | undefined;
      for (const q of this.queues.values()) {
        while (q.length > 0 && q[0]!.untilMs < now) this.dequeue(q[0]!.allocationId);
        const head = q[0];
        if (!head || filterReason(ad, head.req, now) !== null) continue;
        if (
          !oldest ||
          head.createdAtMs < oldest.createdAtMs ||
          (head.createdAtMs === oldest.createdAtMs && head.allocationId < oldest.allocationId)
        )
          oldest = head;
      }
      if (!oldest) return;
      this.dequeue(oldest.allocationId);
      ad.free = sub(ad.free, oldest.req.resources);
      this.earmarks.set(oldest.allocationId, {
        hostId: ad.hostId,
        untilMs: now + EARMARK_MS,
        resources: oldest.req.resources,
      });
      this.state.post(
        this.env.Allocation,
        oldest.allocationId,
        `cap:${oldest.allocationId}:${ad.hostId}:${ad.revision}`,
        { kind: "capacity_available", hostId: ad.hostId },
      );
    }
  }

  /**
   * The best candidate host for a request, or, when none fits, why not
   * (counts per reason) after registering the allocation as a waiter if
   * asked. A woken allocation gets the host that woke it first. The chosen
   * host's hint is debited in memory only, so concurrent requests spread
   * instead of all trying the same host; its next advertisement replaces
   * the guess.
   */
  candidates(r: CandidateRequest): CandidateAnswer {
    const ads = this.load();
    this.onInbox();
    const now = this.env.clock.wallMs();
    const req: PlacementRequest = { ...r, exclude: new Set(r.exclude) };
    const mark = this.earmarks.get(r.allocationId);
    if (mark) {
      this.earmarks.delete(r.allocationId);
      const ad = ads.get(mark.hostId);
      if (ad && mark.untilMs >= now && filterReason({ ...ad, free: add(ad.free, mark.resources) }, req, now) === null) {
        this.dequeue(r.allocationId);
        return { hostId: ad.hostId, outcome: null };
      }
    }
    const ranked = rankCandidates(ads.values(), req, now, 1);
    const first = ranked[0];
    if (first) {
      first.free = sub(first.free, req.resources);
      this.dequeue(r.allocationId);
      return { hostId: first.hostId, outcome: null };
    }
    const shape = shapeOf(r);
    let why = r.exclude.length === 0 ? this.explained.get(shape) : undefined;
    if (!why) {
      why = explainNoCandidate(ads.values(), req, now);
      if (r.exclude.length === 0) this.explained.set(shape, why);
    }
    if (r.waiter && !this.waiting.has(r.allocationId) && this.waiting.size < MAX_WAITERS) {
      const { allocationId, exclude: _x, waiter: _w, ...rest } = r;
      const w: Waiter = {
        allocationId,
        createdAtMs: r.waiter.createdAtMs,
        untilMs: r.waiter.untilMs,
        req: { ...rest, allocationId, exclude: new Set() },
        shape,
      };
      this.q.putWaiter.run({
        obj: this.state.name,
        allocationId,
        createdAtMs: w.createdAtMs,
        untilMs: w.untilMs,
        requestJson: JSON.stringify({
          resources: rest.resources,
          imageDigest: rest.imageDigest,
          architecture: rest.architecture,
          regions: rest.regions,
          requiredLabels: rest.requiredLabels,
          agentProtocolVersion: rest.agentProtocolVersion,
        }),
      });
      this.enqueue(w);
    }
    return { hostId: null, outcome: why };
  }

  /** Removes an allocation from the waiters (it stopped waiting: released or failed while pending). Idempotent. */
  cancelWait(allocationId: string): void {
    this.load();
    this.dequeue(allocationId);
    this.earmarks.delete(allocationId);
  }

  /** Allocations waiting for capacity, oldest first (for operators and tests). */
  waiters(): { allocationId: string; createdAtMs: number }[] {
    this.load();
    return [...this.waiting.values()]
      .sort((a, b) => a.createdAtMs - b.createdAtMs || (a.allocationId < b.allocationId ? -1 : 1))
      .map((w) => ({ allocationId: w.allocationId, createdAtMs: w.createdAtMs }));
  }

  /** Hourly: drops advertisements older than AD_MAX_AGE_MS and expired waiters (spec "Observability and retention"). */
  override alarm(): void {
    const ads = this.load();
    const now = this.env.clock.wallMs();
    this.state.storage.transactionSync(() => {
      this.q.dropAdsBefore.run({ obj: this.state.name, cutoff: now - AD_MAX_AGE_MS });
      for (const [id, ad] of ads)
        if (ad.heartbeatAtMs !== null && now - ad.heartbeatAtMs > AD_MAX_AGE_MS) ads.delete(id);
      for (const w of [...this.waiting.values()]) if (w.untilMs < now) this.dequeue(w.allocationId);
      this.state.setAlarm(now + 3600_000);
    });
  }
}
