/**
 * Pure parts of Firecracker snapshots (issue 21): the request bodies of `PATCH /vm`,
 * `PUT /snapshot/create` and `PUT /snapshot/load`, the snapshot's file names (in the jail and
 * in the agent's snapshot directory) and the compatibility descriptor a restore must match.
 *
 * Implements the Firecracker half of issue 21 "Both drivers" after the reference
 * snapshot-support.md ("Snapshot API": pause, full snapshot, load with a File memory backend,
 * which Firecracker maps MAP_PRIVATE, so restores are copy-on-write over the frozen file) and
 * the firecracker.yaml definitions Vm, SnapshotCreateParams, SnapshotLoadParams, MemoryBackend,
 * NetworkOverride and VsockOverride. All paths are jail-absolute (Firecracker runs chrooted).
 * Must never: perform I/O, or emit a field the OpenAPI document does not define.
 */
import { rootFormat, type VmSpec } from "../driver.ts";
import { DRIVE_ROOT, DRIVE_SCRATCH, GUEST_CID, IFACE_ID } from "./config.ts";
import { JAIL_FILES } from "./jailer.ts";

/** The directory inside the jail that holds the snapshot files while Firecracker writes or reads them. */
export const JAIL_SNAPSHOT_DIR = "/snapshot";

/** File names of a Firecracker snapshot, the same in the jail's JAIL_SNAPSHOT_DIR and in the agent's snapshot directory. */
export const SNAPSHOT_FILES = {
  /** The microVM state file (devices, vCPUs; snapshot_path). */
  state: "vmstate",
  /** The guest memory file (mem_file_path; backend_path of a File memory backend). */
  memory: "memory",
} as const;

/** Jail-absolute path of snapshot file `name`. Pure. */
export function jailSnapshotPath(name: (typeof SNAPSHOT_FILES)[keyof typeof SNAPSHOT_FILES]): string {
  return `${JAIL_SNAPSHOT_DIR}/${name}`;
}

/** The two states `PATCH /vm` sets (firecracker.yaml Vm.state). */
export type VmRunState = "Paused" | "Resumed";

/** PATCH /vm body (firecracker.yaml Vm). Firecracker keeps a paused VM paused and ignores resuming a running one. */
export function vmStateBody(state: VmRunState): Record<string, unknown> {
  return { state };
}

/** PUT /snapshot/create body: a Full snapshot into the jail's JAIL_SNAPSHOT_DIR (firecracker.yaml SnapshotCreateParams). */
export function snapshotCreateBody(): Record<string, unknown> {
  return {
    snapshot_type: "Full",
    snapshot_path: jailSnapshotPath(SNAPSHOT_FILES.state),
    mem_file_path: jailSnapshotPath(SNAPSHOT_FILES.memory),
  };
}

/**
 * PUT /snapshot/load body for a restore as `spec` (firecracker.yaml SnapshotLoadParams): the
 * state file and a File memory backend from the jail's JAIL_SNAPSHOT_DIR (Firecracker maps it
 * MAP_PRIVATE, so the file is never written), the interface re-pointed at the new spec's TAP
 * (network_overrides), the vsock socket at the jail's name (vsock_override; the same
 * jail-absolute name, stated so a renamed JAIL_FILES.vsock cannot silently break restores),
 * and resume_vm so the VM runs once loaded. No dirty-page tracking (Full snapshots only).
 */
export function snapshotLoadBody(spec: Pick<VmSpec, "tapName">): Record<string, unknown> {
  return {
    snapshot_path: jailSnapshotPath(SNAPSHOT_FILES.state),
    mem_backend: { backend_type: "File", backend_path: jailSnapshotPath(SNAPSHOT_FILES.memory) },
    network_overrides: [{ iface_id: IFACE_ID, host_dev_name: spec.tapName }],
    vsock_override: { uds_path: JAIL_FILES.vsock },
    resume_vm: true,
  };
}

/** CPU template of every VM this driver starts: none is set in PUT /machine-config (firecracker.yaml CpuTemplate "None"). */
export const CPU_TEMPLATE = "None";

/**
 * The device list of a VM started for `spec` (config.ts preBootRequests), one stable string:
 * the drives in attach order with their jail paths and read-only flag, the interface and the
 * vsock device. A restore needs the same devices at the same jail paths (snapshot-support.md
 * "Loading snapshots": host resources at the same relative paths). Pure.
 */
export function deviceList(spec: Pick<VmSpec, "rootDiskPath">): string {
  const ext4 = rootFormat(spec.rootDiskPath) === "ext4";
  return [
    `block:${DRIVE_ROOT}=${ext4 ? JAIL_FILES.rootExt4 : JAIL_FILES.rootSquashfs}:${ext4 ? "rw" : "ro"}`,
    `block:${DRIVE_SCRATCH}=${JAIL_FILES.scratch}:rw`,
    `net:${IFACE_ID}`,
    `vsock:${GUEST_CID}=${JAIL_FILES.vsock}`,
  ].join(",");
}

/** Where the host facts of a compatibility descriptor come from (the driver reads them once). */
export interface SnapshotHost {
  /** The host CPU's model name (/proc/cpuinfo); without a CPU template the guest sees the host's CPUID. */
  cpuModel: string;
  /** The host architecture (process.arch). */
  arch: string;
}

/** Key of the Firecracker version in a compatibility descriptor (known only once a Firecracker process answers GET /version). */
export const COMPAT_VERSION_KEY = "firecracker_version";

/**
 * The compatibility descriptor of a Firecracker snapshot of a VM started for `spec` by
 * Firecracker `version` on `host` (VmSnapshot.compat): the Firecracker version (each binary
 * supports one snapshot data format, snapshot-support.md "Snapshot versioning"), the machine
 * configuration (vcpu_count, mem_size_mib, cpu_template: a load cannot change them), the device
 * list, the host CPU model and architecture ("Where can I resume my snapshots?": identical
 * hardware and software). Pure.
 */
export function snapshotCompat(
  spec: Pick<VmSpec, "vcpus" | "memoryMiB" | "rootDiskPath">,
  version: string,
  host: SnapshotHost,
): Record<string, string | number> {
  return {
    [COMPAT_VERSION_KEY]: version,
    vcpu_count: spec.vcpus,
    mem_size_mib: spec.memoryMiB,
    cpu_template: CPU_TEMPLATE,
    devices: deviceList(spec),
    cpu_model: host.cpuModel,
    arch: host.arch,
  };
}

/**
 * Size of the memory file a Full snapshot of `spec`'s VM writes, bytes (all guest RAM). The
 * jailer's file-size limit must allow it, or the snapshot fails (RLIMIT_FSIZE, SIGXFSZ). Pure.
 */
export function snapshotMemoryBytes(spec: Pick<VmSpec, "memoryMiB">): number {
  return spec.memoryMiB * 1024 * 1024;
}
