/**
 * IPv4 arithmetic and the per-placement egress address pool (spec "Guest
 * network isolation": "the allocation namespace translates the guest address
 * to an allocation-local host-visible address").
 *
 * Every placement with an uplink gets one /31 from the pool: the even address
 * sits on the host side of its veth (the placement's router), the odd address
 * inside the placement namespace (the SNAT source of the guest's traffic).
 * The default pool 100.127.0.0/16 (32768 placements) lies inside CGNAT
 * 100.64.0.0/10, which every guest is denied, so no guest can reach another
 * placement's addresses or the host side of any veth; return traffic is not
 * affected because the deny rules match only packets coming from the guest.
 * Pure: no I/O. Must never: hand out a slot outside the pool.
 */
import { createHash } from "node:crypto";
import { AgentError } from "../errors.ts";

/** Default egress pool (operators override it with AgentConfig.egressPoolCidr). */
export const DEFAULT_EGRESS_POOL_CIDR = "100.127.0.0/16";
/** Prefix length of one placement's slot (a point-to-point /31, RFC 3021). */
export const SLOT_PREFIX = 31;

/** The isolation subsystem's network failure: an AgentError with code NETWORK_SETUP_FAILED. */
export function netError(msg: string, cause?: unknown): AgentError {
  return new AgentError("NETWORK_SETUP_FAILED", msg, {
    subsystem: "isolation",
    ...(cause === undefined ? {} : { cause }),
  });
}

/** Parses dotted-quad IPv4 into an unsigned 32-bit number. Throws NETWORK_SETUP_FAILED when malformed. */
export function parseIpv4(text: string): number {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  const parts = m ? m.slice(1).map(Number) : [];
  if (parts.length !== 4 || parts.some((p) => p > 255)) throw netError(`invalid IPv4 address: ${JSON.stringify(text)}`);
  return ((parts[0]! << 24) >>> 0) + (parts[1]! << 16) + (parts[2]! << 8) + parts[3]!;
}

/** Formats an unsigned 32-bit number as dotted-quad IPv4. */
export function formatIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".");
}

/** An IPv4 network: base address (host bits zero) and prefix length. */
export interface Ipv4Cidr {
  base: number;
  prefix: number;
}

/** Parses `a.b.c.d/n` (or a bare address as /32). Throws NETWORK_SETUP_FAILED when malformed or host bits are set. */
export function parseCidr(text: string): Ipv4Cidr {
  const [addr, len, extra] = text.split("/");
  const prefix = len === undefined ? 32 : /^\d{1,2}$/.test(len) ? Number(len) : NaN;
  if (extra !== undefined || !(prefix >= 0 && prefix <= 32))
    throw netError(`invalid IPv4 CIDR: ${JSON.stringify(text)}`);
  const base = parseIpv4(addr ?? "");
  if ((base & ~maskOf(prefix)) >>> 0) throw netError(`CIDR ${text} has host bits set`);
  return { base, prefix };
}

/** Canonical text of a CIDR (`a.b.c.d/n`). */
export function formatCidr(c: Ipv4Cidr): string {
  return `${formatIpv4(c.base)}/${c.prefix}`;
}

function maskOf(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
}

/** True when `addr` (dotted quad) lies inside `cidr`. */
export function cidrContains(cidr: Ipv4Cidr, addr: string | number): boolean {
  const a = typeof addr === "number" ? addr : parseIpv4(addr);
  return (a & maskOf(cidr.prefix)) >>> 0 === cidr.base;
}

/** One placement's /31 from the pool. */
export interface PlacementSlot {
  /** Slot index inside the pool (0-based). */
  index: number;
  /** The /31, e.g. `100.127.3.8/31`. */
  cidr: string;
  /** Even address: host side of the veth, the placement namespace's default gateway. */
  hostAddress: string;
  /** Odd address: inside the placement namespace; the guest's traffic is SNATed to it. */
  placementAddress: string;
}

/** Number of /31 slots in `pool`. Throws NETWORK_SETUP_FAILED for a pool narrower than /31. */
export function slotCount(pool: Ipv4Cidr): number {
  if (pool.prefix > SLOT_PREFIX) throw netError(`egress pool ${formatCidr(pool)} is narrower than one /${SLOT_PREFIX}`);
  return 2 ** (SLOT_PREFIX - pool.prefix);
}

/** The slot at `index` (0 ≤ index < slotCount). */
export function slotAt(pool: Ipv4Cidr, index: number): PlacementSlot {
  if (!Number.isInteger(index) || index < 0 || index >= slotCount(pool))
    throw netError(`slot ${index} outside pool ${formatCidr(pool)}`);
  const base = pool.base + index * 2;
  return {
    index,
    cidr: `${formatIpv4(base)}/${SLOT_PREFIX}`,
    hostAddress: formatIpv4(base),
    placementAddress: formatIpv4(base + 1),
  };
}

/** Index of the slot holding `addr`, or null when `addr` is outside the pool. */
export function slotIndexOf(pool: Ipv4Cidr, addr: string): number | null {
  const a = parseIpv4(addr);
  return cidrContains(pool, a) ? Math.floor((a - pool.base) / 2) : null;
}

/**
 * Picks a free slot for placement `seed` (its directory name): starts at a
 * position derived from SHA-256(seed), so a placement usually gets the same
 * slot again, then probes linearly past `used`. Throws NETWORK_SETUP_FAILED
 * when the pool is exhausted.
 */
export function pickSlot(pool: Ipv4Cidr, seed: string, used: ReadonlySet<number>): PlacementSlot {
  const n = slotCount(pool);
  const start = createHash("sha256").update(seed).digest().readUInt32BE(0) % n;
  for (let i = 0; i < n; i++) {
    const idx = (start + i) % n;
    if (!used.has(idx)) return slotAt(pool, idx);
  }
  throw netError(`egress pool ${formatCidr(pool)} is exhausted (${n} slots in use)`);
}
