/**
 * The admission object (spec "Admission and limits"): refuses work before the
 * deployment exceeds a limit it declared: per-controller and deployment-wide
 * request rates (token buckets, 429 with Retry-After), per-controller and
 * deployment-wide concurrent allocations and the retained-record cap (409
 * with a stable quota code), and the registered and active host caps.
 * Rate buckets live in memory (a restart refills them); counts are durable.
 * Must never: count one allocation twice (admission is idempotent by ID).
 */
import { AuthorityObject } from "../runtime/objectRuntime.ts";
import { BeachballError } from "../../protocol/errors.ts";

/** Limits admission enforces (resolved from the manifest with defaults). */
export interface AdmissionLimits {
  perControllerConcurrent: number;
  perControllerRps: number;
  deploymentRps: number;
  maxAllocations: number;
  maxRetained: number;
}

/** A token bucket: `rate` tokens per second, burst of 2 s worth. */
class Bucket {
  private tokens: number;
  private at: number;
  constructor(private readonly rate: number, now: number) {
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

/** See the module header. */
export class AdmissionObject extends AuthorityObject {
  static readonly className = "Admission";

  constructor(ctx: ConstructorParameters<typeof AuthorityObject>[0]) {
    super(ctx);
    ctx.sql.exec(`CREATE TABLE IF NOT EXISTS active (allocation_id TEXT PRIMARY KEY, identity TEXT NOT NULL, admitted_at_ms INTEGER NOT NULL);
      CREATE INDEX IF NOT EXISTS active_identity ON active (identity);
      CREATE TABLE IF NOT EXISTS retained (allocation_id TEXT PRIMARY KEY);
      CREATE TABLE IF NOT EXISTS hosts (host_id TEXT PRIMARY KEY, registered_at_ms INTEGER NOT NULL, active INTEGER NOT NULL DEFAULT 0);`);
  }

  private readonly buckets = new Map<string, Bucket>();

  private rate(key: string, rps: number): void {
    const now = this.ctx.clock.now();
    let b = this.buckets.get(key);
    if (!b) {
      if (this.buckets.size >= MAX_BUCKETS) this.buckets.delete(this.buckets.keys().next().value!);
      b = new Bucket(rps, now);
      this.buckets.set(key, b);
    }
    const wait = b.take(now);
    if (wait > 0) throw new BeachballError("RATE_LIMITED", `${key === "*" ? "deployment" : "controller"} request rate over ${rps}/s`, { retryAfterSeconds: wait });
  }

  /**
   * Admits a new allocation for `identity`. Idempotent by allocation ID.
   * Throws RATE_LIMITED (429), QUOTA_CONCURRENT_ALLOCATIONS,
   * QUOTA_DEPLOYMENT_ALLOCATIONS or QUOTA_RETAINED_RECORDS (409).
   */
  admit(identity: string, allocationId: string, limits: AdmissionLimits): void {
    this.release();
    if (this.ctx.sql.query("SELECT 1 FROM active WHERE allocation_id = ?").get(allocationId)) return;
    this.rate(`c:${identity}`, limits.perControllerRps);
    this.rate("*", limits.deploymentRps);
    const count = (sql: string, ...args: string[]) => this.ctx.sql.query<{ n: number }, string[]>(sql).get(...args)?.n ?? 0;
    const mine = count("SELECT COUNT(*) AS n FROM active WHERE identity = ?", identity);
    if (mine >= limits.perControllerConcurrent) throw new BeachballError("QUOTA_CONCURRENT_ALLOCATIONS", `controller has ${mine} active allocations (limit ${limits.perControllerConcurrent})`, { limit: limits.perControllerConcurrent });
    const all = count("SELECT COUNT(*) AS n FROM active");
    if (all >= limits.maxAllocations) throw new BeachballError("QUOTA_DEPLOYMENT_ALLOCATIONS", `deployment has ${all} active allocations (limit ${limits.maxAllocations})`, { limit: limits.maxAllocations });
    const kept = count("SELECT COUNT(*) AS n FROM retained");
    if (kept >= limits.maxRetained) throw new BeachballError("QUOTA_RETAINED_RECORDS", `deployment retains ${kept} allocation records (limit ${limits.maxRetained})`, { limit: limits.maxRetained });
    this.ctx.sql.transaction(() => {
      this.ctx.sql.query("INSERT INTO active (allocation_id, identity, admitted_at_ms) VALUES (?, ?, ?)").run(allocationId, identity, this.ctx.clock.now());
      this.ctx.sql.query("INSERT OR IGNORE INTO retained (allocation_id) VALUES (?)").run(allocationId);
    })();
  }

  /** Applies inbox messages: a terminal allocation no longer counts as active; a purged one no longer as retained. */
  release(): void {
    const msgs = this.ctx.readInbox();
    if (msgs.length === 0) return;
    this.ctx.sql.transaction(() => {
      for (const m of msgs) {
        const id = (m.body as { allocationId: string }).allocationId;
        if (m.kind === "allocation_terminal") this.ctx.sql.query("DELETE FROM active WHERE allocation_id = ?").run(id);
        if (m.kind === "allocation_purged") this.ctx.sql.query("DELETE FROM retained WHERE allocation_id = ?").run(id);
      }
      this.ctx.ackInbox(msgs[msgs.length - 1]!.seq);
    })();
  }

  /** Gates host activation against the active-host cap (idempotent). Throws QUOTA_ACTIVE_HOSTS. */
  admitActiveHost(hostId: string, maxActive: number): void {
    if (this.ctx.sql.query("SELECT 1 FROM hosts WHERE host_id = ? AND active = 1").get(hostId)) return;
    const n = this.ctx.sql.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM hosts WHERE active = 1").get()?.n ?? 0;
    if (n >= maxActive) throw new BeachballError("QUOTA_ACTIVE_HOSTS", `deployment has ${n} active hosts (limit ${maxActive})`, { limit: maxActive });
    this.ctx.sql.query("UPDATE hosts SET active = 1 WHERE host_id = ?").run(hostId);
  }

  /**
   * Records whether a registered host is in the active set, as its Host
   * object reports it after an admin change (no cap check: admitActiveHost
   * gates activation before the change; this makes the count match the
   * state whatever the change's outcome).
   */
  setHostActive(hostId: string, active: boolean): void {
    this.ctx.sql.query("UPDATE hosts SET active = ? WHERE host_id = ?").run(active ? 1 : 0, hostId);
  }

  /** The hosts counted as active, sorted (for checks that counters match host states). */
  activeHostIds(): string[] {
    return this.ctx.sql
      .query<{ host_id: string }, []>("SELECT host_id FROM hosts WHERE active = 1 ORDER BY host_id")
      .all()
      .map((r) => r.host_id);
  }

  override onInbox(): void {
    this.release();
  }

  /** Reserves a registered-host slot (idempotent); throws QUOTA_REGISTERED_HOSTS past `maxHosts`. */
  admitHost(hostId: string, maxHosts: number): void {
    if (this.ctx.sql.query("SELECT 1 FROM hosts WHERE host_id = ?").get(hostId)) return;
    const n = this.ctx.sql.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM hosts").get()?.n ?? 0;
    if (n >= maxHosts) throw new BeachballError("QUOTA_REGISTERED_HOSTS", `deployment has ${n} registered hosts (limit ${maxHosts})`, { limit: maxHosts });
    this.ctx.sql.query("INSERT INTO hosts (host_id, registered_at_ms) VALUES (?, ?)").run(hostId, this.ctx.clock.now());
  }
}
