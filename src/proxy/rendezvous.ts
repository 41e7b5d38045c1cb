/**
 * The proxy's side of the rendezvous (spec "Data path" step 4,
 * "Coordination and path selection"): posts where this proxy can be
 * reached (src/proxy/candidateRefresh.ts gathers it) to the grant's
 * Connection, under the grant's endpoint token. The scheduler hands the
 * newest list to the host endpoint in configure_connection, and the host
 * sends to them (hole punching) instead of waiting to learn the client only
 * by roaming.
 *
 * It also asks the same Connection for fresh relay tokens
 * (src/proxy/relayTokenRefresh.ts), under the same token.
 *
 * Owns: the candidates message and its bound (MAX_CANDIDATES). Must never:
 * send the endpoint token anywhere but the scheduler that issued it.
 */
import { SchedulerClient } from "../client/index.ts";
import type { Candidate, ConnectionRelayTokensResponse } from "../protocol/connection.ts";
import type { VerifiedGrant } from "./grant.ts";

/** How long posting the candidates may take, ms (the tunnel works without them: the host learns the client by roaming). */
export const ANNOUNCE_TIMEOUT_MS = 5_000;

/**
 * Posts `candidates` as the client's message `seq` (each run has its own
 * Connection: 1 for the first list, one more for each later one) to the
 * grant's Connection (POST /v1/connections/{id}/messages with the grant's
 * endpoint token) at the scheduler `schedulerUrl`. Resolves with the number
 * posted; rejects with the scheduler's stable code (BeachballError:
 * UNAUTHENTICATED once the grant ended, RATE_LIMITED, VALIDATION_FAILED) or
 * a transport error; the caller logs and goes on.
 */
export async function announceCandidates(
  schedulerUrl: string,
  grant: Pick<VerifiedGrant, "connectionId" | "endpointToken">,
  candidates: Candidate[],
  seq = 1,
): Promise<number> {
  const rendezvous = new SchedulerClient(schedulerUrl, grant.endpointToken);
  await rendezvous.connectionMessages(
    grant.connectionId,
    { messages: [{ type: "candidates", seq, candidates }] },
    ANNOUNCE_TIMEOUT_MS,
  );
  return candidates.length;
}

/** How long a relay-token request may take, ms. */
export const RELAY_TOKENS_TIMEOUT_MS = 10_000;

/**
 * Asks the scheduler `schedulerUrl` for fresh client relay tokens of the
 * grant's Connection (POST /v1/connections/{id}/relay-tokens with the
 * grant's endpoint token). Unverified: the caller checks every token.
 * Rejects with the scheduler's stable code (UNAUTHENTICATED once the grant
 * ended, RATE_LIMITED) or a transport error.
 */
export async function fetchRelayTokens(
  schedulerUrl: string,
  grant: Pick<VerifiedGrant, "connectionId" | "endpointToken">,
): Promise<ConnectionRelayTokensResponse> {
  return new SchedulerClient(schedulerUrl, grant.endpointToken).connectionRelayTokens(
    grant.connectionId,
    RELAY_TOKENS_TIMEOUT_MS,
  );
}
