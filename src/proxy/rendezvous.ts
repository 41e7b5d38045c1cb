/**
 * The proxy's side of the rendezvous (spec "Coordination and path
 * selection"): posts where this proxy can be reached (its tunnel socket's
 * local interface addresses) to the grant's Connection, under the grant's
 * endpoint token. The scheduler hands them to the host endpoint in
 * configure_connection, and the host sends to them (hole punching) instead
 * of waiting to learn the client only by roaming.
 *
 * Owns: the candidates message (sequence number 1: every run has its own
 * grant and Connection) and its bound (MAX_CANDIDATES). Must never: post
 * a loopback or link-local address (src/domain/candidates.ts), or send the
 * endpoint token anywhere but the scheduler that issued it.
 */
import { SchedulerClient } from "../client/index.ts";
import { localCandidates, mergeCandidates, type InterfaceAddress } from "../domain/candidates.ts";
import type { Candidate } from "../protocol/connection.ts";
import type { VerifiedGrant } from "./grant.ts";

/** How long posting the candidates may take, ms (the tunnel works without them: the host learns the client by roaming). */
export const ANNOUNCE_TIMEOUT_MS = 5_000;

/** This proxy's candidates: the addresses of `interfaces` of the family the socket bound to `bindHost`, on `port`, at most MAX_CANDIDATES. */
export function proxyCandidates(bindHost: string, port: number, interfaces: NodeJS.Dict<readonly InterfaceAddress[]>): Candidate[] {
  return mergeCandidates([], localCandidates(bindHost, port, interfaces));
}

/**
 * Posts `candidates` to the grant's Connection (POST
 * /v1/connections/{id}/messages with the grant's endpoint token) at the
 * scheduler `schedulerUrl`. Resolves with the number posted (0: there were
 * none, nothing is sent); rejects with the scheduler's stable code
 * (BeachballError) or a transport error; the caller logs and goes on.
 */
export async function announceCandidates(schedulerUrl: string, grant: Pick<VerifiedGrant, "connectionId" | "endpointToken">, candidates: Candidate[]): Promise<number> {
  if (candidates.length === 0) return 0;
  const rendezvous = new SchedulerClient(schedulerUrl, grant.endpointToken);
  await rendezvous.connectionMessages(grant.connectionId, { messages: [{ type: "candidates", seq: 1, candidates }] }, ANNOUNCE_TIMEOUT_MS);
  return candidates.length;
}
