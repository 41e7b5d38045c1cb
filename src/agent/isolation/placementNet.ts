/**
 * A placement's private network (spec "Guest network isolation", the network
 * part of "Prepare" and step 5/6 of "Stop"): one namespace `bb-<digest>` with
 * TAP `bbtap0` (router 10.0.0.1/30, guest 10.0.0.2/30) and the placement's
 * nftables table, loaded before any VMM starts. With an uplink configured it
 * adds a veth pair (host side `bbh<tag><8 hex>` in the uplink namespace, peer
 * `bbup0` inside), a /31 from the egress pool, a default route, SNAT of the
 * guest to the slot address, and a per-placement masquerade table in the
 * uplink namespace. Without an uplink (the default) the guest has no route
 * off the host and the root namespace is not touched at all.
 * Must never: touch a namespace, link or table whose name is not derived
 * from a `bb-` placement name, or leave a half-built network after a failure.
 */
import { isIPv4 } from "node:net";
import { netError, parseCidr, pickSlot, slotIndexOf, type PlacementSlot } from "./addressPool.ts";
import { inNetns, ip, ipChecked, ipv4Addresses, linkExists, nftLoad, nftTables, runCmd } from "./exec.ts";
import { DEFAULT_NET_POLICY, type PlacementNetPolicy } from "./policy.ts";
import { nftTableName, placementRuleset, uplinkRuleset } from "./rules.ts";
import { LEGACY_VETH_PREFIX, TAGGED_VETH_PREFIX, taggedVethName } from "../resourceNames.ts";

/** Prefix of every namespace Beachball owns (inventory on restart relies on it). */
export const PLACEMENT_NETNS_PREFIX = "bb-";
/** TAP device name inside every placement namespace. */
export const PLACEMENT_TAP_NAME = "bbtap0";
/** Namespace side of the uplink veth, inside every placement namespace. */
export const PLACEMENT_UPLINK_VETH = "bbup0";
/** Prefixes of the host-side veth names: `bbh` + host tag + 8 hex (resourceNames.ts), or the legacy `bbv` + 12 hex. */
export const HOST_VETH_PREFIXES = [TAGGED_VETH_PREFIX, LEGACY_VETH_PREFIX] as const;
/** Host (TAP) side address of the placement /30. */
export const PLACEMENT_HOST_CIDR = "10.0.0.1/30";
/** Guest side address of the placement /30. */
export const PLACEMENT_GUEST_CIDR = "10.0.0.2/30";

/** Where a placement's uplink half lives; persisted in network.json so Stop finds it after a config change. */
export interface PlacementUplink {
  /** Uplink namespace (absent = root). */
  netns?: string;
  device: string;
  /** Host-side veth name in the uplink namespace. */
  hostVeth: string;
  slot: PlacementSlot;
}

/** A created placement network. */
export interface PlacementNetwork {
  /** Network namespace name (`bb-…`). */
  netns: string;
  /** TAP device inside `netns`, for the VMM's `-netdev tap,ifname=`. */
  tapName: string;
  /** Host side, CIDR. */
  hostCidr: string;
  /** Guest side, CIDR. */
  guestCidr: string;
  /** nftables table (inet in the placement namespace; ip in the uplink namespace). */
  table: string;
  /** Present only when the host has an uplink. */
  uplink?: PlacementUplink;
  /** Kernel arguments that configure the guest's eth0 and resolv.conf (read by /sbin/beachball-init). */
  guestKernelArgs: string[];
}

function checkName(name: string): void {
  if (!/^bb-[A-Za-z0-9_-]{1,60}$/.test(name))
    throw netError(`invalid placement namespace name: ${JSON.stringify(name)}`);
}

/**
 * Host-side veth name of placement `name` (IFNAMSIZ allows 15): `bbh` + its
 * host tag + 8 hex of its digest for a host-tagged name; for a legacy
 * `bb-<digest>` name (an older agent's placement), `bbv` + its first 12
 * characters, as that agent named it.
 */
export function hostVethName(name: string): string {
  checkName(name);
  return taggedVethName(name) ?? `${LEGACY_VETH_PREFIX}${name.slice(3, 15)}`;
}

