/**
 * Small pure helpers that build and parse the IP packets WireGuard tests send
 * through tunnels: IPv4/IPv6 ICMP echo (RFC 792, RFC 4443) and UDP (RFC 768,
 * RFC 8200 §8.1 pseudo-header), with real checksums so the Linux kernel
 * answers them. Addresses are text ("10.0.0.1", "fd00::1").
 * Must never: accept a packet whose checksum is wrong when parsing.
 */
import { formatAddress, parseAddress } from "../../src/wireguard/allowedIps.ts";

const PROTO_ICMP = 1;
const PROTO_UDP = 17;
const PROTO_ICMPV6 = 58;

function addr(s: string): Uint8Array {
  const a = parseAddress(s);
  if (!a) throw new Error(`not an address: ${s}`);
  return a;
}

/** The Internet checksum (RFC 1071) over `parts`. */
export function inetChecksum(...parts: Uint8Array[]): number {
  let sum = 0;
  let odd: number | null = null;
  for (const p of parts) {
    for (const b of p) {
      if (odd === null) odd = b;
      else {
        sum += (odd << 8) | b;
        odd = null;
      }
    }
  }
  if (odd !== null) sum += odd << 8;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

function pseudoHeader(src: Uint8Array, dst: Uint8Array, proto: number, length: number): Uint8Array {
  if (src.length === 4) return Uint8Array.from([...src, ...dst, 0, proto, length >> 8, length & 0xff]);
  return Uint8Array.from([...src, ...dst, 0, 0, length >> 8, length & 0xff, 0, 0, 0, proto]);
}

/** Wraps an upper-layer payload in an IPv4 (TTL 64, no options) or IPv6 (hop limit 64) header. */
export function ipPacket(src: string, dst: string, proto: number, payload: Uint8Array): Uint8Array {
  const s = addr(src);
  const d = addr(dst);
  if (s.length !== d.length) throw new Error("mixed address families");
  if (s.length === 4) {
    const h = new Uint8Array(20);
    h[0] = 0x45;
    const total = 20 + payload.length;
    h[2] = total >> 8;
    h[3] = total & 0xff;
    h[8] = 64;
    h[9] = proto;
    h.set(s, 12);
    h.set(d, 16);
    const c = inetChecksum(h);
    h[10] = c >> 8;
    h[11] = c & 0xff;
    return Uint8Array.from([...h, ...payload]);
  }
  const h = new Uint8Array(40);
  h[0] = 0x60;
  h[4] = payload.length >> 8;
  h[5] = payload.length & 0xff;
  h[6] = proto;
  h[7] = 64;
  h.set(s, 8);
  h.set(d, 24);
  return Uint8Array.from([...h, ...payload]);
}

/** An ICMP (IPv4) or ICMPv6 echo request (or reply with `reply`) with identifier, sequence and data. */
export function icmpEcho(
  src: string,
  dst: string,
  id: number,
  seq: number,
  data: Uint8Array,
  reply = false,
): Uint8Array {
  const v6 = addr(src).length === 16;
  const m = new Uint8Array(8 + data.length);
  m[0] = v6 ? (reply ? 129 : 128) : reply ? 0 : 8;
  m[4] = id >> 8;
  m[5] = id & 0xff;
  m[6] = seq >> 8;
  m[7] = seq & 0xff;
  m.set(data, 8);
  const c = v6 ? inetChecksum(pseudoHeader(addr(src), addr(dst), PROTO_ICMPV6, m.length), m) : inetChecksum(m);
  m[2] = c >> 8;
  m[3] = c & 0xff;
  return ipPacket(src, dst, v6 ? PROTO_ICMPV6 : PROTO_ICMP, m);
}

/** A UDP datagram in an IPv4 or IPv6 packet, with its checksum. */
export function udpPacket(src: string, dst: string, sport: number, dport: number, payload: Uint8Array): Uint8Array {
  const u = new Uint8Array(8 + payload.length);
  u[0] = sport >> 8;
  u[1] = sport & 0xff;
  u[2] = dport >> 8;
  u[3] = dport & 0xff;
  u[4] = u.length >> 8;
  u[5] = u.length & 0xff;
  u.set(payload, 8);
  let c = inetChecksum(pseudoHeader(addr(src), addr(dst), PROTO_UDP, u.length), u);
  if (c === 0) c = 0xffff;
  u[6] = c >> 8;
  u[7] = c & 0xff;
  return ipPacket(src, dst, PROTO_UDP, u);
}

/** A TCP segment (20-byte header, no options) with `flags` (SYN = 0x02, ACK = 0x10, RST = 0x04) in an IP packet, with its checksum. */
export function tcpPacket(
  src: string,
  dst: string,
  sport: number,
  dport: number,
  flags: number,
  seq = 1000,
  ack = 0,
): Uint8Array {
  const t = new Uint8Array(20);
  const v = new DataView(t.buffer);
  v.setUint16(0, sport);
  v.setUint16(2, dport);
  v.setUint32(4, seq >>> 0);
  v.setUint32(8, ack >>> 0);
  t[12] = 5 << 4;
  t[13] = flags;
  v.setUint16(14, 65535);
  const c = inetChecksum(pseudoHeader(addr(src), addr(dst), 6, t.length), t);
  v.setUint16(16, c);
  return ipPacket(src, dst, 6, t);
}

/** The TCP ports and flags of a packet; null when it is not TCP. */
export function parseTcp(
  p: Uint8Array,
): { src: string; dst: string; sport: number; dport: number; flags: number } | null {
  const ip = parseIp(p);
  if (!ip || ip.proto !== 6 || ip.payload.length < 20) return null;
  const t = ip.payload;
  return { src: ip.src, dst: ip.dst, sport: (t[0]! << 8) | t[1]!, dport: (t[2]! << 8) | t[3]!, flags: t[13]! };
}

/** An IP packet's family, addresses, protocol and payload (the IPv4 header checksum and lengths are checked). */
export interface ParsedIp {
  family: 4 | 6;
  src: string;
  dst: string;
  proto: number;
  payload: Uint8Array;
}

/** Parses an IPv4 (no fragments) or IPv6 (no extension headers) packet; null when malformed. */
export function parseIp(p: Uint8Array): ParsedIp | null {
  if (p.length >= 20 && p[0]! >> 4 === 4) {
    const ihl = (p[0]! & 15) * 4;
    const total = (p[2]! << 8) | p[3]!;
    if (total > p.length || inetChecksum(p.subarray(0, ihl)) !== 0) return null;
    return {
      family: 4,
      src: formatAddress(p.subarray(12, 16)),
      dst: formatAddress(p.subarray(16, 20)),
      proto: p[9]!,
      payload: p.subarray(ihl, total),
    };
  }
  if (p.length >= 40 && p[0]! >> 4 === 6) {
    const len = (p[4]! << 8) | p[5]!;
    if (40 + len > p.length) return null;
    return {
      family: 6,
      src: formatAddress(p.subarray(8, 24)),
      dst: formatAddress(p.subarray(24, 40)),
      proto: p[6]!,
      payload: p.subarray(40, 40 + len),
    };
  }
  return null;
}

/** An ICMP/ICMPv6 echo message of a packet, checksum verified; null when it is not one. */
export function parseIcmpEcho(
  p: Uint8Array,
): { family: 4 | 6; src: string; dst: string; reply: boolean; id: number; seq: number; data: Uint8Array } | null {
  const ip = parseIp(p);
  if (!ip || ip.payload.length < 8) return null;
  const m = ip.payload;
  if (
    ip.family === 4
      ? ip.proto !== PROTO_ICMP || inetChecksum(m) !== 0
      : ip.proto !== PROTO_ICMPV6 ||
        inetChecksum(pseudoHeader(addr(ip.src), addr(ip.dst), PROTO_ICMPV6, m.length), m) !== 0
  )
    return null;
  const type = m[0]!;
  const reply = ip.family === 4 ? type === 0 : type === 129;
  const request = ip.family === 4 ? type === 8 : type === 128;
  if (!reply && !request) return null;
  return {
    family: ip.family,
    src: ip.src,
    dst: ip.dst,
    reply,
    id: (m[4]! << 8) | m[5]!,
    seq: (m[6]! << 8) | m[7]!,
    data: m.subarray(8),
  };
}

/** The UDP datagram of a packet, checksum verified; null when it is not one. */
export function parseUdp(
  p: Uint8Array,
): { family: 4 | 6; src: string; dst: string; sport: number; dport: number; payload: Uint8Array } | null {
  const ip = parseIp(p);
  if (!ip || ip.proto !== PROTO_UDP || ip.payload.length < 8) return null;
  const u = ip.payload;
  const len = (u[4]! << 8) | u[5]!;
  if (len < 8 || len > u.length) return null;
  const stored = (u[6]! << 8) | u[7]!;
  if (
    (stored !== 0 || ip.family === 6) &&
    inetChecksum(pseudoHeader(addr(ip.src), addr(ip.dst), PROTO_UDP, len), u.subarray(0, len)) !== 0
  )
    return null;
  return {
    family: ip.family,
    src: ip.src,
    dst: ip.dst,
    sport: (u[0]! << 8) | u[1]!,
    dport: (u[2]! << 8) | u[3]!,
    payload: u.subarray(8, len),
  };
}
