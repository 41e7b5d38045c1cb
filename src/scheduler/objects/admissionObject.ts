/**
 * The admission object (spec "Admission and limits"): refuses work before the
 * deployment exceeds a limit it declared: per-controller and deployment-wide
 * request rates (token buckets, 429 with Retry-After), per-controller and
 * deployment-wide concurrent allocations and the retained-record cap (409
 * with a stable quota code), and the registered and active host caps.
 * Rate buckets live in memory (a restart refills them); counts are durable
 * rows, kept as counters in memory once read.
 * Must never: count one allocation twice (admission is idempotent by ID).
 */
import { and, eq, sql } from "drizzle-orm";
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { param, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import { BeachballError } from "../../protocol/errors.ts";
import type { SchedulerEnv } from "../env.ts";
import { AdmissionMessage } from "./messages.ts";
import { admissionAllocationTable, admissionHostTable } from "./singletonSchema.ts";

/** Limits admission enforces (resolved from the manifest with defaults). */
export interface AdmissionLimits {
  perControllerConcurrent: number;
  perControllerRps: number;
  deploymentRps: number;
  maxAllocations: number;
  maxRetained: number;
}

/** A token bucket: `rate` tokens per second, burst of 2 s worth (also the RunQueue's submit rate). */
export class Bucket {
  private tokens: number;
  private at: number;
  constructor(
    private readonly rate: number,
    now: number,
  ) {
    this.tokens = Math.max(1, rate * 2);
    this.at = now;
  }
  /** Takes one token; returns 0 on success or the seconds until one is available. */
  take(now: number): number {
    this.tokens = Math.min(Math.max(1, this.rate * 2), this.tokens + ((now - this.at) / 1000) * this.rate);
    this.at = now;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return 0;
    }
    return Math.ceil((1 - this.tokens) / this.rate);
  }
}

/** Most controller buckets kept in memory. */
const MAX_BUCKETS = 10_000;

interface Counts {
  /** Allocation ID → identity, for the active ones. */
  active: Map<string, string>;
  activeByIdentity: Map<string, number>;
  retained: Set<string>;
  hosts: Map<string, boolean>;
}

const queries = (db: ObjectDb) => {
  const obj = sql.placeholder("obj");
  const a = admissionAllocationTable;
  const h = admissionHostTable;
  const allocation = and(eq(a.obj, obj), eq(a.allocationId, sql.placeholder("id")));
  return {
    allocations: db.select().from(admissionAllocationTable).where(eq(admissionAllocationTable.obj, obj)).prepare(),
    hosts: db.select().from(admissionHostTable).where(eq(admissionHostTable.obj, obj)).prepare(),
    admit: db
      .insert(a)
      .values({
        obj,
        allocationId: sql.placeholder("id"),
        identity: sql.placeholder("identity"),
        active: true,
        admittedAtMs: sql.placeholder("now"),
      })
      .prepare(),
    inactive: db.update(a).set({ active: false }).where(allocation).prepare(),
    forget: db.delete(a).where(allocation).prepare(),
    registerHost: db
      .insert(h)
      .values({ obj, hostId: sql.placeholder("hostId"), registeredAtMs: sql.placeholder("now"), active: false })
      .prepare(),
    setHostActive: db
      .update(h)
      .set({ active: param<boolean>("active") })
      .where(and(eq(h.obj, obj), eq(h.hostId, sql.placeholder("hostId"))))
      .prepare(),
  };
};

/** See the module header. */
export class AdmissionObject extends AuthorityObject<SchedulerEnv, AdmissionMessage> {
  static readonly className = "Admission";
  static readonly messageSchema = AdmissionMessage;
  static readonly tables = ["admission_allocations", "admission_hosts"] as const;

  private readonly q = prepared(this.state.storage, queries);
  private readonly buckets = new Map<string, Bucket>();
  private loaded: Counts | undefined;

  constructor(state: ObjectState<AdmissionMessage>, env: SchedulerEnv) {
    super(state, env);
  }

  private counts(): Counts {
    if (this.loaded) return this.loaded;
    const c: Counts = { active: new Map(), activeByIdentity: new Map(), retained: new Set(), hosts: new Map() };
    for (const r of this.q.allocations.all({ obj: this.state.name })) {
      c.retained.add(r.allocationId);
      if (r.active) {
        c.active.set(r.allocationId, r.identity);
        c.activeByIdentity.set(r.identity, (c.activeByIdentity.get(r.identity) ?? 0) + 1);
      }
    }
    for (const h of this.q.hosts.all({ obj: this.state.name })) c.hosts.set(h.hostId, h.active);
    this.loaded = c;
    return c;
  }

  private rate(key: string, rps: number): void {
    const now = this.env.clock.wallMs();
    let b = this.buckets.get(key);
    if (!b) {
      if (this.buckets.size >= MAX_BUCKETS) this.buckets.delete(this.buckets.keys().next().value!);
      b = new Bucket(rps, now);
      this.buckets.set(key, b);
    }
    const wait = b.take(now);
    if (wait > 0)
      throw new BeachballError(
        "RATE_LIMITED",
        `${key === "*" ? "deployment" : "controller"} request rate over ${rps}/s`,
        { retryAfterSeconds: wait },
      );
  }

