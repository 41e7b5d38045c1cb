/**
 * STUN server addresses as the deployment writes them (spec "Data path":
 * both ends publish "local and STUN-discovered candidates"): the text form
 * `IPv4:PORT` or `[IPv6]:PORT` used by the manifest's
 * `connections.stunServers`, the grant response's `stunServers` (what
 * `bb proxy` asks) and the agent's `connections.stunServers`, its parsed
 * form, and the bound on how many one side asks.
 *
 * Owns: the syntax and MAX_STUN_SERVERS. Pure: no sockets, no name
 * resolution (a name would add a resolver dependency to every binding and
 * change under a running tunnel; deployments list literals).
 * Must never: accept a host name, an address that is not unicast
 * (notUnicast), a port outside 1..65535, more than MAX_STUN_SERVERS
 * servers, or one server twice.
 */
import { isIP } from "node:net";
import { ipScope, type IpScope } from "./ipScope.ts";
import { Type } from "@sinclair/typebox";

/** Most STUN servers one side (a host endpoint, a proxy) asks per refresh. */
export const MAX_STUN_SERVERS = 4;

/** A STUN server address: an IP literal and a UDP port. */
export interface StunServer {
  address: string;
  port: number;
}

/** The JSON shape of one server in text form (manifest, grant response); parseStunServer checks the address itself. */
export const StunServerText = Type.String({
  minLength: 9,
  maxLength: 53,
  pattern: "^(?:\\[[0-9a-fA-F:.]+\\]|[0-9.]+):[0-9]{1,5}$",
  description: "IPv4:PORT or [IPv6]:PORT",
});

/** What ipScope says of an address no STUN server can have, by scope. */
const NOT_A_SERVER: Partial<Record<IpScope, string>> = {
  unspecified: "an unspecified address",
  multicast: "a multicast address",
  reserved: "a reserved or broadcast address",
  "link-local": "a link-local address",
  mapped: "an IPv4-mapped address (write the IPv4 form)",
};

/**
 * Why `address` cannot be a STUN server, or null: a STUN server is one
 * unicast host (loopback allowed) the tunnel socket can reach without a
 * zone (src/protocol/ipScope.ts names the ranges). A multicast or broadcast
 * server would let any host on the link answer a binding and plant a
 * candidate; a link-local one needs a zone, which the syntax does not take.
 */
function notUnicast(address: string): string | null {
  return NOT_A_SERVER[ipScope(address)] ?? null;
}

/**
 * Parses "IPv4:PORT" or "[IPv6]:PORT" into a unicast address (IPv6 in its
 * canonical lower-case compressed form, RFC 5952) and a port 1..65535.
 * Throws an Error quoting the entry when it is neither (a host name, a bad
 * address or port) or names an address no STUN server can have (notUnicast).
 */
export function parseStunServer(text: string): StunServer {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(text);
  const address = m?.[1] ?? m?.[2];
  const port = Number(m?.[3]);
  const family = m?.[1] ? 6 : 4;
  if (!address || isIP(address) !== family || !(port >= 1 && port <= 65535))
    throw new Error(`${JSON.stringify(text.slice(0, 80))} is not IPv4:PORT or [IPv6]:PORT`);
  const why = notUnicast(address);
  if (why)
    throw new Error(`${JSON.stringify(text.slice(0, 80))} is not a unicast address: ${why} cannot be a STUN server`);
  return { address: family === 6 ? new URL(`http://[${address}]/`).hostname.slice(1, -1) : address, port };
}

/** The text form of `s` (the inverse of parseStunServer). */
export function formatStunServer(s: StunServer): string {
  return s.address.includes(":") ? `[${s.address}]:${s.port}` : `${s.address}:${s.port}`;
}

/**
 * Parses a list of servers in text form. Throws an Error prefixed with
 * `field` for more than MAX_STUN_SERVERS entries, a malformed one, or one
 * that repeats an earlier server (compared in canonical form).
 */
export function parseStunServers(list: readonly string[], field: string): StunServer[] {
  if (list.length > MAX_STUN_SERVERS) throw new Error(`${field}: at most ${MAX_STUN_SERVERS} STUN servers`);
  const seen = new Set<string>();
  return list.map((text) => {
    let s: StunServer;
    try {
      s = parseStunServer(text);
    } catch (e) {
      throw new Error(`${field}: ${(e as Error).message}`);
    }
    const canonical = formatStunServer(s);
    if (seen.has(canonical)) throw new Error(`${field}: ${JSON.stringify(text.slice(0, 80))} repeats ${canonical}`);
    seen.add(canonical);
    return s;
  });
}
