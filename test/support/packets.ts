/**
 * IP packet builders and parsers for tests that talk to the kernel through a
 * TUN device: IPv4/IPv6 UDP packets with correct checksums (RFC 791, 768,
 * 8200 §8.1) and the few header fields tests read back.
 */

/** The 16-bit one's-complement sum of `b` added to `sum` (RFC 1071). */
function sum16(b: Uint8Array, sum = 0): number {
  for (let i = 0; i + 1 < b.length; i += 2) sum += (b[i]! << 8) | b[i + 1]!;
  if (b.length & 1) sum += b[b.length - 1]! << 8;
  return sum;
}
function fold(sum: number): number {
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

/** Parses a dotted-quad IPv4 address. */
export function ipv4(addr: string): Uint8Array {
  return Uint8Array.from(addr.split(".").map(Number));
}

/** An IPv4 UDP packet from src:sport to dst:dport carrying `payload`. */
export function udp4(src: string, sport: number, dst: string, dport: number, payload: Uint8Array): Uint8Array {
  const p = new Uint8Array(28 + payload.length);
  const v = new DataView(p.buffer);
  p[0] = 0x45;
  v.setUint16(2, p.length);
  p[8] = 64;
  p[9] = 17;
  p.set(ipv4(src), 12);
  p.set(ipv4(dst), 16);
  v.setUint16(10, fold(sum16(p.subarray(0, 20))));
  v.setUint16(20, sport);
  v.setUint16(22, dport);
  v.setUint16(24, 8 + payload.length);
  p.set(payload, 28);
  const pseudo = sum16(p.subarray(12, 20), 17 + 8 + payload.length);
  const c = fold(sum16(p.subarray(20), pseudo));
  v.setUint16(26, c === 0 ? 0xffff : c);
  return p;
}

/** Source address, protocol and UDP destination port and payload of an IPv4 UDP packet, or null. */
export function parseUdp4(p: Uint8Array): { src: string; dport: number; payload: Uint8Array } | null {
  if (p.length < 28 || p[0] !== 0x45 || p[9] !== 17) return null;
  const v = new DataView(p.buffer, p.byteOffset, p.byteLength);
  return { src: [...p.subarray(12, 16)].join("."), dport: v.getUint16(22), payload: p.subarray(28, v.getUint16(2)) };
}
