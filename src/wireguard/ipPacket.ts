/**
 * The little of IPv4/IPv6 a WireGuard Device reads from decrypted and
 * outgoing packets (whitepaper §2 "Cryptokey Routing", §5.4.6): the version,
 * the length the header claims (to strip padding), and the source and
 * destination addresses.
 *
 * Owns: bounds-checked header reads. Must never: throw, or trust a length
 * field beyond the bytes actually present.
 */

/** Header fields of an IP packet. Addresses stay in the packet (4 or 16 bytes at the offsets): no copies per packet. */
export interface IpHeader {
  version: 4 | 6;
  /** Total length claimed by the header (≤ the bytes present). */
  length: number;
  /** Offset of the source address in the packet. */
  sourceOffset: number;
  /** Offset of the destination address in the packet. */
  destinationOffset: number;
}

/** Parses an IPv4 or IPv6 header; null when the bytes are not a plausible packet. */
export function parseIpHeader(p: Uint8Array): IpHeader | null {
  if (p.length < 1) return null;
  const version = p[0]! >> 4;
  if (version === 4) {
    if (p.length < 20) return null;
    const ihl = (p[0]! & 0x0f) * 4;
    const length = (p[2]! << 8) | p[3]!;
    if (ihl < 20 || length < ihl || length > p.length) return null;
    return { version, length, sourceOffset: 12, destinationOffset: 16 };
  }
  if (version === 6) {
    if (p.length < 40) return null;
    const length = 40 + ((p[4]! << 8) | p[5]!);
    if (length > p.length) return null;
    return { version, length, sourceOffset: 8, destinationOffset: 24 };
  }
  return null;
}
