/**
 * Builds the dev image: Debian's kernel, a busybox initramfs that mounts the
 * ext4 root from /dev/vda, and an ext4 root holding busybox and the static
 * guest binary `beachball-guest` (PID 1; docs/adr/0170-static-go-guest.md).
 *
 * Implements the "ext4 root, beachball-init inside the image" kind of the
 * spec's "Images", signed with a dev key kept in the cache directory
 * (keyFile.ts `ensureDevSigned`; public half in trusted-dev-key.pub). Idempotent: an output directory whose
 * manifest verifies and was built from the same bb binary and kernel package
 * is reused. Must never: use files other than Debian packages' and our bb
 * binary, or publish a half-built directory (it is built beside and renamed).
 */
import { SUPPORTED_ARCHITECTURE } from "../protocol/platform.ts";
import { chmod, copyFile, mkdir, rename, rm, stat, symlink } from "node:fs/promises";
import { openSync, ftruncateSync, closeSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { type ImageManifest, MANIFEST_FILE_NAME, imageDigest } from "../protocol/image.ts";
import { DEV_KERNEL_MODULES, type CachedKernel, ensureDevKernel, runChecked } from "./devKernel.ts";
import { sha256File, verifyImage } from "./verify.ts";
import { DEV_GUEST_BINARY_IN_IMAGE, INITRAMFS_INIT, ROOTFS_INIT_LINK } from "./devInitScripts.ts";
import { ensureDevSigned } from "./keyFile.ts";

/** Options of buildDevImage. All paths may be relative to the working directory. */
export interface DevBuildOptions {
  /** Image directory to (re)create; gets manifest.json, vmlinux, initrd.cpio, rootfs.ext4. */
  outDir: string;
  /** The guest binary (src/image/bbBinary.ts compileGuest) to install as /usr/bin/beachball-guest. */
  bbBinaryPath: string;
  /** Cache for the kernel download and extraction (shared between builds). */
  cacheDir: string;
  /** Progress lines (default: silent). */
  log?: (msg: string) => void;
}

/** Result of buildDevImage. */
export interface DevBuildResult {
  manifest: ImageManifest;
  /** `sha256:<hex>` (imageDigest of the manifest). */
  digest: string;
  /** Absolute image directory. */
  dir: string;
  /** True when an existing, verified build was reused. */
  reused: boolean;
  /** Base64 Ed25519 public key of the dev key that signed the manifest (also in `dir/trusted-dev-key.pub`). */
  publicKey: string;
}

/** Version string of the guest bootstrap written to the manifest. */
export const DEV_GUEST_BOOTSTRAP_VERSION = "0.1.0";
/** Free space added to the rootfs beyond its content, MiB. */
const ROOTFS_SLACK_MIB = 64;
/** Sidecar recording what a build was made from (not part of the manifest). */
const BUILD_INFO_FILE = "build-info.json";

interface BuildInfo {
  bbSha256: string;
  kernelPackage: string;
  recipeSha256: string;
}

/** Hash of everything else that shapes the image: scripts, module order, busybox. */
async function recipeSha256(): Promise<string> {
  const h = new Bun.CryptoHasher("sha256");
  h.update(`v2\0${INITRAMFS_INIT(DEV_KERNEL_MODULES)}\0${JSON.stringify(ROOTFS_INIT_LINK)}\0`);
  h.update(await sha256File("/bin/busybox"));
  return h.digest("hex");
}

/** Reuses `dir` if its manifest verifies and it was built from the same inputs; else null. */
async function reuse(dir: string, info: BuildInfo): Promise<Omit<DevBuildResult, "publicKey"> | null> {
  try {
    const old = (await Bun.file(join(dir, BUILD_INFO_FILE)).json()) as BuildInfo;
    if (
      old.bbSha256 !== info.bbSha256 ||
      old.kernelPackage !== info.kernelPackage ||
      old.recipeSha256 !== info.recipeSha256
    ) {
      return null;
    }
    const m = (await Bun.file(join(dir, MANIFEST_FILE_NAME)).json()) as ImageManifest;
    const digest = imageDigest(m);
    return { manifest: await verifyImage(dir, digest), digest, dir, reused: true };
  } catch {
    return null;
  }
}

/** Writes the initramfs (newc cpio, uncompressed: TCG decompresses slowly) to `out`. */
async function buildInitramfs(kernel: CachedKernel, staging: string, out: string): Promise<void> {
  for (const d of ["bin", "dev", "proc", "sys", "newroot", "lib/modules"])
    await mkdir(join(staging, d), { recursive: true });
  await copyFile("/bin/busybox", join(staging, "bin/busybox"));
  await chmod(join(staging, "bin/busybox"), 0o755);
  for (const m of DEV_KERNEL_MODULES)
    await copyFile(join(kernel.modulesDir, `${m}.ko`), join(staging, "lib/modules", `${m}.ko`));
  await Bun.write(join(staging, "init"), INITRAMFS_INIT(DEV_KERNEL_MODULES));
  await chmod(join(staging, "init"), 0o755);
  await runChecked(["mknod", "-m", "600", join(staging, "dev/console"), "c", "5", "1"]);
  await runChecked(["sh", "-c", `find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet > '${out}'`], {
    cwd: staging,
  });
}

/** Shared libraries (and the ELF interpreter) `bin` needs, as absolute host paths. */
async function sharedLibraries(bin: string): Promise<string[]> {
  const out = await runChecked(["ldd", bin]).catch((e: Error) =>
    /not a dynamic/.test(e.message) ? "" : Promise.reject(e),
  );
  const libs = new Set<string>();
  for (const line of out.split("\n")) {
    const m = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)\s+\(/.exec(line);
    if (m?.[1]) libs.add(m[1]);
  }
  return [...libs];
}

/** Fills `staging` with the root tree and writes an ext4 image sized to content + slack to `out`. */
async function buildRootfs(bbPath: string, staging: string, out: string): Promise<void> {
  for (const d of [
    "bin",
    "sbin",
    "usr/bin",
    "usr/sbin",
    "etc",
    "proc",
    "sys",
    "dev",
    "tmp",
    "run",
    "root",
    "var/tmp",
    "mnt",
  ]) {
    await mkdir(join(staging, d), { recursive: true });
  }
  await copyFile("/bin/busybox", join(staging, "bin/busybox"));
  await chmod(join(staging, "bin/busybox"), 0o755);
  for (const applet of (await runChecked(["/bin/busybox", "--list-full"])).split("\n")) {
    if (!applet || applet === "bin/busybox") continue;
    await mkdir(join(staging, dirname(applet)), { recursive: true });
    await symlink("/bin/busybox", join(staging, applet)).catch(() => {});
  }
  // Both are static in Debian (busybox, and the Go guest, docs/adr/0170-static-go-guest.md); a dynamic busybox still gets its libraries.
  for (const lib of [...(await sharedLibraries("/bin/busybox")), ...(await sharedLibraries(bbPath))]) {
    await mkdir(join(staging, dirname(lib)), { recursive: true });
    await copyFile(lib, join(staging, lib)); // copies the resolved file content
  }
  await copyFile(bbPath, join(staging, DEV_GUEST_BINARY_IN_IMAGE.slice(1)));
  await chmod(join(staging, DEV_GUEST_BINARY_IN_IMAGE.slice(1)), 0o755);
  await symlink(ROOTFS_INIT_LINK.target, join(staging, ROOTFS_INIT_LINK.path.slice(1)));
  await Bun.write(join(staging, "etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n");
  await Bun.write(join(staging, "etc/group"), "root:x:0:\n");
  await Bun.write(join(staging, "etc/hostname"), "beachball\n");
  await Bun.write(join(staging, "etc/hosts"), "127.0.0.1 localhost beachball\n");
  const contentBytes = Number((await runChecked(["du", "-sb", staging])).split("\t")[0]);
  const sizeMiB = Math.ceil((contentBytes * 1.1) / 2 ** 20) + ROOTFS_SLACK_MIB;
  const fd = openSync(out, "w");
  ftruncateSync(fd, sizeMiB * 2 ** 20);
  closeSync(fd);
  await runChecked(["mkfs.ext4", "-q", "-F", "-L", "bbroot", "-E", "root_owner=0:0", "-d", staging, out]);
}

/** Describes one built file as a manifest Artifact. */
async function artifact(dir: string, name: string) {
  return { path: name, sizeBytes: (await stat(join(dir, name))).size, sha256: await sha256File(join(dir, name)) };
}

/**
 * Builds (or reuses) the dev image in `opts.outDir` and writes its
 * manifest.json (spec "Images", schema 1), signed by the dev key
 * `cacheDir/dev-signing.key` (created once, mode 0600). Takes about 10 s cold
 * (kernel download) and a few seconds warm; a no-op when up to date.
 * Throws when a Debian tool (apt-get, dpkg, depmod, xz, cpio, mkfs.ext4)
 * fails or the bb binary is missing.
 */
export async function buildDevImage(opts: DevBuildOptions): Promise<DevBuildResult> {
  const log = opts.log ?? (() => {});
  const outDir = resolve(opts.outDir);
  const bbPath = opts.bbBinaryPath;
  if (!(await Bun.file(bbPath).exists())) throw new Error(`bb binary not found: ${bbPath}`);
  const kernel = await ensureDevKernel(opts.cacheDir, log);
  const info: BuildInfo = {
    bbSha256: await sha256File(bbPath),
    kernelPackage: kernel.packageName,
    recipeSha256: await recipeSha256(),
  };
  const existing = await reuse(outDir, info);
  if (existing) {
    const signed = ensureDevSigned(outDir, opts.cacheDir);
    log(`image up to date: ${existing.digest}`);
    return { ...existing, manifest: signed.manifest, publicKey: signed.publicKey };
  }
  const work = `${outDir}.building-${process.pid}`;
  await rm(work, { recursive: true, force: true });
  await mkdir(join(work, "staging"), { recursive: true });
  try {
    log("building initramfs");
    await copyFile(kernel.vmlinuxPath, join(work, "vmlinux"));
    await buildInitramfs(kernel, join(work, "staging/initrd"), join(work, "initrd.cpio"));
    log("building rootfs");
    await buildRootfs(bbPath, join(work, "staging/rootfs"), join(work, "rootfs.ext4"));
    await rm(join(work, "staging"), { recursive: true, force: true });
    const manifest: ImageManifest = {
      schemaVersion: 1,
      architecture: SUPPORTED_ARCHITECTURE,
      kernel: await artifact(work, "vmlinux"),
      rootfs: await artifact(work, "rootfs.ext4"),
      rootfsFormat: "ext4",
      initrd: await artifact(work, "initrd.cpio"),
      kernelArgs: [],
      agentProtocolRange: "1",
      guestBootstrapVersion: DEV_GUEST_BOOTSTRAP_VERSION,
      createdAt: new Date().toISOString(),
      signature: "",
    };
    await Bun.write(join(work, MANIFEST_FILE_NAME), JSON.stringify(manifest, null, 2) + "\n");
    await Bun.write(join(work, BUILD_INFO_FILE), JSON.stringify(info) + "\n");
    const signed = ensureDevSigned(work, opts.cacheDir);
    await rm(outDir, { recursive: true, force: true });
    await mkdir(dirname(outDir), { recursive: true });
    await rename(work, outDir);
    const digest = imageDigest(manifest);
    log(`built ${digest} in ${outDir}`);
    return { manifest: signed.manifest, digest, dir: outDir, reused: false, publicKey: signed.publicKey };
  } catch (e) {
    await rm(work, { recursive: true, force: true });
    throw e;
  }
}
