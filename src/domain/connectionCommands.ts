/**
 * The Host object's rules for its configure_connection queue (spec "The
 * agent protocol": connectivity_update, configure_connection; "Revocation
 * and replacement"): which connectivity_update is newer than the stored
 * one, what an agent's acknowledgement does to a command, whether an apply
 * is still worth handing out, and whether the client's newest candidates
 * send a grant's apply back to the host.
 * Pure: callers pass `nowMs` and the facts (src/scheduler/objects/hostConnections.ts
 * loads them and persists the outcome).
 * Must never: hand out an apply for a grant that is revoked or expired, or
 * report a revoke as observed before the agent accepted it.
 */
import { GRANT_EXPIRY_GRACE_MS } from "./grants.ts";
import type { CommandStatus } from "./grantReconcile.ts";

/** Most times a grant's apply goes back to the host with newer client candidates (later lists are ignored). */
export const MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT = 16;

/**
 * True when a connectivity_update (`epoch`, `seq`) is newer than the stored
 * one `prev` (null: none stored): a different agent session, or a higher
 * sequence number in the same one.
 */
export function isNewerConnectivity(
  prev: { agentEpoch: string; seq: number } | null,
  epoch: string,
  seq: number,
): boolean {
  return prev === null || prev.agentEpoch !== epoch || prev.seq < seq;
}

/**
 * What the agent's acknowledgement `result` does to a command in `status`:
 * null when the command is no longer pending (a duplicate or late ack is
 * ignored), else its new status, and whether a revoke counts as observed on
 * the host (an accepted or duplicate revoke, never a rejected one).
 */
export function ackOutcome(
  action: "apply" | "revoke",
  status: CommandStatus,
  result: string,
): { status: "acked" | "rejected"; revokeObserved: boolean } | null {
  if (status !== "pending") return null;
  const ok = result !== "rejected";
  return { status: ok ? "acked" : "rejected", revokeObserved: action === "revoke" && ok };
}

/**
 * Whether a pending command is handed out or superseded at `nowMs`
 * (milliseconds since the epoch): an apply whose grant expired, or that
 * cannot be signed (`canSign` false: no signer or connection settings), is
 * superseded (the host would refuse it and removes expired peers itself);
 * a revoke is superseded only once its grant expired more than
 * GRANT_EXPIRY_GRACE_MS ago (the host removed the peer on its own).
 */
export function handoutDecision(
  action: "apply" | "revoke",
  expiresAtMs: number,
  nowMs: number,
  canSign: boolean,
): "hand_out" | "supersede" {
  if (action === "revoke") return expiresAtMs + GRANT_EXPIRY_GRACE_MS <= nowMs ? "supersede" : "hand_out";
  return expiresAtMs <= nowMs || !canSign ? "supersede" : "hand_out";
}

/** A grant's apply command as the client-candidates rule needs it. */
export interface ApplyForCandidates {
  status: CommandStatus;
  expiresAtMs: number;
  /** The candidates stored with the apply (JSON), or null before the client posted any. */
  clientCandidatesJson: string | null;
  /** How often the client's candidates changed already. */
  clientCandidateUpdates: number;
}

/**
 * True when the client's candidates `json` go to the host with the grant's
 * apply `apply` (the apply goes back in the queue): the apply was neither
 * refused nor superseded, the grant is unexpired at `nowMs` and not
 * revoked, the list differs from the stored one, and fewer than
 * MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT lists came already.
 */
export function acceptClientCandidates(
  apply: ApplyForCandidates,
  revoked: boolean,
  json: string,
  nowMs: number,
): boolean {
  if (apply.status === "rejected" || apply.status === "superseded") return false;
  if (apply.expiresAtMs <= nowMs || apply.clientCandidatesJson === json) return false;
  if (apply.clientCandidateUpdates >= MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT) return false;
  return !revoked;
}
