/**
 * PlacementError: an error carrying one of the bounded agent error codes
 * (AGENT_ERROR_CODES in src/protocol/errors.ts, spec "Messages").
 * Must never: carry a payload, nonce or credential in its message.
 */
import type { AgentErrorCode } from "../protocol/errors.ts";

/** An error with a stable agent error code. */
export class PlacementError extends Error {
  constructor(
    readonly code: AgentErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "PlacementError";
  }
}

/** Maps any thrown value to a PlacementError, keeping a known `code`. */
export function asPlacementError(e: unknown, fallback: AgentErrorCode): PlacementError {
  if (e instanceof PlacementError) return e;
  const code = (e as { code?: unknown })?.code;
  const known: AgentErrorCode[] = ["IMAGE_DIGEST_MISMATCH", "IMAGE_SIGNATURE_INVALID", "IMAGE_NOT_FOUND", "NETWORK_SETUP_FAILED", "VMM_START_FAILED", "CLEANUP_FAILED", "INSUFFICIENT_LOCAL_DISK", "LEASE_EXPIRED", "GUEST_BOOT_TIMEOUT"];
  return new PlacementError(known.includes(code as AgentErrorCode) ? (code as AgentErrorCode) : fallback, (e as Error)?.message ?? String(e));
}