  /**
   * Admits a new allocation for `identity`. Idempotent by allocation ID:
   * returns `admittedBefore` true when it was admitted (and not purged)
   * earlier. Throws RATE_LIMITED (429), QUOTA_CONCURRENT_ALLOCATIONS,
   * QUOTA_DEPLOYMENT_ALLOCATIONS or QUOTA_RETAINED_RECORDS (409).
   */
  admit(identity: string, allocationId: string, limits: AdmissionLimits): { admittedBefore: boolean } {
    this.applyInbox();
    const c = this.counts();
    if (c.retained.has(allocationId)) return { admittedBefore: true };
    this.rate(`c:${identity}`, limits.perControllerRps);
    this.rate("*", limits.deploymentRps);
    const mine = c.activeByIdentity.get(identity) ?? 0;
    if (mine >= limits.perControllerConcurrent)
      throw new BeachballError(
        "QUOTA_CONCURRENT_ALLOCATIONS",
        `controller has ${mine} active allocations (limit ${limits.perControllerConcurrent})`,
        { limit: limits.perControllerConcurrent },
      );
    if (c.active.size >= limits.maxAllocations)
      throw new BeachballError(
        "QUOTA_DEPLOYMENT_ALLOCATIONS",
        `deployment has ${c.active.size} active allocations (limit ${limits.maxAllocations})`,
        { limit: limits.maxAllocations },
      );
    if (c.retained.size >= limits.maxRetained)
      throw new BeachballError(
        "QUOTA_RETAINED_RECORDS",
        `deployment retains ${c.retained.size} allocation records (limit ${limits.maxRetained})`,
        { limit: limits.maxRetained },
      );
    this.q.admit.run({ obj: this.state.name, id: allocationId, identity, now: this.env.clock.wallMs() });
    c.retained.add(allocationId);
    c.active.set(allocationId, identity);
    c.activeByIdentity.set(identity, mine + 1);
    return { admittedBefore: false };
  }

  /** Applies inbox messages: a terminal allocation no longer counts as active; a purged one no longer as retained. */
  private applyInbox(): void {
    const msgs = this.state.readInbox();
    if (msgs.length === 0) return;
    const c = this.counts();
    this.state.storage.transactionSync(() => {
      for (const { message: m } of msgs) {
        const row = { obj: this.state.name, id: m.allocationId };
        if (m.kind === "allocation_terminal") this.q.inactive.run(row);
        else this.q.forget.run(row);
      }
      this.state.ackInbox(msgs[msgs.length - 1]!.seq);
    });
    for (const { message: m } of msgs) {
      const identity = c.active.get(m.allocationId);
      if (identity !== undefined) {
        c.active.delete(m.allocationId);
        c.activeByIdentity.set(identity, (c.activeByIdentity.get(identity) ?? 1) - 1);
      }
      if (m.kind === "allocation_purged") c.retained.delete(m.allocationId);
    }
  }

  override onInbox(): void {
    this.applyInbox();
  }

  /** Gates host activation against the active-host cap (idempotent). Throws QUOTA_ACTIVE_HOSTS. */
  admitActiveHost(hostId: string, maxActive: number): void {
    const c = this.counts();
    if (c.hosts.get(hostId) === true) return;
    let n = 0;
    for (const a of c.hosts.values()) if (a) n++;
    if (n >= maxActive)
      throw new BeachballError("QUOTA_ACTIVE_HOSTS", `deployment has ${n} active hosts (limit ${maxActive})`, {
        limit: maxActive,
      });
    this.q.setHostActive.run({ obj: this.state.name, hostId, active: 1 });
    if (c.hosts.has(hostId)) c.hosts.set(hostId, true);
  }

  /**
   * Records whether a registered host is in the active set, as its Host
   * object reports it after an admin change (no cap check: admitActiveHost
   * gates activation before the change; this makes the count match the
   * state whatever the change's outcome).
   */
  setHostActive(hostId: string, active: boolean): void {
    const c = this.counts();
    this.q.setHostActive.run({ obj: this.state.name, hostId, active: active ? 1 : 0 });
    if (c.hosts.has(hostId)) c.hosts.set(hostId, active);
  }

  /** The hosts counted as active, sorted (for checks that counters match host states). */
  activeHostIds(): string[] {
    return [...this.counts().hosts.entries()]
      .filter(([, a]) => a)
      .map(([id]) => id)
      .sort();
  }

  /** Reserves a registered-host slot (idempotent); throws QUOTA_REGISTERED_HOSTS past `maxHosts`. */
  admitHost(hostId: string, maxHosts: number): void {
    const c = this.counts();
    if (c.hosts.has(hostId)) return;
    if (c.hosts.size >= maxHosts)
      throw new BeachballError(
        "QUOTA_REGISTERED_HOSTS",
        `deployment has ${c.hosts.size} registered hosts (limit ${maxHosts})`,
        { limit: maxHosts },
      );
    this.q.registerHost.run({ obj: this.state.name, hostId, now: this.env.clock.wallMs() });
    c.hosts.set(hostId, false);
  }

  /** IDs of every registered host (for the operators' host list). */
  hostIds(): string[] {
    return [...this.counts().hosts.keys()].sort();
  }
}
