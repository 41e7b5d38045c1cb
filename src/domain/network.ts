/**
 * Private addresses (spec "Networks, addresses, and grants"): the
 * deployment's random RFC 4193 ULA /48, one /64 per Network assigned
 * sequentially from it, and /128s inside a Network for allocations and
 * client peers, each from its own sequential counter.
 *
 * Address layout (all indices are counters kept by the Network objects,
 * never derived from an identifier):
 *
 *   | 48 bits: ULA prefix | 16 bits: Network subnet index (1..65535) |
 *   | 16 bits: kind (1 = allocation, 2 = client peer) | 48 bits: index (1..2^48-1) |
 *
 * Subnet 0 is kept back (never assigned to a Network). Pure: no clock, no
 * randomness (the prefix is chosen by the operator, see docs/manifest.md).
 * Must never: derive an address from an allocation, grant or principal
 * identifier, or hand out an address outside the deployment's /48.
 */
import { formatIpv6, ipv6Bytes } from "../protocol/ipAddress.ts";

/** Most Networks one deployment holds (subnet indices 1..65535 of the /48). */
export const MAX_NETWORKS = 65_535;
/** Highest per-kind address index inside one Network (48 bits). */
export const MAX_ADDRESS_INDEX = 2 ** 48 - 1;

/** What a /128 inside a Network is for. */
export type AddressKind = "allocation" | "client";

const KIND_TAG: Record<AddressKind, number> = { allocation: 1, client: 2 };

/** A parsed ULA /48: its first 6 bytes. */
export interface UlaPrefix {
  /** The 6 prefix bytes (0xfd, then the 40-bit global ID). */
  bytes: Uint8Array;
  /** Canonical text, `fdxx:xxxx:xxxx::/48`. */
  text: string;
}

/**
 * Parses and validates the deployment's ULA prefix: exactly `/48`, inside
 * fd00::/8 (RFC 4193 §3.1, L = 1: locally assigned), no bits set past the
 * 48th, and a global ID that looks random (not all zero and not one byte
 * repeated: RFC 4193 §3.2 requires a pseudo-random global ID so two
 * deployments do not collide). Returns the prefix or a sentence saying what
 * is wrong.
 */
export function parseUlaPrefix(text: string): UlaPrefix | string {
  const m = /^([0-9A-Fa-f:]+)\/(\d{1,3})$/.exec(text);
  if (!m) return `${JSON.stringify(text)} is not an IPv6 prefix written ADDRESS/48`;
  if (m[2] !== "48") return `the ULA prefix must be a /48, not /${m[2]}`;
  let b: Uint8Array;
  try {
    b = ipv6Bytes(m[1]!);
  } catch {
    return `${JSON.stringify(m[1])} is not an IPv6 address`;
  }
  if (b[0] !== 0xfd) return "the ULA prefix must be inside fd00::/8 (RFC 4193, locally assigned)";
  if (b.subarray(6).some((x) => x !== 0))
    return "the ULA prefix has bits set beyond its 48th; write it as fdxx:xxxx:xxxx::/48";
  const gid = b.subarray(1, 6);
  if (gid.every((x) => x === gid[0]))
    return "the ULA global ID must be random (RFC 4193 §3.2), not zero or one repeated byte";
  return { bytes: b.slice(0, 6), text: `${formatIpv6(b)}/48` };
}

/** The /64 of the Network with subnet index `subnet` (1..MAX_NETWORKS), as text `…::/64`. Throws RangeError outside that range. */
export function networkPrefix(ula: UlaPrefix, subnet: number): string {
  return `${formatIpv6(prefix64(ula, subnet))}/64`;
}

function prefix64(ula: UlaPrefix, subnet: number): Uint8Array {
  if (!Number.isInteger(subnet) || subnet < 1 || subnet > MAX_NETWORKS)
    throw new RangeError(`subnet index ${subnet} is outside 1..${MAX_NETWORKS}`);
  const b = new Uint8Array(16);
  b.set(ula.bytes, 0);
  b[6] = subnet >> 8;
  b[7] = subnet & 0xff;
  return b;
}

/**
 * The /128 number `index` (1..MAX_ADDRESS_INDEX) of `kind` in the Network
 * with subnet index `subnet`, as canonical RFC 5952 text. Throws RangeError
 * outside those ranges.
 */
export function networkAddress(ula: UlaPrefix, subnet: number, kind: AddressKind, index: number): string {
  if (!Number.isInteger(index) || index < 1 || index > MAX_ADDRESS_INDEX)
    throw new RangeError(`address index ${index} is outside 1..${MAX_ADDRESS_INDEX}`);
  const b = prefix64(ula, subnet);
  b[8] = 0;
  b[9] = KIND_TAG[kind];
  let rest = index;
  for (let i = 15; i >= 10; i--) {
    b[i] = rest % 256;
    rest = Math.floor(rest / 256);
  }
  return formatIpv6(b);
}

/** The subnet index of `address` if it lies in one of `ula`'s Network /64s, else null. */
export function subnetOf(ula: UlaPrefix, address: string): number | null {
  let b: Uint8Array;
  try {
    b = ipv6Bytes(address);
  } catch {
    return null;
  }
  for (let i = 0; i < 6; i++) if (b[i] !== ula.bytes[i]) return null;
  const subnet = (b[6]! << 8) | b[7]!;
  return subnet >= 1 ? subnet : null;
}
