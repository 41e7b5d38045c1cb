/**
 * Cgroup value math for one placement (spec "Start (ensure_running)"): what
 * to write into which file for cgroup v2 and v1. Pure.
 * Must never: produce a memory limit below the guest's RAM, or allow swap.
 */
import type { CgroupPolicy } from "./policy.ts";

/** CFS period for cpu.max / cpu.cfs_period_us, µs. */
export const CPU_PERIOD_US = 100_000;
/** Smallest quota the kernel accepts, µs. */
export const MIN_CPU_QUOTA_US = 1_000;
const MIB = 1024 * 1024;

/** The controllers Beachball limits. */
export type LimitedController = "cpu" | "memory" | "pids";
/** All limited controllers, in write order. */
export const LIMITED_CONTROLLERS: readonly LimitedController[] = ["cpu", "memory", "pids"];

/** Numeric limits of one placement. */
export interface PlacementLimits {
  /** CPU quota per period, µs (cpuMillis/1000 CPUs). */
  cpuQuotaUs: number;
  cpuPeriodUs: number;
  /** memory.max = guest RAM + VMM overhead, bytes. */
  memoryBytes: number;
  pidsMax: number;
  /** RLIMIT_FSIZE for the VMM = the ephemeral disk, bytes. */
  fileSizeBytes: number;
}

/** Limits for a spec under a policy. */
export function placementLimits(
  spec: { cpuMillis: number; memoryMiB: number; ephemeralDiskMiB: number },
  policy: CgroupPolicy,
): PlacementLimits {
  return {
    cpuQuotaUs: Math.max(MIN_CPU_QUOTA_US, Math.ceil((spec.cpuMillis * CPU_PERIOD_US) / 1000)),
    cpuPeriodUs: CPU_PERIOD_US,
    memoryBytes: (spec.memoryMiB + policy.vmmMemoryOverheadMiB) * MIB,
    pidsMax: policy.pidsMax,
    fileSizeBytes: spec.ephemeralDiskMiB * MIB,
  };
}

/** Ordered [file, value] writes for one controller on cgroup v2 (memory.swap.max only when the kernel has it: `hasSwap`). */
export function v2Writes(c: LimitedController, l: PlacementLimits, hasSwap: boolean): Array<[string, string]> {
  if (c === "cpu") return [["cpu.max", `${l.cpuQuotaUs} ${l.cpuPeriodUs}`]];
  if (c === "memory")
    return hasSwap
      ? [
          ["memory.max", String(l.memoryBytes)],
          ["memory.swap.max", "0"],
        ]
      : [["memory.max", String(l.memoryBytes)]];
  return [["pids.max", String(l.pidsMax)]];
}

/**
 * Ordered [file, value] writes for one controller on cgroup v1. Swap is
 * forbidden through memory.memsw.limit_in_bytes = memory.limit_in_bytes,
 * written after it (the kernel requires memsw ≥ mem), only when the kernel
 * has swap accounting (`hasMemsw`).
 */
export function v1Writes(c: LimitedController, l: PlacementLimits, hasMemsw: boolean): Array<[string, string]> {
  if (c === "cpu")
    return [
      ["cpu.cfs_period_us", String(l.cpuPeriodUs)],
      ["cpu.cfs_quota_us", String(l.cpuQuotaUs)],
    ];
  if (c === "memory") {
    const w: Array<[string, string]> = [["memory.limit_in_bytes", String(l.memoryBytes)]];
    if (hasMemsw) w.push(["memory.memsw.limit_in_bytes", String(l.memoryBytes)]);
    return w;
  }
  return [["pids.max", String(l.pidsMax)]];
}
