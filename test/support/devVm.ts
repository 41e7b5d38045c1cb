/**
 * A VmSpec for one dev-image VM driven through the QEMU driver directly (no
 * agent): test/integration/vm.test.ts and bench/snapshot.ts. Copies the
 * image's root disk into `dir` (sparse) and lays out the placement files
 * there as the agent does; the nonce goes in the private kernel arguments
 * (the initramfs fragment), as src/agent/placementOps.ts hands it over.
 */
import { join } from "node:path";
import type { PlacementNetwork } from "../../src/agent/isolation/placementNet.ts";
import type { VmSpec } from "../../src/agent/vmm/driver.ts";
import type { ImageManifest } from "../../src/protocol/image.ts";
import { GUEST_CMDLINE_KEYS } from "../../src/protocol/guest.ts";

/** What devVmSpec needs. */
export interface DevVmOptions {
  /** The built dev image (buildDevImage's dir and manifest). */
  image: { dir: string; manifest: ImageManifest };
  /** The placement network the VM's TAP lives in. */
  net: PlacementNetwork;
  /** The placement directory (exists, empty). */
  dir: string;
  /** The instance ID QEMU's command line carries (isAlive checks it). */
  instanceId: string;
  /** The guest identity on the kernel command line. */
  identity: { allocationId: string; placementId: string; generation: number; nonce: string };
  /** Guest memory, MiB (default 256). */
  memoryMiB?: number;
  /** Start with the RAM in a shared file, so it can be suspended. */
  suspendable?: boolean;
}

/** The VmSpec of options, after copying the root disk into options.dir. Throws when the copy fails. */
export function devVmSpec(o: DevVmOptions): VmSpec {
  const rootDisk = join(o.dir, "rootfs.ext4");
  const cp = Bun.spawnSync(["cp", "--sparse=always", join(o.image.dir, o.image.manifest.rootfs.path), rootDisk]);
  if (cp.exitCode !== 0) throw new Error(`cannot copy the dev image's root disk into ${o.dir}: ${cp.stderr}`);
  return {
    instanceId: o.instanceId,
    dir: o.dir,
    vcpus: 1,
    memoryMiB: o.memoryMiB ?? 256,
    kernelPath: join(o.image.dir, o.image.manifest.kernel.path),
    initrdPath: join(o.image.dir, o.image.manifest.initrd!.path),
    rootDiskPath: rootDisk,
    netns: o.net.netns,
    tapName: o.net.tapName,
    consoleLogPath: join(o.dir, "console.log"),
    controlSocketPath: join(o.dir, "ctl.sock"),
    ...(o.suspendable ? { suspendable: true } : {}),
    kernelArgs: [
      ...o.net.guestKernelArgs,
      `${GUEST_CMDLINE_KEYS.allocationId}=${o.identity.allocationId}`,
      `${GUEST_CMDLINE_KEYS.placementId}=${o.identity.placementId}`,
      `${GUEST_CMDLINE_KEYS.generation}=${o.identity.generation}`,
    ],
    privateKernelArgs: [`${GUEST_CMDLINE_KEYS.nonce}=${o.identity.nonce}`],
  };
}