/** Kernel arguments for the guest: address, gateway and (when configured) resolvers. Pure. */
export function guestKernelArgs(policy: Pick<PlacementNetPolicy, "dnsResolvers">): string[] {
  const args = [`beachball.ipv4=${PLACEMENT_GUEST_CIDR}`, `beachball.gateway=${PLACEMENT_HOST_CIDR.split("/")[0]}`];
  if (policy.dnsResolvers.length) args.push(`beachball.dns=${policy.dnsResolvers.join(",")}`);
  return args;
}

let allocLock: Promise<unknown> = Promise.resolve();

/** Serialises slot allocation in this process (the agent lock makes it the only allocator on the host). */
function withAllocLock<T>(fn: () => Promise<T>): Promise<T> {
  const next = allocLock.then(fn, fn);
  allocLock = next.catch(() => undefined);
  return next;
}

async function readForwarding(netns: string | undefined): Promise<string> {
  const r = await runCmd(inNetns(netns, ["cat", "/proc/sys/net/ipv4/ip_forward"]));
  return r.out.trim();
}

/** Builds the veth, slot, routes and uplink table; returns the uplink record and the host ranges the guest must not reach. */
async function buildUplink(
  name: string,
  policy: PlacementNetPolicy,
): Promise<{ uplink: PlacementUplink; hostRanges: string[] }> {
  const up = policy.uplink!;
  const upNs = up.netns;
  if (!(await linkExists(upNs, up.device)))
    throw netError(`uplink device ${up.device} not found in ${upNs ?? "the root namespace"}`);
  if ((await readForwarding(upNs)) !== "1")
    throw netError(
      `net.ipv4.ip_forward is not 1 in ${upNs ?? "the root namespace"}; the uplink cannot forward guest traffic`,
    );
  const pool = parseCidr(policy.egressPoolCidr);
  const hostVeth = hostVethName(name);
  const { slot, upAddrs } = await withAllocLock(async () => {
    const addrs = await ipv4Addresses(upNs);
    const used = new Set<number>();
    for (const a of addrs) {
      const idx = slotIndexOf(pool, a.local);
      if (idx !== null) used.add(idx);
    }
    const s = pickSlot(pool, name, used);
    await ipChecked(upNs, [
      "link",
      "add",
      hostVeth,
      "type",
      "veth",
      "peer",
      "name",
      PLACEMENT_UPLINK_VETH,
      "netns",
      name,
    ]);
    await ipChecked(upNs, ["addr", "add", `${s.hostAddress}/31`, "dev", hostVeth]);
    return { slot: s, upAddrs: addrs };
  });
  await ipChecked(upNs, ["link", "set", hostVeth, "up"]);
  await ipChecked(name, ["addr", "add", `${slot.placementAddress}/31`, "dev", PLACEMENT_UPLINK_VETH]);
  await ipChecked(name, ["link", "set", PLACEMENT_UPLINK_VETH, "up"]);
  await ipChecked(name, ["route", "add", "default", "via", slot.hostAddress, "dev", PLACEMENT_UPLINK_VETH]);
  const fwd = await runCmd(["ip", "netns", "exec", name, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]);
  if (fwd.code !== 0) throw netError(`cannot enable forwarding in ${name}: ${fwd.err}`);
  await nftLoad(
    upNs,
    uplinkRuleset({ table: nftTableName(name), hostVeth, device: up.device, placementAddress: slot.placementAddress }),
  );
  const hostRanges = [
    policy.egressPoolCidr,
    ...upAddrs
      .map((a) => a.local)
      .filter((a) => isIPv4(a))
      .map((a) => `${a}/32`),
  ];
  return { uplink: { ...(upNs ? { netns: upNs } : {}), device: up.device, hostVeth, slot }, hostRanges };
}

/**
 * Creates placement namespace `name` (see module doc) and loads its nftables
 * table before returning, so no VMM can start without it. Throws
 * NETWORK_SETUP_FAILED (after removing what it created) when the name is
 * invalid, the namespace exists, the uplink is missing or not forwarding,
 * the pool is exhausted, or an `ip`/`nft` step fails.
 */
