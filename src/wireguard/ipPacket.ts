/**
 * The little of IPv4/IPv6 a WireGuard Device reads from decrypted and
 * outgoing packets (whitepaper §2 "Cryptokey Routing", §5.4.6): the version,
 * the length the header claims (to strip padding), and the source and
 * destination addresses.
 *
 * Owns: bounds-checked header reads. Must never: throw, or trust a length
 * field beyond the bytes actually present.
 */

/** Header fields of an IP packet; addresses are views into the packet (4 or 16 bytes). */
export interface IpHeader {
  version: 4 | 6;
  /** Total length claimed by the header (≤ the bytes present). */
  length: number;
  source: Uint8Array;
  destination: Uint8Array;
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
    return { version, length, source: p.subarray(12, 16), destination: p.subarray(16, 20) };
  }
  if (version === 6) {
    if (p.length < 40) return null;
    const length = 40 + ((p[4]! << 8) | p[5]!);
    if (length > p.length) return null;
    return { version, length, source: p.subarray(8, 24), destination: p.subarray(24, 40) };
  }
  return null;
}
