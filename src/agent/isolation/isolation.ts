/**
 * The host-wide isolation settings every placement gets: the validated
 * network policy and the cgroup policy (spec "Guest network isolation",
 * "Start"). The daemon builds them from AgentConfig with
 * isolationFromConfig and hands them to HostIsolation (isolationOps.ts);
 * the defaults are no uplink and cgroups under the agent's own cgroup.
 * Must never: hold per-placement state (it is host-wide configuration).
 */
import type { AgentConfig } from "../config.ts";
import { DEFAULT_CGROUP_POLICY, cgroupPolicyFrom, type CgroupPolicy } from "./cgroups/policy.ts";
import { DEFAULT_NET_POLICY, netPolicyFrom, type PlacementNetPolicy } from "./policy.ts";

/** Host-wide isolation settings for every placement. */
export interface PlacementIsolation {
  network: PlacementNetPolicy;
  cgroups: CgroupPolicy;
}

/** Defaults: no uplink, no resolvers, default pool; cgroups under the agent's own cgroup. */
export const DEFAULT_ISOLATION: PlacementIsolation = { network: DEFAULT_NET_POLICY, cgroups: DEFAULT_CGROUP_POLICY };

/** Validates the isolation fields of AgentConfig. Throws AgentError NETWORK_SETUP_FAILED (network) or CGROUP_SETUP_FAILED (cgroups) naming the bad field. */
export function isolationFromConfig(config: Partial<AgentConfig>): PlacementIsolation {
  return {
    network: netPolicyFrom({
      ...(config.uplink ? { uplink: config.uplink } : {}),
      ...(config.dnsResolvers ? { dnsResolvers: config.dnsResolvers } : {}),
      ...(config.deniedRanges ? { deniedRanges: config.deniedRanges } : {}),
      ...(config.egressPoolCidr ? { egressPoolCidr: config.egressPoolCidr } : {}),
    }),
    cgroups: cgroupPolicyFrom(config),
  };
}
