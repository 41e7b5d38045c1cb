/**
 * Host-side helpers of the Firecracker driver's pause, resume, suspend and restore (issue 21):
 * their error constructors (VMM_CONTROL_FAILED, SNAPSHOT_INCOMPATIBLE), the owner of collected
 * snapshot files, the snapshot request timeout, the Firecracker version and host CPU a
 * snapshot's compat descriptor records, and the disks a suspend flushes.
 *
 * Must never: write a file, or put anything but codes, paths and compat keys into an error.
 */
import { readFileSync } from "node:fs";
import { rootFormat, type VmSpec } from "../driver.ts";
import { vmmError } from "../qemuHost.ts";
import { AgentError } from "../../errors.ts";
import type { FirecrackerApi } from "./apiClient.ts";
import { scratchDiskPath } from "./jailFs.ts";

/** A control request (pause, resume, suspend) the VM cannot take: VMM_CONTROL_FAILED, subsystem firecracker-api. */
export function controlError(msg: string): AgentError {
  return new AgentError("VMM_CONTROL_FAILED", msg, { subsystem: "firecracker-api" });
}

/** Owner of collected snapshot files: the agent itself, never a jail UID. */
export const AGENT_OWNER = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };

/** Longest a snapshot create or load may take, ms: a Full snapshot writes all guest memory. */
export const DEFAULT_SNAPSHOT_TIMEOUT_MS = 120_000;

/** GET /version's firecracker_version (firecracker.yaml FirecrackerVersion). Throws VMM_START_FAILED when absent. */
export async function firecrackerVersion(api: FirecrackerApi): Promise<string> {
  const v = ((await api.get("/version")) as { firecracker_version?: unknown } | undefined)?.firecracker_version;
  if (typeof v !== "string" || v === "") throw vmmError("GET /version answered without a firecracker_version");
  return v;
}

/** The first `model name` of /proc/cpuinfo, or `unknown` (the CPU a guest without a CPU template sees). */
export function hostCpuModel(): string {
  try {
    return /^model name\s*:\s*(.+)$/m.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1]?.trim() ?? "unknown";
  } catch {
    return "unknown";
  }
}

/** The placement's disks Firecracker writes: the scratch disk and an ext4 root. */
export function writableDisks(spec: VmSpec): string[] {
  return [scratchDiskPath(spec), ...(rootFormat(spec.rootDiskPath) === "ext4" ? [spec.rootDiskPath] : [])];
}
