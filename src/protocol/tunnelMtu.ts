/**
 * The tunnel's MTU and everything derived from it (docs/adr/0103-tunnel-mtu-1280.md):
 * the inner packet size both ends of a WireGuard session use (the proxy's
 * userspace stack, the host endpoint's TUN), the TCP maximum segment size
 * that follows from it for each address family, and the size of the outer
 * UDP datagram that carries a full-size packet.
 *
 * The MTU is 1,280 bytes, the IPv6 minimum link MTU (RFC 8200 §5), as in
 * Tailscale: a full-size packet then travels in a 1,340-byte IPv4 (1,360-byte
 * IPv6) datagram, which fits paths whose MTU is below Ethernet's 1,500
 * (PPPoE, tunnels, some mobile and cloud networks) even where ICMP
 * "fragmentation needed" never comes back, so path MTU discovery cannot help.
 * Pure: constants and arithmetic only. Must never: be copied as a literal;
 * every MTU or MSS in the tunnel is derived here.
 */

/** IP header bytes without options, by address family. */
export const IP_HEADER_BYTES = { 4: 20, 6: 40 } as const;
/** TCP header bytes without options. */
export const TCP_HEADER_BYTES = 20;
/** UDP header bytes. */
export const UDP_HEADER_BYTES = 8;
/** WireGuard transport overhead per packet (WireGuard whitepaper §5.4.6): type 4 + receiver 4 + counter 8 + Poly1305 tag 16, bytes; padding (to 16 bytes, never past the MTU) adds nothing to a full-size packet. */
export const WIREGUARD_OVERHEAD_BYTES = 32;
/** Smallest inner MTU allowed, bytes: the IPv6 minimum link MTU (RFC 8200 §5). */
export const MIN_TUNNEL_MTU = 1280;
/** The tunnel MTU both ends use, bytes: the IPv6 minimum (see the module doc and ADR 0103). */
export const TUNNEL_MTU = MIN_TUNNEL_MTU;

/** An IP address family. */
export type IpFamily = 4 | 6;

function checkMtu(mtu: number): void {
  if (!Number.isInteger(mtu) || mtu < MIN_TUNNEL_MTU || mtu > 65535)
    throw new RangeError(`MTU ${mtu} is outside ${MIN_TUNNEL_MTU}..65535`);
}

/**
 * The TCP maximum segment size for an inner MTU and family, bytes: MTU − IP
 * header − TCP header (RFC 9293 §3.7.1), e.g. 1,220 over IPv6 and 1,240 over
 * IPv4 at the tunnel MTU. Throws RangeError for an MTU outside 1,280..65,535.
 */
export function tcpMssBytes(mtu: number, family: IpFamily): number {
  checkMtu(mtu);
  return mtu - IP_HEADER_BYTES[family] - TCP_HEADER_BYTES;
}

/**
 * The outer UDP datagram, IP header included, that carries one inner packet
 * of `mtu` bytes over an underlay of `family`, bytes: e.g. 1,340 over IPv4 at
 * the tunnel MTU. A path must carry datagrams this large for full-size
 * packets to arrive. Throws RangeError for an MTU outside 1,280..65,535.
 */
export function outerDatagramBytes(mtu: number, family: IpFamily): number {
  checkMtu(mtu);
  return mtu + WIREGUARD_OVERHEAD_BYTES + UDP_HEADER_BYTES + IP_HEADER_BYTES[family];
}

/** The TCP MSS of flows through the tunnel (IPv6 inner addresses), bytes: 1,220. The host endpoint clamps SYNs to it. */
export const TUNNEL_TCP_MSS_BYTES = tcpMssBytes(TUNNEL_MTU, 6);
