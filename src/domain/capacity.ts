/**
 * Capacity arithmetic (spec "Capacity accounting", "Reservation").
 *
 * Pure. allocatable = registered − operator reserve; used = the sum over
 * capacity-consuming placements, each holding what its row says: all it
 * reserved, less what a pause (CPU) or a suspend (CPU and memory) gave back
 * until a resume takes it again (issue 21, spec "States"; heldAfter).
 * Must never: let a request that does not fit pass.
 */
import type { Resources } from "../protocol/views.ts";

/** A resource vector (defined with the API shapes in src/protocol/views.ts). */
export type { Resources };

/**
 * Host-side placement states (the Host object's own view). `paused`: the
 * agent confirmed the vCPUs stopped; `suspended`: it confirmed the VMM gone
 * with the memory saved to disk; `resuming`: the Host took the capacity back
 * and asked the agent to let the VM run (before the agent confirms running).
 */
export type HostPlacementState =
  | "reserved"
  | "preparing"
  | "running"
  | "paused"
  | "suspended"
  | "resuming"
  | "stopping"
  | "cleanup_pending"
  | "absent";

/** States whose placements consume capacity (spec "Reservation"). */
export const CAPACITY_CONSUMING: ReadonlySet<HostPlacementState> = new Set([
  "reserved",
  "preparing",
  "running",
  "paused",
  "suspended",
  "resuming",
  "stopping",
  "cleanup_pending",
]);

/**
 * What a placement that held `held` still holds once the agent confirmed it
 * entered `state` (issue 21): a paused VM gives back its CPU, a suspended one
 * its CPU and memory too (its disks and snapshot stay on the host, and its
 * slot); any other state changes nothing. The Host stores the result as the
 * placement's resources, so every later state (stopping, an error) holds no
 * more than that until a resume takes the rest back. Pure.
 */
export function heldAfter(state: HostPlacementState, held: Resources): Resources {
  if (state === "paused") return { ...held, cpuMillis: 0 };
  if (state === "suspended") return { ...held, cpuMillis: 0, memoryMiB: 0 };
  return held;
}

/**
 * Disk a placement of `spec` may use, MiB: its ephemeral disk, plus its
 * memory again when suspendable (issue 21: the RAM file it keeps on the
 * host's disk while it runs, the snapshot while suspended). The Host
 * reserves it; the agent bounds the VMM's file writes by it. Pure.
 */
export function placementDiskMiB(spec: { ephemeralDiskMiB: number; memoryMiB: number; suspendable?: boolean }): number {
  return spec.ephemeralDiskMiB + (spec.suspendable ? spec.memoryMiB : 0);
}

/** The zero vector. */
export const ZERO: Resources = { cpuMillis: 0, memoryMiB: 0, ephemeralDiskMiB: 0, slots: 0 };

/** a + b, component-wise. */
export function add(a: Resources, b: Resources): Resources {
  return {
    cpuMillis: a.cpuMillis + b.cpuMillis,
    memoryMiB: a.memoryMiB + b.memoryMiB,
    ephemeralDiskMiB: a.ephemeralDiskMiB + b.ephemeralDiskMiB,
    slots: a.slots + b.slots,
  };
}

/** a − b, component-wise (may go negative; callers compare with `fits`). */
export function sub(a: Resources, b: Resources): Resources {
  return {
    cpuMillis: a.cpuMillis - b.cpuMillis,
    memoryMiB: a.memoryMiB - b.memoryMiB,
    ephemeralDiskMiB: a.ephemeralDiskMiB - b.ephemeralDiskMiB,
    slots: a.slots - b.slots,
  };
}

/** Why a request does not fit, as the Host object's stable rejection code, or null if it fits. */
export type FitRejection = "INSUFFICIENT_CPU" | "INSUFFICIENT_MEMORY" | "INSUFFICIENT_DISK" | "PLACEMENT_LIMIT_REACHED";

/** Checks `request` against `free`; returns the first failing dimension's code or null. */
export function fits(free: Resources, request: Resources): FitRejection | null {
  if (request.slots > free.slots) return "PLACEMENT_LIMIT_REACHED";
  if (request.cpuMillis > free.cpuMillis) return "INSUFFICIENT_CPU";
  if (request.memoryMiB > free.memoryMiB) return "INSUFFICIENT_MEMORY";
  if (request.ephemeralDiskMiB > free.ephemeralDiskMiB) return "INSUFFICIENT_DISK";
  return null;
}

/** Sum of the resources of the capacity-consuming placements (each holds what its row says: see heldAfter). */
export function used(placements: Iterable<{ state: HostPlacementState; resources: Resources }>): Resources {
  let total = ZERO;
  for (const p of placements) if (CAPACITY_CONSUMING.has(p.state)) total = add(total, p.resources);
  return total;
}
