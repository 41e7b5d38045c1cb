/**
 * The jailer boundary of the Firecracker driver, as pure functions: the
 * instance-ID rule, the per-placement UID/GID allocator, the chroot layout
 * and the jailer argument vector.
 *
 * Implements spec "Prepare (ensure_present)" (an unused UID and GID from the
 * configured range) and "Start (ensure_running)" (jailer with UID, GID,
 * chroot, network namespace, cgroup v2 limits cpu.max, memory.max,
 * memory.swap.max=0, pids.max, and a file-size limit), following the
 * reference jailer.md ("Jailer Usage", "Jailer Operation").
 * Must never: touch the file system or spawn anything (the driver does), or
 * accept an instance ID the jailer would reject.
 */
import { basename, join } from "node:path";
import { AgentError } from "../../errors.ts";

/** Jailer's `--id` rule (jailer.md "Jailer Usage"): alphanumerics and hyphens, at most 64 characters. */
export const JAILER_ID_PATTERN = /^[A-Za-z0-9-]{1,64}$/;
/** API socket path inside the jail (jailer.md: the default `<api-sock>` is `/run/firecracker.socket`). */
export const JAIL_API_SOCKET = "/run/firecracker.socket";
/** cgroup v2 `cpu.max` period, µs (the kernel's default period). */
export const CPU_MAX_PERIOD_US = 100_000;
/** Memory allowed above guest RAM for the VMM's own threads and buffers, MiB (SPECIFICATION.md promises <= 5 MiB; this leaves headroom). */
export const DEFAULT_VMM_OVERHEAD_MIB = 64;
/** Default cgroup `pids.max` for one Firecracker process (API, VMM and vCPU threads). */
export const DEFAULT_PIDS_MAX = 64;
/** Default parent cgroup under the cgroup v2 root, so every jail cgroup is findable as Beachball-owned. */
export const DEFAULT_PARENT_CGROUP = "beachball";

/** The jailer's failure (the placement cannot be jailed): an AgentError with code VMM_START_FAILED. */
function jailError(msg: string): AgentError {
  return new AgentError("VMM_START_FAILED", msg, { subsystem: "jailer" });
}

/** Throws VMM_START_FAILED unless `id` satisfies JAILER_ID_PATTERN (jailer.md "Jailer Usage"). */
export function assertJailerId(id: string): void {
  if (!JAILER_ID_PATTERN.test(id))
    throw jailError(
      `instance ID ${JSON.stringify(id)} is not a valid jailer --id (alphanumerics and hyphens, 1..64 chars)`,
    );
}

/** A contiguous range of host IDs reserved for jails: `first` .. `first + count - 1`. */
export interface IdRange {
  first: number;
  count: number;
}

/**
 * The lowest ID of `range` not in `used` (spec "Prepare": an unused UID and
 * GID per placement; the driver uses the same number for both). Pure. Throws
 * VMM_START_FAILED when the range is invalid or exhausted.
 */
export function allocateJailId(used: ReadonlySet<number>, range: IdRange): number {
  if (!Number.isInteger(range.first) || !Number.isInteger(range.count) || range.first < 1 || range.count < 1)
    throw jailError(`invalid jail UID range ${range.first}+${range.count}`);
  for (let id = range.first; id < range.first + range.count; id++) if (!used.has(id)) return id;
  throw jailError(`jail UID range ${range.first}..${range.first + range.count - 1} is exhausted`);
}

/** Host paths of one jail. `root` is what the jailed Firecracker sees as `/`. */
export interface JailLayout {
  /** `<chrootBase>/<exec_file_name>/<id>`: removed whole on stop. */
  jailDir: string;
  /** `<jailDir>/root` (jailer.md "Jailer Operation"). */
  root: string;
  /** Host path of the API socket: `<root>/run/firecracker.socket`. */
  apiSocket: string;
  /** Host path of the PID file the jailer writes (`<root>/<exec_file_name>.pid`, jailer.md "Known limitations"). */
  pidFile: string;
  /** Host path of the hybrid vsock socket; guest-initiated connections arrive at `<vsockUds>_<port>` (vsock.md). */
  vsockUds: string;
}

