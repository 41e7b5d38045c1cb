/**
 * What kind of destination an IP literal is (RFC 791, RFC 1112, RFC 3927,
 * RFC 4291 §2.5–2.7, RFC 6890): the one classification every part that
 * sends to an address a peer named uses (STUN server lists in
 * src/protocol/stunServers.ts, path candidates in src/wireguard/paths.ts,
 * STUN answers in src/wireguard/candidates.ts).
 *
 * Pure. Must never: resolve a name or accept anything but an IP literal
 * (anything else is `invalid`).
 */
import { isIP } from "node:net";

/**
 * The scope of an address: `unspecified` (0.0.0.0/8, ::), `multicast`
 * (224.0.0.0/4, ff00::/8), `reserved` (240.0.0.0/4, broadcast included),
 * `link-local` (169.254.0.0/16, fe80::/10), `mapped` (::ffff:0:0/96),
 * `loopback` (127.0.0.0/8, ::1), `unicast` (everything else), or `invalid`
 * (not an IP literal).
 */
export type IpScope =
  | "unspecified"
  | "multicast"
  | "reserved"
  | "link-local"
  | "mapped"
  | "loopback"
  | "unicast"
  | "invalid";

/** The 8 16-bit groups of IPv6 address `a` (already checked by isIP). */
function ipv6Groups(a: string): number[] {
  const groups = (part: string) =>
    part === ""
      ? []
      : part.split(":").flatMap((g) => {
          if (!g.includes(".")) return [parseInt(g, 16)];
          const [o0 = 0, o1 = 0, o2 = 0, o3 = 0] = g.split(".").map(Number);
          return [o0 * 256 + o1, o2 * 256 + o3];
        });
  const at = a.indexOf("::");
  if (at < 0) return groups(a);
  const head = groups(a.slice(0, at));
  const tail = groups(a.slice(at + 2));
  return [...head, ...Array<number>(8 - head.length - tail.length).fill(0), ...tail];
}

/** The scope of IP literal `address` (see IpScope). */
export function ipScope(address: string): IpScope {
  const family = isIP(address);
  if (family === 4) {
    const [a = 0, b = 0] = address.split(".").map(Number);
    if (a === 0) return "unspecified";
    if (a === 127) return "loopback";
    if (a >= 240) return "reserved";
    if (a >= 224) return "multicast";
    if (a === 169 && b === 254) return "link-local";
    return "unicast";
  }
  if (family !== 6) return "invalid";
  const g = ipv6Groups(address);
  if (g.every((x) => x === 0)) return "unspecified";
  if (g.slice(0, 7).every((x) => x === 0) && g[7] === 1) return "loopback";
  if (g[0]! >= 0xff00) return "multicast";
  if ((g[0]! & 0xffc0) === 0xfe80) return "link-local";
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) return "mapped";
  return "unicast";
}

/** True when a datagram to `address` can reach one peer: not unspecified, multicast, reserved/broadcast or invalid (loopback, link-local and mapped may). */
export function isPeerAddress(address: string): boolean {
  const s = ipScope(address);
  return s !== "unspecified" && s !== "multicast" && s !== "reserved" && s !== "invalid";
}
