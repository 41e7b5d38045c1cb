/**
 * Suspend and restore for the QEMU driver (issue 21), the mechanism measured
 * under QEMU 7.2 and TCG before it was built (a suspend of 33–70 ms, a
 * restore running in about 0.5 s at 256 MiB): a suspendable VM's RAM is a file
 * (`memory-backend-file`, share=on) in its placement directory, so a suspend
 * is QMP `stop` plus a migration of the device state only (capability
 * `x-ignore-shared`: the RAM *is* the file) into a small file; a restore
 * starts QEMU with `-incoming defer`, the frozen RAM file mapped private
 * (share=off: copy-on-write, so many restores share one snapshot), and loads
 * the device state (QEMU does not copy its ROMs into RAM while a migration
 * is incoming, so the guest's memory is the snapshot's).
 *
 * Pure helpers here; the QMP calls are in qemu.ts. Must never: put a path
 * that is not plain (letters, digits, `/._-`) into a migration URI, which
 * QEMU hands to `/bin/sh -c`.
 */
import { join } from "node:path";
import { rootFormat, type VmSpec } from "./driver.ts";
import { AgentError } from "../errors.ts";

/** The guest RAM file of a suspendable VM, in its placement directory. */
export const GUEST_RAM_FILE = "guest.ram";

/** The device state a suspend writes (some 50 KB), in the snapshot directory. */
export const DEVICE_STATE_FILE = "device.state";

/** Key of the QEMU version in a compatibility descriptor (known once QEMU answers query-version). */
export const QEMU_COMPAT_VERSION_KEY = "qemu_version";

/** Longest a suspend's or a restore's migration may take, ms (device state only: milliseconds in practice). */
export const MIGRATION_TIMEOUT_MS = 60_000;

/** A path that may go into an `exec:` migration URI or a QEMU option; throws VMM_CONTROL_FAILED for anything else. */
export function plainPath(path: string): string {
  if (!/^\/[A-Za-z0-9/._-]+$/.test(path) || path.includes(".."))
    throw new AgentError(
      "VMM_CONTROL_FAILED",
      `path ${JSON.stringify(path)} is not plain enough for a QEMU migration URI`,
      {
        subsystem: "vmm",
      },
    );
  return path;
}

/**
 * The `-object`/`-machine` arguments that put the guest's RAM in `file`:
 * shared (a suspendable VM's own RAM) or private copy-on-write over it (a
 * restore from a frozen snapshot). Pure.
 */
export function ramBackendArgs(spec: Pick<VmSpec, "memoryMiB">, file: string, share: boolean): string[] {
  return [
    "-object",
    `memory-backend-file,id=ram,size=${spec.memoryMiB}M,mem-path=${file},share=${share ? "on" : "off"}`,
    "-machine",
    "memory-backend=ram",
  ];
}

/** The RAM file of `spec`'s VM when it is suspendable. Pure. */
export function guestRamPath(spec: Pick<VmSpec, "dir">): string {
  return join(spec.dir, GUEST_RAM_FILE);
}

/**
 * The compatibility descriptor of a QEMU snapshot (VmSnapshot.compat): the
 * QEMU version (a migration stream is tied to it), the machine, CPU model and
 * accelerator, memory and vCPUs, and the device list (the root's format).
 * Not in it: the kernel and initramfs (QEMU does not load them while a
 * migration is incoming), the disks' content (the agent restores a
 * placement's own disks), and for KVM the host CPU (to do before snapshots
 * move between hosts). A restore refuses any difference. Pure.
 */
export function qemuSnapshotCompat(
  spec: Pick<VmSpec, "vcpus" | "memoryMiB" | "rootDiskPath">,
  version: string,
  accel: "kvm" | "tcg",
): Record<string, string | number> {
  return {
    [QEMU_COMPAT_VERSION_KEY]: version,
    machine: "microvm",
    accel,
    cpu: accel === "kvm" ? "host" : "max",
    vcpus: spec.vcpus,
    memory_mib: spec.memoryMiB,
    devices: `virtio-serial,virtio-net,${rootFormat(spec.rootDiskPath) === "ext4" ? "blk-root" : "blk-root-ro,blk-scratch"}`,
  };
}
