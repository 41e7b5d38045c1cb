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
 * Must never: accept a host name, a port outside 1..65535, or more than
 * MAX_STUN_SERVERS servers.
 */
import { isIP } from "node:net";
import { Type } from "@sinclair/typebox";

/** Most STUN servers one side (a host endpoint, a proxy) asks per refresh. */
export const MAX_STUN_SERVERS = 4;

/** A STUN server address: an IP literal and a UDP port. */
export interface StunServer {
  address: string;
  port: number;
}

/** The JSON shape of one server in text form (manifest, grant response); parseStunServer checks the address itself. */
export const StunServerText = Type.String({ minLength: 9, maxLength: 53, pattern: "^(?:\\[[0-9a-fA-F:.]+\\]|[0-9.]+):[0-9]{1,5}$", description: "IPv4:PORT or [IPv6]:PORT" });

/** Parses "IPv4:PORT" or "[IPv6]:PORT". Throws an Error quoting the entry when it is neither (a host name, a bad address or port). */
export function parseStunServer(text: string): StunServer {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(text);
  const address = m?.[1] ?? m?.[2];
  const port = Number(m?.[3]);
  if (!address || isIP(address) !== (m?.[1] ? 6 : 4) || !(port >= 1 && port <= 65535)) throw new Error(`${JSON.stringify(text.slice(0, 80))} is not IPv4:PORT or [IPv6]:PORT`);
  return { address, port };
}

/** The text form of `s` (the inverse of parseStunServer). */
export function formatStunServer(s: StunServer): string {
  return s.address.includes(":") ? `[${s.address}]:${s.port}` : `${s.address}:${s.port}`;
}

/**
 * Parses a list of servers in text form. Throws an Error prefixed with
 * `field` for more than MAX_STUN_SERVERS entries or a malformed one.
 */
export function parseStunServers(list: readonly string[], field: string): StunServer[] {
  if (list.length > MAX_STUN_SERVERS) throw new Error(`${field}: at most ${MAX_STUN_SERVERS} STUN servers`);
  return list.map((text) => {
    try {
      return parseStunServer(text);
    } catch (e) {
      throw new Error(`${field}: ${(e as Error).message}`);
    }
  });
}
