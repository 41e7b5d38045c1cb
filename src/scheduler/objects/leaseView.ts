/**
 * The API view of a lease row (issue 22, "Leases"), for the Leases object.
 * Must never: show a lease to a caller without access (the object checks).
 */
import type { LeaseAccess, LeaseView } from "../../protocol/leases.ts";
import type { LeaseRow } from "./leaseSchema.ts";

/** ms since the epoch as ISO 8601. */
export const iso = (ms: number) => new Date(ms).toISOString();

/** The API view of a lease for a caller with `access`. */
export function viewOf(r: LeaseRow, access: "owner" | LeaseAccess): LeaseView {
  return {
    leaseId: r.leaseId,
    clientRequestId: r.clientRequestId,
    workloadClass: r.workloadClass,
    owner: r.owner,
    access,
    state: r.state as LeaseView["state"],
    reason: r.reason,
    allocationId: r.allocationId,
    labels: JSON.parse(r.labelsJson) as Record<string, string>,
    createdAt: iso(r.createdAtMs),
    expiresAt: iso(r.expiresAtMs),
    idleSeconds: r.idleMs === null ? null : Math.round(r.idleMs / 1000),
    lastActivityAt: iso(r.lastActivityAtMs),
    idleExpiresAt: r.idleMs === null ? null : iso(r.lastActivityAtMs + r.idleMs),
    endedAt: r.endedAtMs === null ? null : iso(r.endedAtMs),
    shares: JSON.parse(r.sharesJson) as Record<string, LeaseAccess>,
  };
}
