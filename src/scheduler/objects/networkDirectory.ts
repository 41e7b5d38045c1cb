/**
 * The network directory (spec "Networks, addresses, and grants": "Each
 * Network receives a /64 from it, which the network directory assigns
 * sequentially"): one singleton that gives each Network the next free
 * subnet index of the deployment's ULA /48 (1, 2, 3, …; 0 is kept back)
 * and remembers it, so a Network keeps its /64 for good.
 * Calls nobody.
 * Must never: give two Networks one subnet, or derive a subnet from a
 * Network's identifier.
 */
import { and, asc, eq, max, sql } from "drizzle-orm";
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { placeholders, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import { BeachballError } from "../../protocol/errors.ts";
import { MAX_NETWORKS } from "../../domain/network.ts";
import type { SchedulerEnv } from "../env.ts";
import { NETWORK_DIRECTORY_TABLES, networkDirectoryTable } from "./networkSchema.ts";

const queries = (db: ObjectDb) => {
  const obj = sql.placeholder("obj");
  const d = networkDirectoryTable;
  return {
    find: db
      .select({ subnet: d.subnet, tenant: d.tenant })
      .from(d)
      .where(and(eq(d.obj, obj), eq(d.networkId, sql.placeholder("networkId"))))
      .prepare(),
    last: db
      .select({ m: max(d.subnet) })
      .from(d)
      .where(eq(d.obj, obj))
      .prepare(),
    insert: db
      .insert(d)
      .values({
        obj,
        ...placeholders("networkId", "tenant", "subnet"),
        createdAtMs: sql.placeholder("now"),
      })
      .prepare(),
    list: db
      .select({ networkId: d.networkId, tenant: d.tenant, subnet: d.subnet })
      .from(d)
      .where(eq(d.obj, obj))
      .orderBy(asc(d.subnet))
      .prepare(),
  };
};

/** See the module header. */
export class NetworkDirectoryObject extends AuthorityObject<SchedulerEnv, never> {
  static readonly className = "NetworkDirectory";
  static readonly messageSchema = null;
  static readonly tables = NETWORK_DIRECTORY_TABLES;

  private readonly q = prepared(this.state.storage, queries);

  constructor(state: ObjectState<never>, env: SchedulerEnv) {
    super(state, env);
  }

  /**
   * The subnet index of `networkId` (owned by `tenant`), assigned on first
   * call as one more than the highest assigned. Idempotent. Throws
   * FORBIDDEN when a Network of that ID belongs to another tenant, and
   * INTERNAL when all MAX_NETWORKS subnets are taken.
   */
  subnetFor(networkId: string, tenant: string): number {
    const obj = this.state.name;
    const found = this.q.find.get({ obj, networkId });
    if (found) {
      if (found.tenant !== tenant) throw new BeachballError("FORBIDDEN", "this Network belongs to another principal");
      return found.subnet;
    }
    const last = this.q.last.get({ obj })?.m ?? 0;
    if (last >= MAX_NETWORKS)
      throw new BeachballError(
        "INTERNAL",
        `every one of the ${MAX_NETWORKS} Network subnets of the deployment's /48 is assigned`,
      );
    this.q.insert.run({ obj, networkId, tenant, subnet: last + 1, now: this.env.clock.wallMs() });
    return last + 1;
  }

  /** Every Network with its subnet index, in assignment order (operators' view and tests). */
  list(): { networkId: string; tenant: string; subnet: number }[] {
    return this.q.list.all({ obj: this.state.name });
  }
}
