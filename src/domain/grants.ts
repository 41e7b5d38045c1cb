/**
 * Connection-grant rules without I/O (spec "Networks, addresses, and
 * grants", "Revocation and replacement"): whether a request fits the
 * deployment's grant policy, how long the grant lives, when a grant counts
 * as gone from its host, and when a generation's grants are fenced.
 *
 * A grant is gone from its host once the host acknowledged its revoke
 * command (the agent acknowledges only after removing the peer) or once it
 * has expired by more than GRANT_EXPIRY_GRACE_MS: the host removes expired
 * peers on its own, so expiry fences even a host that cannot be reached.
 * Pure: callers pass `nowMs`.
 * Must never: treat a revoked grant as gone before its host confirmed it or
 * it expired, or allow a port or transport the policy does not list.
 */
import type { GrantTransport } from "../protocol/connection.ts";

/**
 * Margin after a grant's expiry before the scheduler counts it gone from a
 * host it has not heard from, ms: covers the host clock's tolerated skew
 * (5 s makes a host unschedulable) and the endpoint's expiry timer.
 */
export const GRANT_EXPIRY_GRACE_MS = 15_000;

/** What a workload class (or the deployment default) lets a grant open. */
export interface ConnectionPolicy {
  transports: readonly GrantTransport[];
  /** Destination ports: `"22"` or an inclusive range `"8000-8100"`. */
  ports: readonly string[];
}

/** A refused grant request: the stable code and a sentence for the caller. */
export interface PolicyRefusal {
  code: "FORBIDDEN";
  message: string;
}

/** Parses `"N"` or `"LO-HI"` (1..65535, LO ≤ HI) into an inclusive range, or null. */
export function parsePortRange(s: string): [number, number] | null {
  const m = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(s);
  if (!m) return null;
  const lo = Number(m[1]);
  const hi = m[2] === undefined ? lo : Number(m[2]);
  if (lo < 1 || hi > 65_535 || lo > hi) return null;
  return [lo, hi];
}

/** True if `policy` allows destination `port`. */
export function portAllowed(policy: ConnectionPolicy, port: number): boolean {
  return policy.ports.some((p) => {
    const r = parsePortRange(p);
    return r !== null && port >= r[0] && port <= r[1];
  });
}

/**
 * Checks a grant request against the policy of its workload class (null:
 * the class allows no grant) and returns the grant's lifetime, ms: the
 * requested `ttlSeconds`, else `defaultTtlSeconds`, never above
 * `maxTtlSeconds`. Refuses with FORBIDDEN naming the first transport or
 * port the policy does not allow.
 */
export function checkGrantRequest(
  policy: ConnectionPolicy | null,
  req: { transport: GrantTransport; ports: readonly number[]; ttlSeconds?: number | undefined },
  limits: { maxTtlSeconds: number; defaultTtlSeconds: number },
): { ok: true; ttlMs: number } | { ok: false; refusal: PolicyRefusal } {
  const refuse = (message: string) => ({ ok: false as const, refusal: { code: "FORBIDDEN" as const, message } });
  if (!policy) return refuse("this workload class allows no connection grants");
  if (!policy.transports.includes(req.transport))
    return refuse(
      `transport ${req.transport} is not allowed for this workload class (allowed: ${policy.transports.join(", ") || "none"})`,
    );
  const denied = req.ports.find((p) => !portAllowed(policy, p));
  if (denied !== undefined)
    return refuse(
      `port ${denied} is not allowed for this workload class (allowed: ${policy.ports.join(", ") || "none"})`,
    );
  const seconds = Math.min(req.ttlSeconds ?? limits.defaultTtlSeconds, limits.maxTtlSeconds);
  return { ok: true, ttlMs: seconds * 1000 };
}

/** What decides whether a grant is still possibly applied on its host. */
export interface GrantFacts {
  expiresAtMs: number;
  /** When the host acknowledged the revoke command, or null. */
  revokeObservedAtMs: number | null;
}

/** True once the grant can no longer be applied on its host (see the module header). */
export function grantGone(g: GrantFacts, nowMs: number): boolean {
  return g.revokeObservedAtMs !== null || nowMs >= g.expiresAtMs + GRANT_EXPIRY_GRACE_MS;
}

/**
 * Whether every grant of a generation is gone, and if not, the latest time
 * by which expiry alone fences them all (ms), so a caller can wait.
 */
export function generationFenced(
  grants: readonly GrantFacts[],
  nowMs: number,
): { fenced: true } | { fenced: false; byMs: number } {
  let byMs = 0;
  for (const g of grants) if (!grantGone(g, nowMs)) byMs = Math.max(byMs, g.expiresAtMs + GRANT_EXPIRY_GRACE_MS);
  return byMs === 0 ? { fenced: true } : { fenced: false, byMs };
}

/** What the stale-grant rule reads of a grant: its generation and whether it was revoked or is gone. */
export interface GrantStanding {
  generation: number;
  revokedAtMs: number | null;
  goneAtMs: number | null;
}

/** What the stale-grant rule reads of the grant's allocation in its Network. */
export interface AllocationStanding {
  /** Grants are refused (and revoked) for generations up to this one. */
  closedGeneration: number;
  /** When the allocation ended (its cleanup completed), or null. */
  terminalAtMs: number | null;
}

/**
 * True if a grant must be revoked now (spec "Revocation and replacement"):
 * it is neither revoked nor gone yet, and its allocation ended or its
 * generation was closed (replaced or released). A grant whose allocation
 * the Network does not know (`alloc` null) is not stale by this rule.
 */
export function grantStale(g: GrantStanding, alloc: AllocationStanding | null): boolean {
  if (!alloc || g.revokedAtMs !== null || g.goneAtMs !== null) return false;
  return alloc.terminalAtMs !== null || g.generation <= alloc.closedGeneration;
}
