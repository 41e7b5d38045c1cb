/**
 * Where one side of a connection can be reached from its local interfaces
 * (spec "Data path", "Coordination and path selection"): the host endpoint
 * and the proxy both publish these, with their STUN candidates, gathered
 * by src/wireguard/candidates.ts.
 *
 * Owns: which interface addresses become candidates, the order of a merged
 * list (STUN first: behind NAT it is the one that works) and its bound
 * (MAX_CANDIDATES). Pure: the interface list is passed in.
 * Must never: publish a loopback or link-local address, or one of a family
 * the socket is not bound to.
 */
import { MAX_CANDIDATES, type Candidate } from "../protocol/connection.ts";

/** One interface address as os.networkInterfaces() lists it (only what is read here). */
export interface InterfaceAddress {
  address: string;
  internal: boolean;
}

const IPV4 = /^\d{1,3}(?:\.\d{1,3}){3}$/;

/**
 * Local candidates: every non-internal, non-link-local address of `interfaces`
 * of the families the socket bound to `bindHost` receives (`0.0.0.0`: IPv4;
 * `::`: both; a literal: just that address), on `port`.
 */
export function localCandidates(
  bindHost: string,
  port: number,
  interfaces: NodeJS.Dict<readonly InterfaceAddress[]>,
): Candidate[] {
  if (bindHost !== "0.0.0.0" && bindHost !== "::") return [{ address: bindHost, port, kind: "local" }];
  const out: Candidate[] = [];
  for (const list of Object.values(interfaces)) {
    for (const a of list ?? []) {
      if (a.internal) continue;
      if (IPV4.test(a.address) && !a.address.startsWith("169.254."))
        out.push({ address: a.address, port, kind: "local" });
      else if (bindHost === "::" && a.address.includes(":") && !/^fe[89ab]/i.test(a.address))
        out.push({ address: a.address.toLowerCase(), port, kind: "local" });
    }
  }
  return out;
}

/** STUN candidates first, then local ones, without duplicates, at most MAX_CANDIDATES. */
export function mergeCandidates(stun: readonly Candidate[], local: readonly Candidate[]): Candidate[] {
  const seen = new Set<string>();
  const out: Candidate[] = [];
  for (const c of [...stun, ...local]) {
    const key = `${c.address}|${c.port}`;
    if (seen.has(key) || out.length >= MAX_CANDIDATES) continue;
    seen.add(key);
    out.push(c);
  }
  return out;
}
