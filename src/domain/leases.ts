/**
 * The rules of leases (issue 22, "Leases"), without I/O: when a lease ends
 * and why, when it says it is expiring soon, and what a principal may do
 * with it. Activity (a heartbeat, a connection grant for its VM) moves the
 * idle deadline; nothing moves the TTL but an extend.
 * Must never: read a clock (callers pass `nowMs`), or let anyone but the
 * owner and the principals it was shared with see a lease.
 */
import { LEASE_EXPIRING_SOON_MS, type LeaseAccess } from "../protocol/leases.ts";

/** What the rules read of a lease (ms since the epoch). */
export interface LeaseTimes {
  expiresAtMs: number;
  idleMs: number | null;
  lastActivityAtMs: number;
}

/** The moment the lease ends and why: the earlier of its TTL and its idle deadline. */
export function leaseDeadline(l: LeaseTimes): { atMs: number; reason: "TTL_EXPIRED" | "IDLE_EXPIRED" } {
  const idleAt = l.idleMs === null ? Number.POSITIVE_INFINITY : l.lastActivityAtMs + l.idleMs;
  return idleAt < l.expiresAtMs
    ? { atMs: idleAt, reason: "IDLE_EXPIRED" }
    : { atMs: l.expiresAtMs, reason: "TTL_EXPIRED" };
}

/** When the lease says it is expiring soon: before its deadline by a tenth of its idle timeout (or of its TTL span), at most LEASE_EXPIRING_SOON_MS. */
export function expiringSoonAt(l: LeaseTimes, createdAtMs: number): number {
  const d = leaseDeadline(l);
  const span = d.reason === "IDLE_EXPIRED" ? l.idleMs! : l.expiresAtMs - createdAtMs;
  return d.atMs - Math.min(LEASE_EXPIRING_SOON_MS, Math.floor(span / 10));
}

/** What `principal` may do with a lease owned by `owner` and shared as `shares`: owner, use, read, or null (it may not see it). */
export function leaseAccess(
  owner: string,
  shares: Readonly<Record<string, LeaseAccess>>,
  principal: string,
): "owner" | LeaseAccess | null {
  if (principal === owner) return "owner";
  return shares[principal] ?? null;
}
