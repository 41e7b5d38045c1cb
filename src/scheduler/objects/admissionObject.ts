/**
 * The admission object (spec "Admission and limits"): refuses work before the
 * deployment exceeds a limit it declared. This release enforces the
 * per-controller concurrent-allocation limit and the registered-host cap.
 * Must never: count one allocation twice (admission is idempotent by ID).
 */
import { AuthorityObject } from "../runtime/objectRuntime.ts";
import { BeachballError } from "../../protocol/errors.ts";

/** See the module header. */
export class AdmissionObject extends AuthorityObject {
  static readonly className = "Admission";

  constructor(ctx: ConstructorParameters<typeof AuthorityObject>[0]) {
    super(ctx);
    ctx.sql.exec(`CREATE TABLE IF NOT EXISTS active (allocation_id TEXT PRIMARY KEY, identity TEXT NOT NULL, admitted_at_ms INTEGER NOT NULL);
      CREATE INDEX IF NOT EXISTS active_identity ON active (identity);
      CREATE TABLE IF NOT EXISTS hosts (host_id TEXT PRIMARY KEY, registered_at_ms INTEGER NOT NULL);`);
  }

  /** Admits an allocation for `identity`; throws QUOTA_CONCURRENT_ALLOCATIONS (409) over `limit`. */
  admit(identity: string, allocationId: string, limit: number): void {
    this.release();
    if (this.ctx.sql.query("SELECT 1 FROM active WHERE allocation_id = ?").get(allocationId)) return;
    const n = this.ctx.sql.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM active WHERE identity = ?").get(identity)?.n ?? 0;
    if (n >= limit) throw new BeachballError("QUOTA_CONCURRENT_ALLOCATIONS", `controller has ${n} active allocations (limit ${limit})`, { limit });
    this.ctx.sql.query("INSERT INTO active (allocation_id, identity, admitted_at_ms) VALUES (?, ?, ?)").run(allocationId, identity, this.ctx.clock.now());
  }

  /** Applies `allocation_terminal` inbox messages: the allocation no longer counts. */
  release(): void {
    const msgs = this.ctx.readInbox();
    if (msgs.length === 0) return;
    this.ctx.sql.transaction(() => {
      for (const m of msgs) if (m.kind === "allocation_terminal") this.ctx.sql.query("DELETE FROM active WHERE allocation_id = ?").run((m.body as { allocationId: string }).allocationId);
      this.ctx.ackInbox(msgs[msgs.length - 1]!.seq);
    })();
  }

  override onInbox(): void {
    this.release();
  }

  /** Reserves a registered-host slot (idempotent); throws QUOTA_REGISTERED_HOSTS past `maxHosts`. */
  admitHost(hostId: string, maxHosts: number): void {
    if (this.ctx.sql.query("SELECT 1 FROM hosts WHERE host_id = ?").get(hostId)) return;
    const n = this.ctx.sql.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM hosts").get()?.n ?? 0;
    if (n >= maxHosts) throw new BeachballError("QUOTA_CONCURRENT_ALLOCATIONS", `deployment has ${n} registered hosts (limit ${maxHosts})`, { limit: maxHosts });
    this.ctx.sql.query("INSERT INTO hosts (host_id, registered_at_ms) VALUES (?, ?)").run(hostId, this.ctx.clock.now());
  }
}
