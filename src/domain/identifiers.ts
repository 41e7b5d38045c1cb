/**
 * Deterministic identifiers (spec "Worker and Durable Objects", "Messages").
 * Pure. The allocation ID is a digest of identity + clientRequestId, so two
 * identical requests from one client reach the same object. The shapes
 * (prefixes, digit counts, patterns) are declared once in
 * src/protocol/ids.ts, which the checks everywhere use.
 */
import { canonicalJson } from "../protocol/canonical.ts";
import {
  ALLOCATION_ID_PREFIX,
  ID_HEX_DIGITS,
  LEASE_ID_PREFIX,
  NETWORK_ID_PREFIX,
  RUN_ID_PREFIX,
} from "../protocol/ids.ts";
import type { CommandType } from "../protocol/agent.ts";
import { sha256 } from "@noble/hashes/sha2.js";
import { utf8ToBytes, bytesToHex } from "@noble/hashes/utils.js";

/** `alloc_` + the first 128 bits of SHA-256(identity NUL clientRequestId), hex. */
export function allocationIdFor(identity: string, clientRequestId: string): string {
  return `${ALLOCATION_ID_PREFIX}${bytesToHex(sha256(utf8ToBytes(`${identity}\u0000${clientRequestId}`))).slice(0, ID_HEX_DIGITS)}`;
}

/** `run_` + the first 128 bits of SHA-256("run" NUL identity NUL clientRequestId), hex: a repeated submit reaches the same run. */
export function runIdFor(identity: string, clientRequestId: string): string {
  return `${RUN_ID_PREFIX}${bytesToHex(sha256(utf8ToBytes(`run\u0000${identity}\u0000${clientRequestId}`))).slice(0, ID_HEX_DIGITS)}`;
}

/**
 * The clientRequestId of a run's allocation: `run/<runId>`. A `/` is outside
 * what a create body's clientRequestId may hold, so no controller can take
 * the key first; a dispatch repeated after a crash creates the same
 * allocation (issue 22: "no run runs twice").
 */
export function runAllocationRequestId(runId: string): string {
  return `run/${runId}`;
}

/** `lse_` + the first 128 bits of SHA-256("lease" NUL identity NUL clientRequestId), hex. */
export function leaseIdFor(identity: string, clientRequestId: string): string {
  return `${LEASE_ID_PREFIX}${bytesToHex(sha256(utf8ToBytes(`lease\u0000${identity}\u0000${clientRequestId}`))).slice(0, ID_HEX_DIGITS)}`;
}

/** The clientRequestId of a lease's allocation: `lease/<leaseId>` (a `/` no create body may hold). */
export function leaseAllocationRequestId(leaseId: string): string {
  return `lease/${leaseId}`;
}

/** The lease ID an allocation's clientRequestId names, or null for any other allocation. */
export function leaseOfAllocation(clientRequestId: string): string | null {
  return clientRequestId.startsWith("lease/") ? clientRequestId.slice(6) : null;
}

/** The run ID an allocation's clientRequestId names (see runAllocationRequestId), or null for any other allocation. */
export function runOfAllocation(clientRequestId: string): string | null {
  return clientRequestId.startsWith("run/") ? clientRequestId.slice(4) : null;
}

/**
 * Deterministic command ID: `{placement}:{present|running|paused|suspended|absent}:{generation}`,
 * then `:{step}` when `step` > 0. A placement's step counts its pauses,
 * suspends and resumes (the Host object keeps it), so a VM paused and
 * resumed twice in one generation gets a fresh ID for each command and the
 * agent's idempotency by ID still holds.
 */
export function commandIdFor(placementId: string, type: CommandType, generation: number, step = 0): string {
  const base = `${placementId}:${type.slice("ensure_".length)}:${generation}`;
  return step > 0 ? `${base}:${step}` : base;
}

/** Reservation idempotency key: `reserve:{allocation}:{generation}:{host}` (spec "Reservation"). */
export function reservationKey(allocationId: string, generation: number, hostId: string): string {
  return `reserve:${allocationId}:${generation}:${hostId}`;
}

/** Hex SHA-256 of a UTF-8 string, prefixed `sha256:`. */
export function digestOf(text: string): string {
  return `sha256:${bytesToHex(sha256(utf8ToBytes(text)))}`;
}

/** Canonical JSON (src/protocol/canonical.ts), used for body digests. */
export { canonicalJson };

/**
 * The default Network of a principal (one per controller for now; spec
 * "Networks, addresses, and grants"): `net_` + the first 128 bits of
 * SHA-256("network" NUL "default" NUL identity), hex. Names the Network
 * object; addresses are never derived from it.
 */
export function defaultNetworkIdFor(identity: string): string {
  return `${NETWORK_ID_PREFIX}${bytesToHex(sha256(utf8ToBytes(`network\u0000default\u0000${identity}`))).slice(0, ID_HEX_DIGITS)}`;
}

/** Deterministic configure_connection command ID: `{grantId}:{apply|revoke}`. */
export function connectionCommandIdFor(grantId: string, action: "apply" | "revoke"): string {
  return `${grantId}:${action}`;
}
