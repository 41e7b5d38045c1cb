/**
 * The proxy's grant (spec "Data path" steps 2, 3 and 6): asks the scheduler
 * for a grant for this run's ephemeral public key, verifies every signature
 * in the answer before anything is bound or sent, and revokes the grant on
 * exit.
 *
 * Owns: what the proxy accepts from a grant response: a grant signed by a
 * configured key that names exactly the allocation, this client's key, the
 * transport and the remote port asked for, and is fresh; a signed, fresh
 * relay map; a client-role relay token per relay, each signed and naming its
 * relay and this grant; well-formed host candidates (at most MAX_CANDIDATES);
 * the deployment's STUN servers, when listed, as IP literals and ports (at
 * most MAX_STUN_SERVERS; they only make this proxy ask for its public
 * mapping, so they need no signature: a wrong one yields a candidate the
 * host's WireGuard handshake never confirms).
 * Must never: use any part of a response that failed a check, or print a
 * token.
 */
import { Value } from "@sinclair/typebox/value";
import type { SchedulerClient } from "../client/index.ts";
import {
  Candidate,
  MAX_CANDIDATES,
  type ConnectionGrantResponse,
  type GrantPayload,
  type GrantTransport,
  type RelayEntry,
  type SignedGrant,
  type SignedRelayToken,
} from "../protocol/connection.ts";
import {
  checkSignedGrant,
  checkSignedRelayMap,
  checkSignedRelayToken,
  type ConnectionVerificationKeys,
} from "../protocol/connectionSignature.ts";
import type { Clock } from "../protocol/clock.ts";
import { BeachballError } from "../protocol/errors.ts";
import { parseStunServers, type StunServer } from "../protocol/stunServers.ts";

/** Longest endpoint token or connection ID accepted, characters. */
const MAX_TOKEN_CHARS = 512;

/** A grant response that passed every check. */
export interface VerifiedGrant {
  grant: GrantPayload;
  /** The signed grant document as received (its payload is `grant`): what a client presents to the guest's control service. */
  signed: SignedGrant;
  /** Each relay of the map with this client's token for it. */
  relays: Array<{ entry: RelayEntry; token: SignedRelayToken }>;
  hostCandidates: Candidate[];
  /** The deployment's STUN servers (empty when the response lists none). */
  stunServers: StunServer[];
  connectionId: string;
  endpointToken: string;
}

/** What the proxy asked for, which the grant must match exactly. */
export interface GrantRequest {
  allocationId: string;
  clientPublicKey: string;
  transport: GrantTransport;
  port: number;
}

/**
 * Verifies a grant response (see the module doc) at wall-clock `nowMs`.
 * Throws BeachballError with the failing check's code: GRANT_SIGNATURE_INVALID,
 * GRANT_EXPIRED, GRANT_NOT_YET_VALID, GRANT_MISMATCH, RELAY_TOKEN_INVALID,
 * RELAY_TOKEN_EXPIRED, RELAY_TOKEN_WRONG_RELAY (GRANT_MISMATCH also for
 * malformed candidates, STUN servers, connection ID or endpoint token).
 */
export function verifyGrantResponse(
  resp: unknown,
  keys: ConnectionVerificationKeys,
  want: GrantRequest,
  nowMs: number,
): VerifiedGrant {
  const r = (typeof resp === "object" && resp !== null ? resp : {}) as Partial<ConnectionGrantResponse>;
  const g = checkSignedGrant(
    r.grant,
    keys,
    {
      allocationId: want.allocationId,
      clientPublicKey: want.clientPublicKey,
      transport: want.transport,
      port: want.port,
    },
    nowMs,
  );
  if (!g.ok) throw new BeachballError(g.code, g.reason);
  const m = checkSignedRelayMap(r.relayMap, keys, nowMs);
  if (!m.ok) throw new BeachballError(m.code, m.reason);
  const tokens = typeof r.relayTokens === "object" && r.relayTokens !== null ? r.relayTokens : {};
  const relays: VerifiedGrant["relays"] = [];
  for (const [relayId, token] of Object.entries(tokens)) {
    const entry = m.payload.relays.find((x) => x.relayId === relayId);
    if (!entry)
      throw new BeachballError(
        "RELAY_TOKEN_WRONG_RELAY",
        `a relay token is for relay ${JSON.stringify(relayId.slice(0, 64))}, which the relay map does not list`,
      );
    const t = checkSignedRelayToken(token, keys, { relayId, grantId: g.payload.grantId, role: "client" }, nowMs);
    if (!t.ok) throw new BeachballError(t.code, t.reason);
    relays.push({ entry, token: token as SignedRelayToken });
  }
  const cands = Array.isArray(r.hostCandidates) ? r.hostCandidates : null;
  if (!cands || cands.length > MAX_CANDIDATES || !cands.every((c) => Value.Check(Candidate, c)))
    throw new BeachballError(
      "GRANT_MISMATCH",
      `the grant response's host candidates are not a list of at most ${MAX_CANDIDATES} candidates`,
    );
  let stunServers: StunServer[] = [];
  if (r.stunServers !== undefined) {
    if (!Array.isArray(r.stunServers) || !r.stunServers.every((x) => typeof x === "string"))
      throw new BeachballError("GRANT_MISMATCH", "the grant response's STUN servers are not a list of strings");
    try {
      stunServers = parseStunServers(r.stunServers, "the grant response's STUN servers");
    } catch (e) {
      throw new BeachballError("GRANT_MISMATCH", (e as Error).message);
    }
  }
  const str = (v: unknown) => typeof v === "string" && v.length > 0 && v.length <= MAX_TOKEN_CHARS;
  if (!str(r.connectionId) || !str(r.endpointToken))
    throw new BeachballError("GRANT_MISMATCH", "the grant response carries no connection ID or endpoint token");
  return {
    grant: g.payload,
    signed: r.grant as SignedGrant,
    relays,
    hostCandidates: cands,
    stunServers,
    connectionId: r.connectionId!,
    endpointToken: r.endpointToken!,
  };
}

/** Asks for a grant and verifies the answer (verifyGrantResponse). Throws the scheduler's BeachballError (e.g. INVALID_STATE for a released allocation) or a verification error. */
export async function requestGrant(
  client: SchedulerClient,
  want: GrantRequest,
  keys: ConnectionVerificationKeys,
  ttlSeconds: number | undefined,
  clock: Clock,
): Promise<VerifiedGrant> {
  const resp = await client.createConnectionGrant(want.allocationId, {
    clientPublicKey: want.clientPublicKey,
    transport: want.transport,
    ports: [want.port],
    ...(ttlSeconds !== undefined ? { ttlSeconds } : {}),
  });
  return verifyGrantResponse(resp, keys, want, clock.wallMs());
}
