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
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { BeachballError } from "../../protocol/errors.ts";
import { MAX_NETWORKS } from "../../domain/network.ts";
import type { SchedulerEnv } from "../env.ts";
import { NETWORK_DIRECTORY_TABLES } from "./networkSchema.ts";

/** See the module header. */
export class NetworkDirectoryObject extends AuthorityObject<SchedulerEnv, never> {
  static readonly className = "NetworkDirectory";
  static readonly messageSchema = null;
  static readonly tables = NETWORK_DIRECTORY_TABLES;

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
    const sql = this.state.storage.sql;
    const found = sql
      .exec<{ subnet: number; tenant: string }>(
        "SELECT subnet, tenant FROM network_directory WHERE obj = ? AND network_id = ?",
        this.state.name,
        networkId,
      )
      .next();
    if (!found.done) {
      if (found.value.tenant !== tenant)
        throw new BeachballError("FORBIDDEN", "this Network belongs to another principal");
      return found.value.subnet;
    }
    const last =
      sql
        .exec<{ m: number | null }>("SELECT MAX(subnet) AS m FROM network_directory WHERE obj = ?", this.state.name)
        .one().m ?? 0;
    if (last >= MAX_NETWORKS)
      throw new BeachballError(
        "INTERNAL",
        `every one of the ${MAX_NETWORKS} Network subnets of the deployment's /48 is assigned`,
      );
    sql.exec(
      "INSERT INTO network_directory (obj, network_id, tenant, subnet, created_at_ms) VALUES (?, ?, ?, ?, ?)",
      this.state.name,
      networkId,
      tenant,
      last + 1,
      this.env.clock.now(),
    );
    return last + 1;
  }

  /** Every Network with its subnet index, in assignment order (operators' view and tests). */
  list(): { networkId: string; tenant: string; subnet: number }[] {
    return this.state.storage.sql
      .exec<{ network_id: string; tenant: string; subnet: number }>(
        "SELECT network_id, tenant, subnet FROM network_directory WHERE obj = ? ORDER BY subnet",
        this.state.name,
      )
      .toArray()
      .map((r) => ({ networkId: r.network_id, tenant: r.tenant, subnet: r.subnet }));
  }
}
