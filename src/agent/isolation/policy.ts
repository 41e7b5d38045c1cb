/**
 * The operator's network policy for placements (spec "Guest network
 * isolation"), validated once from AgentConfig: uplink, DNS resolvers,
 * denied ranges, egress pool. Pure.
 * Must never: accept a malformed address or interface name (they end up in
 * nft rule text and `ip` arguments).
 */
import { formatCidr, formatIpv4, netError, parseCidr, parseIpv4, slotCount } from "./addressPool.ts";
import { DEFAULT_EGRESS_POOL_CIDR } from "./addressPool.ts";

/** Where guest egress leaves the host. */
export interface UplinkPolicy {
  /** Namespace holding the veth host sides and `device`; absent = the root namespace. Must not start with `bb-`. */
  netns?: string;
  /** The interface in that namespace that leads out (masquerade applies only to it). */
  device: string;
}

/** Validated network policy for every placement on this host. */
export interface PlacementNetPolicy {
  /** Absent (the default): no veth, no route off the host. */
  uplink?: UplinkPolicy;
  /** IPv4 resolvers the guest may query on port 53 (also passed as beachball.dns=). */
  dnsResolvers: string[];
  /** Extra denied IPv4 ranges (operator management networks), canonical CIDRs. */
  deniedRanges: string[];
  /** Pool the per-placement /31 slots come from, canonical CIDR. */
  egressPoolCidr: string;
}

/** No uplink, no resolvers, no extra ranges, the default pool. */
export const DEFAULT_NET_POLICY: PlacementNetPolicy = {
  dnsResolvers: [],
  deniedRanges: [],
  egressPoolCidr: DEFAULT_EGRESS_POOL_CIDR,
};

const IFNAME = /^[A-Za-z0-9_.-]{1,15}$/;
const NETNS = /^[A-Za-z0-9_.-]{1,64}$/;

/** Settings as they appear in AgentConfig (all optional). */
export interface NetPolicyInput {
  uplink?: UplinkPolicy;
  dnsResolvers?: string[];
  deniedRanges?: string[];
  egressPoolCidr?: string;
}

/** Validates and canonicalises the policy. Throws NETWORK_SETUP_FAILED naming the bad field. */
export function netPolicyFrom(input: NetPolicyInput): PlacementNetPolicy {
  const u = input.uplink;
  if (u) {
    if (!IFNAME.test(u.device)) throw netError(`uplink.device ${JSON.stringify(u.device)} is not an interface name`);
    if (u.netns !== undefined && (!NETNS.test(u.netns) || u.netns.startsWith("bb-")))
      throw netError(`uplink.netns ${JSON.stringify(u.netns)} is invalid (and must not use the agent's bb- prefix)`);
  }
  const pool = parseCidr(input.egressPoolCidr ?? DEFAULT_EGRESS_POOL_CIDR);
  slotCount(pool);
  return {
    ...(u ? { uplink: u.netns ? { netns: u.netns, device: u.device } : { device: u.device } } : {}),
    // Canonical text (no leading zeros): the guest parses it with Go's net.ParseIP, which refuses them.
    dnsResolvers: (input.dnsResolvers ?? []).map((r) => formatIpv4(parseIpv4(r))),
    deniedRanges: (input.deniedRanges ?? []).map((r) => formatCidr(parseCidr(r))),
    egressPoolCidr: formatCidr(pool),
  };
}
