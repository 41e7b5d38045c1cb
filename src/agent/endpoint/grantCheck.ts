/**
 * What the host endpoint checks before it applies a grant (spec "Networks,
 * addresses, and grants": "Clients and hosts verify the signature against
 * configured verification keys and reject anything that does not match
 * exactly"; "A grant targets exactly one generation and one host peer").
 *
 * Owns: the order of the checks and the refusal code of each: the signature
 * and freshness (src/protocol/connectionSignature.ts), this host's ID and
 * WireGuard public key, the command's grant ID, the placement the grant
 * names (UNKNOWN_PLACEMENT when this host runs none for the allocation) and
 * its current generation (STALE_GENERATION for an older one, GRANT_MISMATCH
 * for a newer one). Pure: time and the placement table are passed in.
 * Must never: accept a grant whose every field has not been checked.
 */
import type { GrantRefusalCode } from "../../protocol/agent.ts";
import type { GrantPayload } from "../../protocol/connection.ts";
import { checkSignedGrant, type ConnectionVerificationKeys } from "../../protocol/connectionSignature.ts";

/** Where a placement of an allocation runs on this host, as the endpoint needs it. */
export interface PlacementTarget {
  allocationId: string;
  /** The placement's current generation. */
  generation: number;
  /** The placement's network namespace (`bb-…`). */
  netns: string;
  /** The placement's nftables table (`bb_…`, inet family). */
  table: string;
  /** The guest's link inside the namespace (the TAP). */
  tap: string;
}

/** Finds the placement this host runs for an allocation, or null. */
export interface PlacementLookup {
  byAllocation(allocationId: string): PlacementTarget | null;
}

/** Who this endpoint is. */
export interface EndpointIdentity {
  hostId: string;
  /** Standard base64 of the endpoint's X25519 public key. */
  hostPublicKey: string;
  verificationKeys: ConnectionVerificationKeys;
}

/** A grant the endpoint may apply, with its placement; or why not. */
export type HostGrantCheck =
  | { ok: true; grant: GrantPayload; placement: PlacementTarget }
  | { ok: false; code: GrantRefusalCode; reason: string };

/** Runs every check (see the module doc) for a signed grant delivered under `grantId`, at wall-clock `nowMs`. */
export function checkGrantForHost(
  doc: unknown,
  grantId: string,
  id: EndpointIdentity,
  placements: PlacementLookup,
  nowMs: number,
): HostGrantCheck {
  const r = checkSignedGrant(
    doc,
    id.verificationKeys,
    { grantId, hostId: id.hostId, hostPublicKey: id.hostPublicKey },
    nowMs,
  );
  if (!r.ok) return { ok: false, code: r.code as GrantRefusalCode, reason: r.reason };
  const g = r.payload;
  const placement = placements.byAllocation(g.allocationId);
  if (!placement)
    return {
      ok: false,
      code: "UNKNOWN_PLACEMENT",
      reason: `grant ${g.grantId}: this host runs no placement of ${g.allocationId}`,
    };
  if (g.generation < placement.generation)
    return {
      ok: false,
      code: "STALE_GENERATION",
      reason: `grant ${g.grantId} is for generation ${g.generation}; the placement here is generation ${placement.generation}`,
    };
  if (g.generation !== placement.generation)
    return {
      ok: false,
      code: "GRANT_MISMATCH",
      reason: `grant ${g.grantId} is for generation ${g.generation}; the placement here is generation ${placement.generation}`,
    };
  return { ok: true, grant: g, placement };
}
