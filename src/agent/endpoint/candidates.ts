/**
 * Where the host endpoint can be reached (spec "Data path": "The agent
 * refreshes candidates every 20 seconds"): its local interface addresses on
 * the endpoint port, and the mapped address each configured STUN server sees
 * for the endpoint's one socket.
 *
 * Owns: asking STUN servers. The local list, the order (STUN first: behind
 * NAT it is the one that works) and the bound (MAX_CANDIDATES) are
 * src/domain/candidates.ts's (the proxy gathers its own with it). Pure apart
 * from the socket, which is passed in.
 * Must never: publish a loopback or link-local address, or one of a family
 * the socket is not bound to.
 */
import type { Candidate } from "../../protocol/connection.ts";

export { localCandidates, mergeCandidates } from "../../domain/candidates.ts";

/** How often candidates are gathered again, ms. */
export const CANDIDATE_REFRESH_MS = 20_000;

/** A STUN server address (an IP literal and port; names are not resolved by the endpoint). */
export interface StunServer {
  address: string;
  port: number;
}

/** Asks every STUN server (in parallel) through `binding`; the answers as `stun` candidates. */
export async function stunCandidates(servers: readonly StunServer[], binding: (s: StunServer) => Promise<{ address: string; port: number } | null>): Promise<Candidate[]> {
  const answers = await Promise.all(servers.map((s) => binding(s)));
  return answers.filter((a): a is { address: string; port: number } => a !== null).map((a) => ({ address: a.address, port: a.port, kind: "stun" as const }));
}
