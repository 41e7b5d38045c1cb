/**
 * Builds the Debian reference image: systemd as PID 1, `beachball-guest` as an
 * enabled service that hands payloads to $BEACHBALL_WORKLOAD_ADAPTER (the
 * reference adapter runs `text/x-shellscript` with /bin/sh), on an ext4
 * root made from Debian's packages (debianRootfs.ts), the Debian kernel and
 * the dev initramfs (which starts `init=/lib/systemd/systemd`).
 *
 * Implements the reference image of spec "Images". The root file system
 * comes from our own mmdebstrap tarball (trusted input, unpacked with tar
 * as root); Beachball adds only /usr/lib/beachball/ (guest, adapter,
 * network setup), two units and a few masks that keep boot short (no getty
 * on the console). Must never: publish a half-built directory (it is built
 * beside and renamed), or enable a login on the console.
 */
import { SUPPORTED_ARCHITECTURE } from "../protocol/platform.ts";
import { chmod, mkdir, readdir, rename, rm, stat, symlink, writeFile } from "node:fs/promises";
import { closeSync, ftruncateSync, openSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { type ImageManifest, MANIFEST_FILE_NAME, imageDigest } from "../protocol/image.ts";
import { WORKLOAD_ADAPTER_ENV } from "../protocol/guest.ts";
import { DEV_KERNEL_MODULES, ensureDevKernel, runChecked } from "./devKernel.ts";
import { INITRAMFS_INIT } from "./devInitScripts.ts";
import { guestIpv6Setup, guestIpv6Sysctls } from "./guestIpv6Init.ts";
import { GUEST_NET_CASES, GUEST_NET_VARS, guestIpv4Setup } from "./guestNetInit.ts";
import { type CpioEntry, encodeCpio } from "./cpio.ts";
import { DEV_GUEST_BOOTSTRAP_VERSION } from "./devBuild.ts";
import { signManifest } from "./signing.ts";
import { sha256File } from "./verify.ts";
import { readFile } from "node:fs/promises";

/** Where the guest, the adapter and the network script live in the image. */
export const REFERENCE_LIB_DIR = "usr/lib/beachball";
/** systemd itself (usrmerged Debian). */
export const SYSTEMD_INIT = "/lib/systemd/systemd";
/** Free space added to the root beyond its content, MiB. */
const ROOTFS_SLACK_MIB = 256;

/** The reference adapter: runs shell-script payloads with /bin/sh, refuses others (exit 126). */
export const SHELL_ADAPTER = `#!/bin/sh
# Beachball reference workload adapter: runs text/x-shellscript payloads with /bin/sh.
case "$BEACHBALL_BOOTSTRAP_CONTENT_TYPE" in
  text/x-shellscript) exec /bin/sh "$BEACHBALL_BOOTSTRAP_PATH" ;;
  *) echo "beachball-adapter: cannot run payloads of type $BEACHBALL_BOOTSTRAP_CONTENT_TYPE" >&2; exit 126 ;;
esac
`;

/** Network setup from beachball.ipv4 / beachball.gateway / beachball.dns and the private IPv6 keys (src/image/guestIpv6Init.ts) on the kernel command line (iproute2). */
export const NET_SETUP = `#!/bin/sh
${GUEST_NET_VARS}
for arg in $(cat /proc/cmdline); do
  case "$arg" in
${GUEST_NET_CASES}
  esac
done
ip link set lo up
${guestIpv6Sysctls("beachball-net")}
${guestIpv4Setup("ip", "beachball-net")}
${guestIpv6Setup("ip", "beachball-net")}
rm -f /etc/resolv.conf
: > /etc/resolv.conf
for r in $(echo "$dns" | tr , ' '); do echo "nameserver $r" >> /etc/resolv.conf; done
exit 0
`;

const GUEST_UNIT = `[Unit]
Description=Beachball guest bootstrap
Wants=beachball-net.service
After=beachball-net.service

[Service]
Type=simple
Environment=${WORKLOAD_ADAPTER_ENV}=/${REFERENCE_LIB_DIR}/adapter-shell
ExecStart=/${REFERENCE_LIB_DIR}/beachball-guest
KillMode=mixed
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
`;

const NET_UNIT = `[Unit]
Description=Beachball guest network from the kernel command line
DefaultDependencies=no
After=local-fs.target
Before=network.target

[Service]
Type=oneshot
ExecStart=/${REFERENCE_LIB_DIR}/net-setup
RemainAfterExit=yes
`;

/** Units that only slow a disposable VM's boot (or offer a login). */
const MASKED_UNITS = [
  "serial-getty@.service",
  "getty@.service",
  "getty.target",
  "systemd-timesyncd.service",
  "apt-daily.timer",
  "apt-daily-upgrade.timer",
  "e2scrub_all.timer",
  "fstrim.timer",
  "systemd-logind.service",
];

/** Options of buildReferenceImage. */
export interface ReferenceBuildOptions {
  /** mmdebstrap rootfs tarball (debianRootfs.ts). */
  rootfsTar: string;
  /** Guest binary installed as /usr/lib/beachball/beachball-guest. */
  guestBinaryPath: string;
  outDir: string;
  /** Kernel cache (shared with the dev image). */
  cacheDir: string;
  /** Ed25519 private key (base64 seed) that signs the manifest. */
  privateKey: string;
  log?: (m: string) => void;
}

async function artifact(dir: string, name: string) {
  return { path: name, sizeBytes: (await stat(join(dir, name))).size, sha256: await sha256File(join(dir, name)) };
}

/** The dev initramfs (busybox, modules, /init), deterministic. */
async function devInitrd(modulesDir: string): Promise<Uint8Array> {
  const entries: CpioEntry[] = ["bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules"].map((p) => ({
    path: p,
    kind: "dir" as const,
    mode: 0o755,
  }));
  entries.push({ path: "dev/console", kind: "char", mode: 0o600, major: 5, minor: 1 });
  entries.push({
    path: "init",
    kind: "file",
    mode: 0o755,
    data: new TextEncoder().encode(INITRAMFS_INIT(DEV_KERNEL_MODULES)),
  });
  entries.push({ path: "bin/busybox", kind: "file", mode: 0o755, data: await readFile("/bin/busybox") });
  for (const m of DEV_KERNEL_MODULES)
    entries.push({
      path: `lib/modules/${m}.ko`,
      kind: "file",
      mode: 0o644,
      data: await readFile(join(modulesDir, `${m}.ko`)),
    });
  return encodeCpio(entries);
}

/**
 * Builds the reference image into `opts.outDir` (schema 2, ext4 root,
 * `init=/lib/systemd/systemd`), signed with `opts.privateKey`. Returns its
 * manifest and digest. Throws when tar, mkfs.ext4 or the kernel download
 * fail.
 */
export async function buildReferenceImage(
  opts: ReferenceBuildOptions,
): Promise<{ manifest: ImageManifest; digest: string; dir: string }> {
  const log = opts.log ?? (() => {});
  const outDir = resolve(opts.outDir);
  const work = `${outDir}.building-${process.pid}`;
  const root = join(work, "root");
  await rm(work, { recursive: true, force: true });
  await mkdir(root, { recursive: true });
  try {
    log("unpacking the Debian root");
    await runChecked([
      "tar",
      "-xpf",
      resolve(opts.rootfsTar),
      "-C",
      root,
      "--numeric-owner",
      "--xattrs",
      "--xattrs-include=*",
      "--exclude=./dev/*",
    ]);
    const lib = join(root, REFERENCE_LIB_DIR);
    await mkdir(lib, { recursive: true });
    await Bun.write(join(lib, "beachball-guest"), Bun.file(resolve(opts.guestBinaryPath)));
    await writeFile(join(lib, "adapter-shell"), SHELL_ADAPTER);
    await writeFile(join(lib, "net-setup"), NET_SETUP);
    for (const f of ["beachball-guest", "adapter-shell", "net-setup"]) await chmod(join(lib, f), 0o755);
    const units = join(root, "etc/systemd/system");
    await mkdir(join(units, "multi-user.target.wants"), { recursive: true });
    await writeFile(join(units, "beachball-guest.service"), GUEST_UNIT);
    await writeFile(join(units, "beachball-net.service"), NET_UNIT);
    await symlink("../beachball-guest.service", join(units, "multi-user.target.wants", "beachball-guest.service"));
    for (const u of MASKED_UNITS) await symlink("/dev/null", join(units, u)).catch(() => {});
    await writeFile(join(root, "etc/hostname"), "beachball\n");
    await writeFile(join(root, "etc/machine-id"), "");
    await writeFile(join(root, "etc/fstab"), "# root is mounted by the initramfs\n");
    log("making the ext4 root");
    const contentBytes = Number((await runChecked(["du", "-sb", root])).split("\t")[0]);
    const sizeMiB = Math.ceil((contentBytes * 1.15) / 2 ** 20) + ROOTFS_SLACK_MIB;
    const fd = openSync(join(work, "rootfs.ext4"), "w");
    ftruncateSync(fd, sizeMiB * 2 ** 20);
    closeSync(fd);
    await runChecked(["mkfs.ext4", "-q", "-F", "-L", "bbroot", "-d", root, join(work, "rootfs.ext4")]);
    await rm(root, { recursive: true, force: true });
    const kernel = await ensureDevKernel(opts.cacheDir, log);
    await Bun.write(join(work, "vmlinux"), Bun.file(kernel.vmlinuxPath));
    await writeFile(join(work, "initrd.cpio"), await devInitrd(kernel.modulesDir));
    const manifest = signManifest(
      {
        schemaVersion: 2,
        architecture: SUPPORTED_ARCHITECTURE,
        kernel: await artifact(work, "vmlinux"),
        rootfs: await artifact(work, "rootfs.ext4"),
        rootfsFormat: "ext4",
        initrd: await artifact(work, "initrd.cpio"),
        kernelArgs: [`init=${SYSTEMD_INIT}`, "systemd.show_status=false"],
        agentProtocolRange: "1",
        guestBootstrapVersion: DEV_GUEST_BOOTSTRAP_VERSION,
        createdAt: new Date().toISOString(),
        signature: "",
      },
      opts.privateKey,
    );
    await writeFile(join(work, MANIFEST_FILE_NAME), JSON.stringify(manifest, null, 2) + "\n");
    if ((await readdir(work)).length !== 4) throw new Error("reference image: unexpected files in the build directory");
    await rm(outDir, { recursive: true, force: true });
    await mkdir(dirname(outDir), { recursive: true });
    await rename(work, outDir);
    const digest = imageDigest(manifest);
    log(`built ${digest} in ${outDir}`);
    return { manifest, digest, dir: outDir };
  } catch (e) {
    await rm(work, { recursive: true, force: true });
    throw e;
  }
}