/** File names inside the jail root, as Firecracker sees them (absolute in the jail). */
export const JAIL_FILES = {
  kernel: "/vmlinux",
  initrd: "/initrd",
  rootExt4: "/rootfs.ext4",
  rootSquashfs: "/rootfs.squashfs",
  scratch: "/scratch.ext4",
  vsock: "/v.sock",
} as const;

/** Host path of the jail-absolute path `inJail` under `root`. Pure. */
export function hostPath(root: string, inJail: string): string {
  return join(root, inJail);
}

/** The jail layout for `instanceId` under `chrootBase` with Firecracker at `firecrackerBinary`. Pure; validates the ID. */
export function jailLayout(chrootBase: string, firecrackerBinary: string, instanceId: string): JailLayout {
  assertJailerId(instanceId);
  const exe = basename(firecrackerBinary);
  const jailDir = join(chrootBase, exe, instanceId);
  const root = join(jailDir, "root");
  return {
    jailDir,
    root,
    apiSocket: hostPath(root, JAIL_API_SOCKET),
    pidFile: join(root, `${exe}.pid`),
    vsockUds: hostPath(root, JAIL_FILES.vsock),
  };
}

/** cgroup v2 limits of one jail, in kernel units. */
export interface CgroupLimits {
  /** `cpu.max` value: `<quota µs> <period µs>`. */
  cpuMax: string;
  /** `memory.max`, bytes. */
  memoryMaxBytes: number;
  /** `pids.max`. */
  pidsMax: number;
}

/** Limits for `vcpus` and `memoryMiB`: a quota of `vcpus` CPUs per period, guest RAM plus `overheadMiB`. Pure. */
export function cgroupLimits(
  vcpus: number,
  memoryMiB: number,
  overheadMiB = DEFAULT_VMM_OVERHEAD_MIB,
  pidsMax = DEFAULT_PIDS_MAX,
): CgroupLimits {
  return {
    cpuMax: `${vcpus * CPU_MAX_PERIOD_US} ${CPU_MAX_PERIOD_US}`,
    memoryMaxBytes: (memoryMiB + overheadMiB) * 1024 * 1024,
    pidsMax,
  };
}

/** Everything the jailer command line needs. */
export interface JailerArgs {
  jailerBinary: string;
  firecrackerBinary: string;
  instanceId: string;
  uid: number;
  gid: number;
  chrootBase: string;
  /** Network namespace name; passed as `/var/run/netns/<netns>`. */
  netns: string;
  limits: CgroupLimits;
  /** Parent cgroup (relative to the cgroup v2 root). */
  parentCgroup: string;
  /**
   * RLIMIT_FSIZE, bytes: the largest file Firecracker writes, a writable disk (spec "Start": file-size
   * limits sized to the ephemeral disk) or the memory file of a suspend (all guest RAM, issue 21).
   */
  fsizeBytes: number;
}

/**
 * The jailer argv (binary first). No `--daemonize`: it would send stdout and
 * stderr, which carry the guest serial console, to /dev/null (jailer.md),
 * while spec "Start" captures them; the driver detaches the process itself
 * (new session). No `--new-pid-ns`: the jailer then execs Firecracker in
 * place, so the spawned PID is Firecracker's. Pure; throws VMM_START_FAILED
 * for an invalid ID or netns name.
 */
export function jailerArgv(a: JailerArgs): string[] {
  assertJailerId(a.instanceId);
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(a.netns) || a.netns.startsWith("."))
    throw jailError(`invalid netns name ${JSON.stringify(a.netns)}`);
  return [
    a.jailerBinary,
    "--id",
    a.instanceId,
    "--exec-file",
    a.firecrackerBinary,
    "--uid",
    String(a.uid),
    "--gid",
    String(a.gid),
    "--chroot-base-dir",
    a.chrootBase,
    "--netns",
    `/var/run/netns/${a.netns}`,
    "--cgroup-version",
    "2",
    "--parent-cgroup",
    a.parentCgroup,
    "--cgroup",
    `cpu.max=${a.limits.cpuMax}`,
    "--cgroup",
    `memory.max=${a.limits.memoryMaxBytes}`,
    "--cgroup",
    "memory.swap.max=0",
    "--cgroup",
    `pids.max=${a.limits.pidsMax}`,
    "--resource-limit",
    `fsize=${a.fsizeBytes}`,
    "--",
    "--api-sock",
    JAIL_API_SOCKET,
  ];
}
