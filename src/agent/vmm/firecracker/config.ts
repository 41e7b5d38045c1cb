/**
 * Pure builders of every request body the Firecracker driver sends, and the
 * order it sends them in.
 *
 * Implements the VM configuration of spec "Start (ensure_running)": two
 * drives, one TAP interface, a vsock device, the forced kernel command line
 * (console=ttyS0 reboot=k panic=1 pci=off, root settings, then the agent's
 * identity and network arguments). Body shapes follow the reference
 * firecracker.yaml definitions MachineConfiguration, BootSource, Drive,
 * NetworkInterface, Vsock and InstanceActionInfo. All file paths are the
 * jail-absolute names of jailer.ts JAIL_FILES (Firecracker runs chrooted).
 * Must never: perform I/O, or emit a field the OpenAPI document does not define.
 */
import { createHash } from "node:crypto";
import { rootFormat, type VmSpec } from "../driver.ts";
import { JAIL_FILES } from "./jailer.ts";
import { vmmError } from "../qemuHost.ts";

/** The guest CID of every VM (vsock.md; firecracker.yaml Vsock: minimum 3). Each VM has its own device, so one value suffices. */
export const GUEST_CID = 3;
/** Firecracker drive ID of the root disk (attached first: /dev/vda). */
export const DRIVE_ROOT = "rootfs";
/** Firecracker drive ID of the scratch disk (attached second: /dev/vdb). */
export const DRIVE_SCRATCH = "scratch";
/** Firecracker interface ID of the placement's single TAP interface. */
export const IFACE_ID = "eth0";
/** Kernel arguments Beachball always forces (spec "Start"). */
export const FORCED_BOOT_ARGS = ["console=ttyS0", "reboot=k", "panic=1", "pci=off"] as const;

export { type RootFormat, rootFormat } from "../driver.ts";

/** One API request of the boot sequence (always a PUT). */
export interface ApiRequest {
  /** Request path, e.g. `/drives/rootfs`. */
  path: string;
  /** JSON body, shaped by the firecracker.yaml definition of that path. */
  body: Record<string, unknown>;
}

/**
 * Kernel command line: FORCED_BOOT_ARGS, then `root=/dev/vda rw` (ext4) or
 * `beachball.lower=/dev/vda beachball.upper=/dev/vdb` (squashfs booted
 * through the initrd), then spec.kernelArgs in order (spec "Start"). Pure.
 */
export function bootArgs(spec: Pick<VmSpec, "kernelArgs" | "rootDiskPath" | "privateKernelArgs">): string {
  const root =
    rootFormat(spec.rootDiskPath) === "ext4"
      ? ["root=/dev/vda", "rw"]
      : ["beachball.lower=/dev/vda", "beachball.upper=/dev/vdb"];
  return [...FORCED_BOOT_ARGS, ...root, ...spec.kernelArgs, ...(spec.privateKernelArgs ?? [])].join(" ");
}

/**
 * A stable guest MAC for `instanceId`: 06 (locally administered, unicast,
 * like network-setup.md's examples) then five bytes of SHA-256(instanceId).
 * Pure; the same ID always yields the same MAC.
 */
export function guestMac(instanceId: string): string {
  const h = createHash("sha256").update(instanceId).digest();
  return ["06", ...[...h.subarray(0, 5)].map((b) => b.toString(16).padStart(2, "0"))].join(":").toUpperCase();
}

/** PUT /machine-config body: vcpu_count = spec.vcpus (already ceil(cpuMillis/1000)), mem_size_mib, SMT off. */
export function machineConfigBody(spec: Pick<VmSpec, "vcpus" | "memoryMiB">): Record<string, unknown> {
  return { vcpu_count: spec.vcpus, mem_size_mib: spec.memoryMiB, smt: false };
}

/** PUT /boot-source body. Throws VMM_START_FAILED for a squashfs root without an initrd (nothing could mount the overlay). */
export function bootSourceBody(
  spec: Pick<VmSpec, "kernelArgs" | "rootDiskPath" | "initrdPath" | "privateKernelArgs">,
): Record<string, unknown> {
  if (rootFormat(spec.rootDiskPath) === "squashfs" && !spec.initrdPath)
    throw vmmError("a squashfs root needs the image's initrd");
  return {
    kernel_image_path: JAIL_FILES.kernel,
    ...(spec.initrdPath ? { initrd_path: JAIL_FILES.initrd } : {}),
    boot_args: bootArgs(spec),
  };
}

/** PUT /drives/rootfs body: /dev/vda. An ext4 root is the writable root device; a squashfs root is attached read-only and mounted by the initrd. */
export function rootDriveBody(spec: Pick<VmSpec, "rootDiskPath">): Record<string, unknown> {
  const ext4 = rootFormat(spec.rootDiskPath) === "ext4";
  return {
    drive_id: DRIVE_ROOT,
    path_on_host: ext4 ? JAIL_FILES.rootExt4 : JAIL_FILES.rootSquashfs,
    is_root_device: ext4,
    is_read_only: !ext4,
  };
}

/** PUT /drives/scratch body: /dev/vdb, the placement's writable scratch disk (a squashfs guest's overlay upper). */
export function scratchDriveBody(): Record<string, unknown> {
  return { drive_id: DRIVE_SCRATCH, path_on_host: JAIL_FILES.scratch, is_root_device: false, is_read_only: false };
}

/** PUT /network-interfaces/eth0 body: the placement's TAP (inside the jail's netns) and the derived guest MAC. */
export function networkInterfaceBody(spec: Pick<VmSpec, "instanceId" | "tapName">): Record<string, unknown> {
  return { iface_id: IFACE_ID, host_dev_name: spec.tapName, guest_mac: guestMac(spec.instanceId) };
}

/** PUT /vsock body: GUEST_CID and the jail-absolute hybrid vsock socket. */
export function vsockBody(): Record<string, unknown> {
  return { guest_cid: GUEST_CID, uds_path: JAIL_FILES.vsock };
}

/** PUT /actions body. `SendCtrlAltDel` is x86-only; with `reboot=k` the guest's reboot ends Firecracker. */
export function actionBody(action: "InstanceStart" | "SendCtrlAltDel"): Record<string, unknown> {
  return { action_type: action };
}

/**
 * The pre-boot requests in the order the driver sends them: machine config,
 * boot source, root drive (vda) then scratch drive (vdb, so device order
 * matches the kernel arguments), network interface, vsock. All are pre-boot
 * only in firecracker.yaml; InstanceStart follows separately. Pure.
 */
export function preBootRequests(spec: VmSpec): ApiRequest[] {
  return [
    { path: "/machine-config", body: machineConfigBody(spec) },
    { path: "/boot-source", body: bootSourceBody(spec) },
    { path: `/drives/${DRIVE_ROOT}`, body: rootDriveBody(spec) },
    { path: `/drives/${DRIVE_SCRATCH}`, body: scratchDriveBody() },
    { path: `/network-interfaces/${IFACE_ID}`, body: networkInterfaceBody(spec) },
    { path: "/vsock", body: vsockBody() },
  ];
}
