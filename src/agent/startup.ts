/**
 * Agent startup (spec "Agent runtime and local state": "A starting agent
 * does three things before it accepts any command"): take the lock, run the
 * prerequisite registry, then inventory. Every placement in agent.db is
 * reconciled against what still exists: a VM whose PID, start time and
 * instance ID match is marked for adoption (its runner reconnects to the
 * guest), a VM that vanished while it was starting or running is reported
 * VM_EXITED with its diagnosis, an interrupted Prepare starts over. Beachball-named resources
 * no placement owns are quarantined and reported, never deleted.
 * Must never: delete, signal or adopt anything that does not match
 * agent.db exactly.
 */
import type { AgentStore } from "./store.ts";
import type { AgentLog } from "./ports.ts";
import type { VmmDriver } from "./vmm/driver.ts";
import type { PlacementReconciler } from "./reconcile/reconciler.ts";
import type { ForeignResource } from "./inventory.ts";
import type { CheckResult } from "./doctor/format.ts";
import type { Clock } from "../protocol/clock.ts";

/** Startup's side effects. */
export interface StartupPorts {
  /** Takes the exclusive agent lock (throws when a live agent holds it); returns its release. */
  lock(): () => void;
  /** The prerequisite registry shared with `bb agent doctor`. */
  selfChecks(): Promise<CheckResult[]>;
  /** Beachball-named resources on this machine that none of `known` (placement names) owns; another host's marked `otherHost`. */
  inventory(known: ReadonlySet<string>): Promise<ForeignResource[]>;
}

/** IDs of failed prerequisite checks that make the host unhealthy (scheduler liveness is reported, not held against the host). */
export function failedPrerequisites(checks: CheckResult[], log: AgentLog): string[] {
  for (const c of checks)
    if (c.status === "fail") log.warn("prerequisite failed", { check: c.id, detail: c.detail, fix: c.fix });
  return checks.filter((c) => c.status === "fail" && c.id !== "scheduler").map((c) => c.id);
}

/**
 * Reconciles agent.db with this host after a (re)start and queues every
 * live placement's runner. Returns what the inventory found (quarantine.ts
 * records it).
 */
export async function recoverPlacements(d: {
  store: AgentStore;
  driver: VmmDriver;
  reconciler: PlacementReconciler;
  clock: Clock;
  log: AgentLog;
  ports: StartupPorts;
}): Promise<ForeignResource[]> {
  const known = new Set<string>();
  for (const p of d.store.livePlacements()) {
    known.add(p.dirName);
    if (p.vmPid !== null && p.vmStartTime !== null) {
      const handle = { instanceId: p.dirName, pid: p.vmPid, startTime: p.vmStartTime };
      if (await d.driver.isAlive(handle)) {
        d.reconciler.markForAdoption(p.placementId, handle); // the runner reconnects without blocking startup
      } else if (
        (p.observed === "starting" || p.observed === "running" || p.observed === "paused") &&
        p.desired !== "absent"
      ) {
        d.reconciler.markExited(p.placementId, handle); // its runner reports VM_EXITED with what the console says
      }
    }
    if (p.observed === "preparing") d.store.patch(p.placementId, { observed: "accepted" });
    d.reconciler.kick(p.placementId);
  }
  return d.ports.inventory(known);
}