export async function createPlacementNetwork(
  name: string,
  policy: PlacementNetPolicy = DEFAULT_NET_POLICY,
): Promise<PlacementNetwork> {
  checkName(name);
  const table = nftTableName(name);
  await ipChecked(undefined, ["netns", "add", name]);
  let uplink: PlacementUplink | undefined;
  try {
    await ipChecked(name, ["link", "set", "lo", "up"]);
    await ipChecked(name, ["tuntap", "add", "dev", PLACEMENT_TAP_NAME, "mode", "tap"]);
    await ipChecked(name, ["addr", "add", PLACEMENT_HOST_CIDR, "dev", PLACEMENT_TAP_NAME]);
    let hostRanges = [policy.egressPoolCidr];
    if (policy.uplink) ({ uplink, hostRanges } = await buildUplink(name, policy));
    await nftLoad(
      name,
      placementRuleset({
        table,
        tap: PLACEMENT_TAP_NAME,
        guestIpv4: PLACEMENT_GUEST_CIDR.split("/")[0]!,
        routerIpv4: PLACEMENT_HOST_CIDR.split("/")[0]!,
        ...(uplink ? { uplink: { device: PLACEMENT_UPLINK_VETH, snatAddress: uplink.slot.placementAddress } } : {}),
        resolvers: policy.dnsResolvers,
        operatorRanges: policy.deniedRanges,
        hostRanges,
      }),
    );
    await ipChecked(name, ["link", "set", PLACEMENT_TAP_NAME, "up"]); // link up only once the rules are in place
  } catch (e) {
    await destroyPlacementNetwork(name, policy.uplink ? [policy.uplink.netns] : []).catch(() => {});
    throw e;
  }
  return {
    netns: name,
    tapName: PLACEMENT_TAP_NAME,
    hostCidr: PLACEMENT_HOST_CIDR,
    guestCidr: PLACEMENT_GUEST_CIDR,
    table,
    ...(uplink ? { uplink } : {}),
    guestKernelArgs: guestKernelArgs(policy),
  };
}

/**
 * Removes everything of placement `name`: the uplink table and host veth in
 * each of `uplinkNetnses` (undefined = root namespace), then the namespace
 * (its TAP, peer and table go with it). Every step is attempted; then it
 * confirms nothing remains. Idempotent: absent resources count as removed.
 * Throws NETWORK_SETUP_FAILED listing what is left.
 */
export async function destroyPlacementNetwork(
  name: string,
  uplinkNetnses: Array<string | undefined> = [],
): Promise<void> {
  checkName(name);
  const table = nftTableName(name);
  const veth = hostVethName(name);
  const errors: string[] = [];
  const spaces = [...new Set(uplinkNetnses)];
  for (const ns of spaces) {
    const where = ns ?? "root";
    try {
      if ((await nftTables(ns)).includes(`ip ${table}`)) {
        const r = await runCmd(inNetns(ns, ["nft", "delete", "table", "ip", table]));
        if (r.code !== 0) errors.push(`nft table ip ${table} in ${where}: ${r.err}`);
      }
    } catch (e) {
      errors.push((e as Error).message);
    }
    if (await linkExists(ns, veth)) {
      const r = await ip(ns, ["link", "del", veth]);
      if (r.code !== 0) errors.push(`veth ${veth} in ${where}: ${r.err}`);
    }
  }
  if ((await listPlacementNetworks()).includes(name)) {
    const r = await ip(undefined, ["netns", "delete", name]);
    if (r.code !== 0) errors.push(`ip netns delete ${name}: ${r.err}`);
  }
  const left: string[] = [];
  for (const ns of spaces) {
    if ((await nftTables(ns).catch(() => [`ip ${table}`])).includes(`ip ${table}`))
      left.push(`nft table ip ${table} in ${ns ?? "root"}`);
    if (await linkExists(ns, veth)) left.push(`veth ${veth} in ${ns ?? "root"}`);
  }
  if ((await listPlacementNetworks().catch(() => [name])).includes(name)) left.push(`netns ${name}`);
  if (left.length)
    throw netError(
      `placement network ${name} not fully removed: ${left.join(", ")}${errors.length ? ` (${errors.join("; ")})` : ""}`,
    );
}

/** Names of all namespaces with the `bb-` prefix. Throws NETWORK_SETUP_FAILED if `ip netns list` fails. */
export async function listPlacementNetworks(): Promise<string[]> {
  const out = await ipChecked(undefined, ["netns", "list"]);
  return out
    .split("\n")
    .map((l) => l.trim().split(/\s+/)[0] ?? "")
    .filter((n) => n.startsWith(PLACEMENT_NETNS_PREFIX));
}
