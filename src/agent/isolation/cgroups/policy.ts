/**
 * Host-wide cgroup settings (spec "Start (ensure_running)": cpu.max,
 * memory.max, memory.swap.max=0, pids.max, file-size limits). Pure.
 * Must never: accept a parent path that could escape the cgroup hierarchy.
 */
import { AgentError } from "../../errors.ts";

/** Extra memory allowed to the VMM process beyond the guest's RAM, MiB (page tables, device emulation, TCG translation cache). */
export const DEFAULT_VMM_MEMORY_OVERHEAD_MIB = 192;
/** Default pids.max for a placement's cgroup (VMM threads; QEMU uses about 10). */
export const DEFAULT_VMM_PIDS_MAX = 256;
/** Name of the directory under the agent's own cgroup that holds placement cgroups when no parent is configured. */
export const DEFAULT_CGROUP_SUBDIR = "beachball";

/** Validated cgroup policy. */
export interface CgroupPolicy {
  /** Absolute path inside every hierarchy holding placement cgroups (e.g. `/beachball`); absent = `<agent's cgroup>/beachball`. */
  parent?: string;
  /** Added to memoryMiB for memory.max, MiB. */
  vmmMemoryOverheadMiB: number;
  /** pids.max per placement. */
  pidsMax: number;
}

/** Defaults (see the constants). */
export const DEFAULT_CGROUP_POLICY: CgroupPolicy = {
  vmmMemoryOverheadMiB: DEFAULT_VMM_MEMORY_OVERHEAD_MIB,
  pidsMax: DEFAULT_VMM_PIDS_MAX,
};

/** The cgroup subsystem's failure (a bad setting or a failed operation): an AgentError with code CGROUP_SETUP_FAILED. */
export function cgroupError(msg: string, cause?: unknown): AgentError {
  return new AgentError("CGROUP_SETUP_FAILED", msg, { subsystem: "cgroup", ...(cause === undefined ? {} : { cause }) });
}

/** Validates `cgroupParent`, `vmmMemoryOverheadMiB`, `vmmPidsMax` from AgentConfig. Throws CGROUP_SETUP_FAILED naming the bad field. */
export function cgroupPolicyFrom(c: {
  cgroupParent?: string;
  vmmMemoryOverheadMiB?: number;
  vmmPidsMax?: number;
}): CgroupPolicy {
  if (c.cgroupParent !== undefined && !/^(\/[A-Za-z0-9_.-]+)+$/.test(c.cgroupParent))
    throw cgroupError(`cgroupParent ${JSON.stringify(c.cgroupParent)} must be an absolute path of plain names`);
  if (c.cgroupParent?.split("/").some((p) => p === "." || p === ".."))
    throw cgroupError("cgroupParent must not contain . or ..");
  const overhead = c.vmmMemoryOverheadMiB ?? DEFAULT_VMM_MEMORY_OVERHEAD_MIB;
  const pids = c.vmmPidsMax ?? DEFAULT_VMM_PIDS_MAX;
  if (!Number.isInteger(overhead) || overhead < 0)
    throw cgroupError("vmmMemoryOverheadMiB must be a non-negative integer");
  if (!Number.isInteger(pids) || pids < 16) throw cgroupError("vmmPidsMax must be an integer ≥ 16");
  return { ...(c.cgroupParent ? { parent: c.cgroupParent } : {}), vmmMemoryOverheadMiB: overhead, pidsMax: pids };
}
