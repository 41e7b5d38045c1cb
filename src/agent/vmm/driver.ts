/**
 * The VMM driver port: everything the agent needs from a virtual machine
 * monitor, so the reconcile code never knows whether QEMU `microvm` or
 * Firecracker boots the guest.
 *
 * Implements the spec's "From command to microVM" (Start, Stop, adoption).
 * Must never: choose paths from client text (all paths come from the agent's
 * digest-named allocation directory).
 */

/** What the driver needs to boot one placement's VM. All paths are absolute. */
export interface VmSpec {
  /** Instance ID: the allocation directory name `bb-<digest>`; also appears in the VMM command line. */
  instanceId: string;
  /** The placement's allocation directory. */
  dir: string;
  /** vCPUs = ceil(cpuMillis / 1000) (spec "Prepare"). */
  vcpus: number;
  /** Guest memory in MiB. */
  memoryMiB: number;
  /** Uncompressed kernel (ELF with PVH entry for QEMU microvm). */
  kernelPath: string;
  /** Initramfs, if the image has one. */
  initrdPath?: string;
  /**
   * The root disk: the placement's private, writable ext4, or a read-only
   * squashfs (file name ending `.squashfs`, see rootFormat) that the
   * image's initrd overlays with the scratch disk.
   */
  rootDiskPath: string;
  /** The placement's writable scratch ext4 (the overlay upper of a squashfs root, /dev/vdb); default `<dir>/scratch.ext4`. */
  scratchDiskPath?: string;
  /** Network namespace the VMM runs in; the TAP lives there. */
  netns: string;
  /** TAP device name inside `netns`. */
  tapName: string;
  /** Extra kernel arguments (identity, network); the driver adds console and panic settings. */
  kernelArgs: string[];
  /**
   * Kernel arguments no other host user may read (the bootstrap nonce).
   * Firecracker sends them with the boot source over its API socket; QEMU
   * hands them over in a per-placement initramfs fragment rather than on its
   * command line, which /proc/PID/cmdline exposes.
   */
  privateKernelArgs?: string[];
  /** Serial console capture file. */
  consoleLogPath: string;
  /** Unix socket path of the host–guest control channel. */
  controlSocketPath: string;
  /**
   * The VM may be suspended later (issue 21). QEMU then keeps the guest's RAM
   * in a shared file in `dir` (src/agent/vmm/qemuSnapshot.ts), which costs
   * host disk of up to memoryMiB and writeback while it runs; Firecracker
   * can always snapshot and ignores it. Given to `restore`, it says the VM
   * resumes from its own snapshot and stays suspendable (QEMU maps the RAM
   * file shared again); a fork's or a template's restore leaves it out.
   */
  suspendable?: boolean;
}

/** Identity of a running VMM process, persisted so a restarted agent can adopt it. */
export interface VmHandle {
  instanceId: string;
  pid: number;
  /** Process start time in clock ticks since boot (/proc/PID/stat field 22). */
  startTime: number;
}

/** A connected control channel to the guest: NDJSON lines both ways. */
export interface GuestChannel {
  /** Writes one message line. */
  send(line: string): void;
  /** Registers the handler for incoming chunks of text. */
  onData(handler: (chunk: string) => void): void;
  /** Registers the handler called once when the stream closes. */
  onClose(handler: () => void): void;
  /** Closes the stream. */
  close(): void;
}

/** The driver interface; the QEMU and Firecracker drivers implement it. */
export interface VmmDriver {
  /** Short driver name, e.g. `qemu-microvm`. */
  readonly name: string;
  /** Starts the VMM detached from the agent (it survives an agent restart). Throws on failure to launch. */
  start(spec: VmSpec): Promise<VmHandle>;
  /** True only if the PID is alive with the same start time and the instance ID in its command line. */
  isAlive(handle: VmHandle): Promise<boolean>;
  /** SIGTERM to the verified process, SIGKILL after `graceMs`; resolves once it is gone. */
  stop(handle: VmHandle, graceMs: number): Promise<void>;
  /** Connects to the guest control channel (retrying until `timeoutMs`). */
  connectControl(spec: Pick<VmSpec, "controlSocketPath">, timeoutMs: number): Promise<GuestChannel>;
  /**
   * Called once the guest proved it booted (GuestReady with its nonce): the
   * guest holds its private kernel arguments in memory now, so the driver
   * removes any file of its own that still holds them (spec "Start": the
   * nonce rests only in runtime.json). Never throws.
   */
  forgetBootSecrets(spec: Pick<VmSpec, "dir">): void;
  /**
   * Stops the verified VM's vCPUs; its memory stays resident (issue 21, pause). Idempotent: pausing a
   * paused VM resolves. Absent: the driver cannot pause (the agent refuses with VMM_UNSUPPORTED).
   * Throws an AgentError (VMM_CONTROL_FAILED) when the VMM does not confirm.
   */
  pause?(handle: VmHandle): Promise<void>;
  /** Lets a paused VM's vCPUs run again; resuming a running VM resolves. Pairs with pause. */
  resume?(handle: VmHandle): Promise<void>;
  /**
   * Suspends the verified VM into `snapshotDir` (an empty directory the agent made; every file the
   * driver writes stays inside it): vCPUs stopped, memory and device state saved, then the VMM process
   * ends, so the host gets back its CPU and memory. Resolves with the snapshot's description once the
   * files are complete and the process is gone. Absent: the driver cannot suspend.
   */
  suspend?(handle: VmHandle, spec: VmSpec, snapshotDir: string): Promise<VmSnapshot>;
  /**
   * Starts a VMM for `spec` (a new placement's directory, namespace, TAP and control socket) from
   * `snapshot`, running, its memory copy-on-write over the snapshot's frozen memory so that many
   * restores (forks, templates) share one snapshot. Refuses (SNAPSHOT_INCOMPATIBLE) a snapshot whose
   * driver or compatibility descriptor differs from what this driver would start for `spec`.
   */
  restore?(spec: VmSpec, snapshot: VmSnapshot): Promise<VmHandle>;
}

/**
 * A suspended VM's saved state on the host's disk (issue 21; docs/adr on snapshots): the
 * directory the driver wrote and what a restore must match. Persisted by the agent beside the
 * placement; its files count against the host's snapshot disk budget.
 */
export interface VmSnapshot {
  /** The directory holding every file of the snapshot (absolute). */
  dir: string;
  /** The driver that wrote it (VmmDriver.name); another driver refuses it. */
  driver: string;
  /**
   * What the saved state is tied to (VMM version, machine type, CPU model, device list, memory MiB,
   * vCPUs): a restore compares it with its own and refuses any difference.
   */
  compat: Record<string, string | number>;
  /** Bytes the snapshot's files take on disk. */
  bytes: number;
}

/** Root filesystem kind, from the root disk's file name: `*.squashfs` is a read-only lower layer; anything else is a writable ext4 root. */
export type RootFormat = "ext4" | "squashfs";

/** The root format of `rootDiskPath` (see RootFormat). Pure. */
export function rootFormat(rootDiskPath: string): RootFormat {
  return rootDiskPath.endsWith(".squashfs") ? "squashfs" : "ext4";
}

/** File name of the scratch disk in the allocation directory. */
export const SCRATCH_DISK_FILE = "scratch.ext4";

/** The scratch disk of `spec`: spec.scratchDiskPath, else `<spec.dir>/scratch.ext4`. Pure. */
export function scratchDiskOf(spec: Pick<VmSpec, "dir" | "scratchDiskPath">): string {
  return spec.scratchDiskPath ?? `${spec.dir.replace(/\/+$/, "")}/${SCRATCH_DISK_FILE}`;
}
