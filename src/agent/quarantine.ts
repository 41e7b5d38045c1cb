/**
 * The quarantine's bookkeeping (spec "Agent runtime and local state":
 * Beachball-named resources no placement owns are quarantined and
 * reported, never deleted). The startup inventory fills it; while it is
 * non-empty, housekeeping runs the inventory again every
 * QUARANTINE_RECHECK_MS and drops what an operator has since resolved, so
 * a quarantine that has emptied clears without a restart. A re-run only
 * shrinks the quarantine: a resource that appears after startup may belong
 * to a placement being prepared right now, so it is never quarantined late.
 * Resources named for another host on this machine (resourceNames.ts) are
 * reported (logged once, kept in `otherHostResources`) and never counted.
 * Must never: delete or signal anything, or count another host's resource.
 */
import type { ForeignResource } from "./inventory.ts";
import type { AgentHealth } from "./health.ts";
import type { AgentLog } from "./ports.ts";

/** Time between inventory re-runs while something is quarantined or another host's resources are seen, ms. */
export const QUARANTINE_RECHECK_MS = 10_000;

const keyOf = (f: ForeignResource) => `${f.kind} ${f.name}`;

/**
 * Records what an inventory found in `health` and logs what changed.
 * `startup`: the first inventory, which sets the quarantine; later ones
 * only keep the part of it still found.
 */
export function applyInventory(health: AgentHealth, found: ForeignResource[], log: AgentLog, startup: boolean): void {
  const before = new Set(health.quarantine);
  const counted = found.filter((f) => f.otherHost === undefined);
  const next = startup ? counted : counted.filter((f) => before.has(keyOf(f)));
  for (const f of next)
    if (!before.has(keyOf(f)))
      log.warn("foreign resource quarantined (not deleted); isolation is unhealthy until an operator resolves it", {
        kind: f.kind,
        name: f.name,
      });
  const seenOthers = new Set(health.otherHostResources);
  const others = found.filter((f) => f.otherHost !== undefined);
  for (const f of others)
    if (!seenOthers.has(keyOf(f)))
      log.info("resource of another host on this machine; ignored", {
        kind: f.kind,
        name: f.name,
        ownerTag: f.otherHost,
      });
  const still = new Set(next.map(keyOf));
  if (!startup) for (const k of before) if (!still.has(k)) log.info("quarantined resource gone", { resource: k });
  health.quarantine = next.map(keyOf);
  health.otherHostResources = others.map(keyOf);
  if (!startup && before.size > 0 && next.length === 0)
    log.info("quarantine cleared: every quarantined resource is gone", { resolved: before.size });
}

/** True when housekeeping should run the inventory again. */
export function recheckWanted(health: AgentHealth): boolean {
  return health.quarantine.length > 0 || health.otherHostResources.length > 0;
}
