/**
 * Reconciling a host's applied grants with the scheduler's (spec "The
 * agent protocol": connectivity_update carries the applied grants;
 * "Revocation and replacement"; "Design principles": the scheduler is the
 * source of truth). The host endpoint keeps its grants in memory, so an
 * agent restart leaves the host with none while the scheduler still counts
 * them applied; a lost revoke can leave one the scheduler revoked.
 *
 * Given what the Host object handed out for each grant and what the host
 * reports it holds, decides which applies to hand out again (the host lacks
 * a grant that is live: acknowledged, unexpired, never revoked, and its
 * placement is still the host's current one at the grant's generation) and
 * which revokes to hand out again (the host holds a grant whose revoke it
 * already acknowledged). Each grant is redelivered at most
 * MAX_GRANT_REDELIVERIES_PER_SESSION times per agent session, so a host
 * that acknowledges but never holds a grant cannot make the scheduler
 * loop.
 * Pure: callers pass `nowMs` and the facts.
 * Must never: hand out an apply for a revoked, expired or stale-generation
 * grant, or for one whose apply the host refused.
 */

/** Most times one grant is redelivered (apply or revoke) within one agent session. */
export const MAX_GRANT_REDELIVERIES_PER_SESSION = 3;

/** Where one configure_connection the Host queued stands. */
export type CommandStatus = "pending" | "acked" | "rejected" | "superseded";

/** What the Host object knows of one grant it was asked to apply on its host. */
export interface HeldGrant {
  grantId: string;
  placementId: string;
  generation: number;
  expiresAtMs: number;
  /** Status of the grant's apply command, or null when none was queued. */
  apply: CommandStatus | null;
  /** Status of the grant's revoke command, or null when the grant was never revoked. */
  revoke: CommandStatus | null;
}

/** The redeliveries one connectivity_update calls for, by grant ID. */
export interface GrantRedeliveries {
  reapply: string[];
  rerevoke: string[];
}

/**
 * Decides the redeliveries (see the module header). `reported` are the
 * grant IDs of the update's appliedGrants; `current(placementId,
 * generation)` is true when that placement is the host's at that
 * generation and still wanted (not absent or going); `redelivered(grantId)`
 * counts this session's earlier redeliveries of the grant. A grant whose
 * revoke was queued but not yet acknowledged needs nothing here (the queue
 * hands it out on every poll); nor does a grant the host reports and the
 * scheduler never heard of (its rows are kept until it expires, so it is
 * one the host will drop at its own expiry).
 */
export function reconcileGrants(
  held: readonly HeldGrant[],
  reported: ReadonlySet<string>,
  nowMs: number,
  current: (placementId: string, generation: number) => boolean,
  redelivered: (grantId: string) => number,
): GrantRedeliveries {
  const out: GrantRedeliveries = { reapply: [], rerevoke: [] };
  for (const g of held) {
    if (g.expiresAtMs <= nowMs || redelivered(g.grantId) >= MAX_GRANT_REDELIVERIES_PER_SESSION) continue;
    const has = reported.has(g.grantId);
    if (g.revoke === null) {
      if (!has && g.apply === "acked" && current(g.placementId, g.generation)) out.reapply.push(g.grantId);
    } else if (has && g.revoke === "acked") {
      out.rerevoke.push(g.grantId);
    }
  }
  return out;
}
