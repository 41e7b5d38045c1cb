/**
 * Names of a placement's host resources (spec "Agent runtime and local
 * state": the inventory finds Beachball-owned resources by their derived
 * names). Every name carries the owning host: the allocation directory,
 * network namespace, cgroup, VMM instance ID (`-name`/`--id`) and nftables
 * tables are `bb-<host tag>-<digest>` (`bb_<tag>_<digest>` for tables), and
 * the host-side veth is `bbh<tag><8 of the digest>`. Two agents on one
 * machine (each with its own data dir and host ID) can so tell their own
 * resources from the other's.
 *
 * Compatibility: agents before the host tag named everything `bb-<digest>`
 * (24 hex) and veths `bbv<12 hex>`. Those "legacy" names carry no owner;
 * a placement in agent.db keeps the name it was given (the store persists
 * it), and the inventory treats an untagged name as this host's.
 * Must never: derive a name from client text.
 */
import { createHash } from "node:crypto";

/** Hex characters of the host tag (SHA-256 of the host ID). Two hosts on one machine share a tag with odds 1 in 65,536. */
export const HOST_TAG_HEX = 4;
/** Hex characters of the placement digest in a tagged name. */
export const PLACEMENT_DIGEST_HEX = 24;
/** Prefix of host-tagged host-side veths: `bbh` + tag + 8 hex of the digest (IFNAMSIZ allows 15). */
export const TAGGED_VETH_PREFIX = "bbh";
/** Prefix of legacy (untagged) host-side veths: `bbv` + 12 hex. */
export const LEGACY_VETH_PREFIX = "bbv";

const TAGGED_NAME = new RegExp(`^bb-([0-9a-f]{${HOST_TAG_HEX}})-([0-9a-f]{${PLACEMENT_DIGEST_HEX}})$`);
const TAGGED_VETH = new RegExp(`^${TAGGED_VETH_PREFIX}([0-9a-f]{${HOST_TAG_HEX}})[0-9a-f]{8}$`);

/** The host tag of host `hostId`: the first HOST_TAG_HEX hex characters of SHA-256(hostId). */
export function hostTag(hostId: string): string {
  return createHash("sha256").update(hostId).digest("hex").slice(0, HOST_TAG_HEX);
}

/** Directory (and namespace, cgroup, VMM instance) name of a placement on host `hostId`: `bb-<tag>-` + 24 hex of SHA-256 of its identity. */
export function placementDirName(
  hostId: string,
  allocationId: string,
  placementId: string,
  generation: number,
): string {
  const digest = createHash("sha256")
    .update(`${allocationId}\u0000${placementId}\u0000${generation}`)
    .digest("hex")
    .slice(0, PLACEMENT_DIGEST_HEX);
  return `bb-${hostTag(hostId)}-${digest}`;
}

/** The host tag a placement name (`bb-…`) or host-side veth carries; null for a legacy or any other name. Pure. */
export function ownerTagOf(name: string): string | null {
  return TAGGED_NAME.exec(name)?.[1] ?? TAGGED_VETH.exec(name)?.[1] ?? null;
}

/** Host-side veth of a tagged placement name (`bbh<tag><8 hex>`), or null for a legacy name. Pure. */
export function taggedVethName(name: string): string | null {
  const m = TAGGED_NAME.exec(name);
  return m ? `${TAGGED_VETH_PREFIX}${m[1]}${m[2]!.slice(0, 8)}` : null;
}
