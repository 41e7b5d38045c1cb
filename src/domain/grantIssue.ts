/**
 * When the Network refuses to issue a connection grant (spec "Networks,
 * addresses, and grants", "Revocation and replacement"): the allocation has
 * no private address or was released, the generation was replaced, the
 * allocation or the Network holds too many grants, or the grant was revoked
 * while it was being handed to the host.
 * Pure: the Network (src/scheduler/objects/networkObject.ts) passes the
 * facts and throws the refusal as a BeachballError.
 * Must never: let a grant through for a closed generation or a released
 * allocation.
 */
import type { ErrorCode } from "../protocol/errors.ts";

/** Most unrevoked, unexpired grants one allocation holds at once. */
export const MAX_LIVE_GRANTS_PER_ALLOCATION = 16;
/** Most grants one Network holds that may still be applied on a host (each holds a client address). */
export const MAX_GRANTS_PER_NETWORK = 4096;

/** A refused grant: the stable code, a sentence for the caller, and when to retry (RATE_LIMITED only), seconds. */
export interface GrantRefusal {
  code: Extract<ErrorCode, "INVALID_STATE" | "STALE_GENERATION" | "RATE_LIMITED">;
  message: string;
  retryAfterSeconds?: number;
}

/** The Network's facts of an allocation a grant is for (null: it has no private address). */
export interface GrantAllocation {
  /** When the allocation ended, ms since the epoch, or null while it lives. */
  terminalAtMs: number | null;
  /** The highest generation closed to new grants (0: none). */
  closedGeneration: number;
}

/**
 * Why no grant may be issued for `generation` of `a`, or null when one may:
 * INVALID_STATE without a private address (the allocation was created
 * before private networking was configured) or once released;
 * STALE_GENERATION for a generation that was replaced.
 */
export function closedGrantRefusal(a: GrantAllocation | null, generation: number): GrantRefusal | null {
  if (!a)
    return {
      code: "INVALID_STATE",
      message: "allocation has no private address (created before private networking was configured)",
    };
  if (a.terminalAtMs !== null) return { code: "INVALID_STATE", message: "allocation is released" };
  if (generation <= a.closedGeneration)
    return { code: "STALE_GENERATION", message: `generation ${generation} was replaced; no grant is issued for it` };
  return null;
}

/**
 * RATE_LIMITED when the allocation holds `liveOfAllocation` live grants
 * (≥ MAX_LIVE_GRANTS_PER_ALLOCATION) or the Network `heldByNetwork` grants
 * that may still be applied (≥ MAX_GRANTS_PER_NETWORK); else null.
 */
export function grantLimitRefusal(liveOfAllocation: number, heldByNetwork: number): GrantRefusal | null {
  if (liveOfAllocation >= MAX_LIVE_GRANTS_PER_ALLOCATION)
    return {
      code: "RATE_LIMITED",
      message: `an allocation holds at most ${MAX_LIVE_GRANTS_PER_ALLOCATION} live grants; revoke one first`,
      retryAfterSeconds: 5,
    };
  if (heldByNetwork >= MAX_GRANTS_PER_NETWORK)
    return {
      code: "RATE_LIMITED",
      message: `a Network holds at most ${MAX_GRANTS_PER_NETWORK} grants that may still be applied`,
      retryAfterSeconds: 30,
    };
  return null;
}

/**
 * After the grant was handed to its host: null when it still stands
 * (`revoked` false), else why it was revoked meanwhile: INVALID_STATE when
 * the allocation `a` was released (or is gone), STALE_GENERATION when it
 * was replaced.
 */
export function revokedWhileIssuedRefusal(revoked: boolean, a: GrantAllocation | null): GrantRefusal | null {
  if (!revoked) return null;
  if (!a || a.terminalAtMs !== null)
    return { code: "INVALID_STATE", message: "the allocation was released while the grant was issued" };
  return { code: "STALE_GENERATION", message: "the allocation was replaced while the grant was issued" };
}
