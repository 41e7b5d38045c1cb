/**
 * Where the host endpoint can be reached (spec "Data path": "The agent
 * refreshes candidates every 20 seconds"): its local interface addresses on
 * the endpoint port, and the mapped address each configured STUN server sees
 * for the endpoint's one socket.
 *
 * Owns: the candidate list's order (STUN first: behind NAT it is the one
 * that works) and bound (MAX_CANDIDATES). Pure apart from the socket and
 * the interface list, which are passed in.
 * Must never: publish a loopback or link-local address, or one of a family
 * the socket is not bound to.
 */
import { isIPv4, isIPv6 } from "node:net";
import type { NetworkInterfaceInfo } from "node:os";
import { MAX_CANDIDATES, type Candidate } from "../../protocol/connection.ts";

/** How often candidates are gathered again, ms. */
export const CANDIDATE_REFRESH_MS = 20_000;

/** A STUN server address (an IP literal and port; names are not resolved by the endpoint). */
export interface StunServer {
  address: string;
  port: number;
}

/**
 * Local candidates: every non-internal, non-link-local address of `interfaces`
 * of the families the socket bound to `bindHost` receives (`0.0.0.0`: IPv4;
 * `::`: both; a literal: just that address), on `port`.
 */
export function localCandidates(bindHost: string, port: number, interfaces: NodeJS.Dict<NetworkInterfaceInfo[]>): Candidate[] {
  if (bindHost !== "0.0.0.0" && bindHost !== "::") return [{ address: bindHost, port, kind: "local" }];
  const out: Candidate[] = [];
  for (const list of Object.values(interfaces)) {
    for (const a of list ?? []) {
      if (a.internal) continue;
      if (isIPv4(a.address) && !a.address.startsWith("169.254.")) out.push({ address: a.address, port, kind: "local" });
      else if (bindHost === "::" && isIPv6(a.address) && !/^fe[89ab]/i.test(a.address)) out.push({ address: a.address.toLowerCase(), port, kind: "local" });
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

/** Asks every STUN server (in parallel) through `binding`; the answers as `stun` candidates. */
export async function stunCandidates(servers: readonly StunServer[], binding: (s: StunServer) => Promise<{ address: string; port: number } | null>): Promise<Candidate[]> {
  const answers = await Promise.all(servers.map((s) => binding(s)));
  return answers.filter((a): a is { address: string; port: number } => a !== null).map((a) => ({ address: a.address, port: a.port, kind: "stun" as const }));
}
