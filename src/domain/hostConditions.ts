/**
 * Whether a host may receive reservations (spec "Administrative state and
 * health", "Capacity accounting", "Sessions and epochs"). Pure.
 *
 * Only active and healthy hosts are schedulable, and four more conditions
 * make a host unschedulable: inventory disagreeing with registered
 * capacity, clock skew over 5 s, a failed isolation self-check, nearly full
 * volumes, and a VMM that keeps failing to start. An overlapping agent session keeps it suspect until one epoch wins.
 */
import { healthFromHeartbeat } from "./health.ts";

/** Largest tolerated clock skew between agent and scheduler, ms. */
export const MAX_CLOCK_SKEW_MS = 5_000;
/** How long an overlapping session keeps a host suspect, ms. */
export const OVERLAP_SUSPECT_MS = 90_000;

/** Facts the Host object keeps about its agent's last reports. */
export interface HostFacts {
  adminState: "active" | "draining" | "disabled";
  heartbeatAtMs: number | null;
  isolationHealthy: boolean;
  /** |agent sentAt − scheduler now| at the last envelope, ms. */
  clockSkewMs: number;
  /** Physical inventory the agent reported (null: not reported yet). */
  inventory: { cpuMillis: number; memoryMiB: number } | null;
  registered: { cpuMillis: number; memoryMiB: number };
  volumesNearlyFull: boolean;
  /** Until when an overlapping session keeps the host suspect, ms since epoch (0: none). */
  overlapUntilMs: number;
  /** The agent reports repeated VMM start failures (or a failed VMM test boot) not yet cleared by a passing self-check. */
  vmmStartFailing?: boolean;
}

/** Stable codes for why a host is unschedulable. */
export type UnschedulableReason =
  | "HOST_NOT_ACTIVE"
  | "HOST_NOT_HEALTHY"
  | "OVERLAPPING_AGENT_SESSION"
  | "INVENTORY_MISMATCH"
  | "CLOCK_SKEW"
  | "ISOLATION_UNHEALTHY"
  | "VOLUMES_NEARLY_FULL"
  | "VMM_START_FAILING";

/**
 * Every reason the host is unschedulable at `nowMs` (empty: schedulable).
 * Inventory may exceed the registration (an operator may register less than
 * the machine has) but never fall below it.
 */
export function unschedulableReasons(f: HostFacts, nowMs: number): UnschedulableReason[] {
  const out: UnschedulableReason[] = [];
  if (f.adminState !== "active") out.push("HOST_NOT_ACTIVE");
  if (healthFromHeartbeat(f.heartbeatAtMs, nowMs) !== "healthy") out.push("HOST_NOT_HEALTHY");
  if (f.overlapUntilMs > nowMs) out.push("OVERLAPPING_AGENT_SESSION");
  if (f.inventory && (f.inventory.cpuMillis < f.registered.cpuMillis || f.inventory.memoryMiB < f.registered.memoryMiB))
    out.push("INVENTORY_MISMATCH");
  if (f.clockSkewMs > MAX_CLOCK_SKEW_MS) out.push("CLOCK_SKEW");
  if (!f.isolationHealthy) out.push("ISOLATION_UNHEALTHY");
  if (f.volumesNearlyFull) out.push("VOLUMES_NEARLY_FULL");
  if (f.vmmStartFailing) out.push("VMM_START_FAILING");
  return out;
}
