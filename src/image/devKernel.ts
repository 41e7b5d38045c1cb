/**
 * The dev image's kernel, taken from Debian's `linux-image-6.1.0-*-amd64`
 * package: download, extract the uncompressed vmlinux (PVH entry) from the
 * xz stream inside vmlinuz, and pick the few modules the initramfs loads.
 *
 * Implements the kernel half of docs/architecture.md, "Booting without KVM", for the
 * dev image of spec "Images". Results are cached per package name under
 * `<cacheDir>/kernel/<package>/`, so a rebuild does not download again, and
 * the package name is remembered while apt's state is unchanged.
 * Must never: use files that do not come from a Debian package.
 */
import { copyFile, mkdir, readdir, rename, rm } from "node:fs/promises";
import { basename, join } from "node:path";
import { memoizedKernelPackage } from "./kernelPackageMemo.ts";

/** Modules the initramfs insmods, in this order (docs/architecture.md, "Booting without KVM"). */
export const DEV_KERNEL_MODULES = [
  "virtio_ring",
  "virtio",
  "virtio_mmio",
  "virtio_console",
  "failover",
  "net_failover",
  "virtio_net",
  "virtio_blk",
  "crc16",
  "mbcache",
  "jbd2",
  "ext4",
  "crc32c_generic",
] as const;

/**
 * Modules the initramfs of a squashfs image loads, in this order: the dev
 * set (control channel, network, ext4 for the scratch disk) plus the
 * read-only squashfs lower layer and the overlay over it.
 */
export const SQUASHFS_ROOT_MODULES = [...DEV_KERNEL_MODULES, "squashfs", "overlay"] as const;

/** Every module the kernel cache keeps. */
const CACHED_MODULES: readonly string[] = SQUASHFS_ROOT_MODULES;

/** A cached, extracted kernel. All paths absolute. */
export interface CachedKernel {
  /** Debian package name, e.g. `linux-image-6.1.0-57-amd64`. */
  packageName: string;
  /** Kernel release, e.g. `6.1.0-57-amd64`. */
  release: string;
  /** Uncompressed kernel ELF. */
  vmlinuxPath: string;
  /** Directory holding `<module>.ko` for every DEV_KERNEL_MODULES and SQUASHFS_ROOT_MODULES entry. */
  modulesDir: string;
}

/**
 * Runs a command and returns its stdout; throws an Error with the command,
 * exit code and stderr tail when it exits non-zero.
 */
export async function runChecked(cmd: string[], opts: { cwd?: string; stdin?: Uint8Array } = {}): Promise<string> {
  const p = Bun.spawn(cmd, { cwd: opts.cwd, stdin: opts.stdin ?? "ignore", stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`${cmd.join(" ")} exited ${code}: ${err.trim().slice(-600)}`);
  return out;
}

/** Resolves the exact kernel package `linux-image-amd64` depends on (runs apt-get update once if needed). */
async function resolveKernelPackage(log: (m: string) => void): Promise<string> {
  const parse = (out: string) => /Depends:\s*(linux-image-6\.1\.0-[0-9]+-amd64)\b/.exec(out)?.[1];
  let name = parse(await runChecked(["apt-cache", "depends", "linux-image-amd64"]).catch(() => ""));
  if (!name) {
    log("apt-cache has no linux-image-amd64; running apt-get update");
    await runChecked(["apt-get", "update", "-qq"]);
    name = parse(await runChecked(["apt-cache", "depends", "linux-image-amd64"]));
  }
  if (!name) throw new Error("cannot resolve the linux-image-6.1.0-*-amd64 package from linux-image-amd64");
  return name;
}

/** Downloads the package's .deb into `debDir` (apt-get update and retry once on failure); returns its path. */
async function downloadDeb(pkg: string, debDir: string, log: (m: string) => void): Promise<string> {
  await mkdir(debDir, { recursive: true });
  const find = async () => (await readdir(debDir)).find((f) => f.startsWith(`${pkg}_`) && f.endsWith(".deb"));
  let deb = await find();
  if (deb) return join(debDir, deb);
  log(`downloading ${pkg}`);
  try {
    await runChecked(["apt-get", "download", "-qq", pkg], { cwd: debDir });
  } catch {
    log("apt-get download failed; running apt-get update and retrying");
    await runChecked(["apt-get", "update", "-qq"]);
    await runChecked(["apt-get", "download", "-qq", pkg], { cwd: debDir });
  }
  deb = await find();
  if (!deb) throw new Error(`apt-get download ${pkg} produced no .deb in ${debDir}`);
  return join(debDir, deb);
}

/** Finds the xz stream in a bzImage and decompresses it to `outPath`; checks the result is an ELF. */
export async function extractVmlinux(vmlinuzPath: string, outPath: string): Promise<void> {
  const img = new Uint8Array(await Bun.file(vmlinuzPath).arrayBuffer());
  const magic = [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00];
  for (let i = img.indexOf(0xfd); i >= 0 && i < img.length - 6; i = img.indexOf(0xfd, i + 1)) {
    if (!magic.every((b, k) => img[i + k] === b)) continue;
    const p = Bun.spawn(["xz", "-dc", "--single-stream"], {
      stdin: img.subarray(i),
      stdout: Bun.file(outPath),
      stderr: "pipe",
    });
    const code = await p.exited;
    const head = new Uint8Array(await Bun.file(outPath).slice(0, 4).arrayBuffer());
    if (code === 0 && head[0] === 0x7f && head[1] === 0x45 && head[2] === 0x4c && head[3] === 0x46) return;
  }
  throw new Error(`no decompressible xz kernel stream found in ${vmlinuzPath}`);
}

/** Copies the cached modules (CACHED_MODULES) out of an extracted package tree (after depmod) into `outDir`. */
async function pickModules(root: string, release: string, outDir: string): Promise<void> {
  const modRoot = join(root, "lib/modules", release);
  await runChecked(["depmod", "-b", root, release]);
  const dep = await Bun.file(join(modRoot, "modules.dep")).text();
  const byName = new Map<string, string>();
  for (const line of dep.split("\n")) {
    const rel = line.split(":")[0];
    if (!rel) continue;
    byName.set(
      basename(rel)
        .replace(/\.ko(\.xz|\.zst|\.gz)?$/, "")
        .replaceAll("-", "_"),
      rel,
    );
  }
  await mkdir(outDir, { recursive: true });
  for (const m of CACHED_MODULES) {
    const rel = byName.get(m);
    if (!rel) throw new Error(`module ${m} not found in ${modRoot}/modules.dep`);
    const src = join(modRoot, rel);
    const dst = join(outDir, `${m}.ko`);
    if (rel.endsWith(".ko")) await copyFile(src, dst);
    else if (rel.endsWith(".ko.xz")) {
      const p = Bun.spawn(["xz", "-dc", src], { stdout: Bun.file(dst), stderr: "ignore" });
      if ((await p.exited) !== 0) throw new Error(`xz -dc ${src} failed`);
    } else throw new Error(`unsupported module compression: ${rel}`);
  }
}

/**
 * Ensures the current Debian 6.1 kernel is downloaded and extracted into
 * `<cacheDir>/kernel/<package>/`, returning the cached paths. A completed
 * cache entry (its `release` file written last) is reused without network,
 * and without apt while apt's state is unchanged (kernelPackageMemo.ts).
 * Throws when apt, dpkg, depmod or xz fail.
 */
export async function ensureDevKernel(cacheDir: string, log: (m: string) => void): Promise<CachedKernel> {
  await mkdir(join(cacheDir, "kernel"), { recursive: true });
  // apt-cache is asked again only when the host's apt state changed (kernelPackageMemo.ts).
  const packageName = await memoizedKernelPackage(join(cacheDir, "kernel"), () => resolveKernelPackage(log));
  const dir = join(cacheDir, "kernel", packageName);
  const cached = (release: string): CachedKernel => ({
    packageName,
    release,
    vmlinuxPath: join(dir, "vmlinux"),
    modulesDir: join(dir, "modules"),
  });
  const releaseFile = Bun.file(join(dir, "release"));
  if (await releaseFile.exists()) {
    const hit = cached((await releaseFile.text()).trim());
    // An entry made before a module joined the list is rebuilt from the cached .deb.
    const complete = await Promise.all(CACHED_MODULES.map((m) => Bun.file(join(hit.modulesDir, `${m}.ko`)).exists()));
    if (complete.every(Boolean)) return hit;
  }

  const deb = await downloadDeb(packageName, join(cacheDir, "debs"), log);
  const work = `${dir}.tmp-${process.pid}`;
  await rm(work, { recursive: true, force: true });
  await mkdir(work, { recursive: true });
  log(`extracting ${basename(deb)}`);
  const root = join(work, "root");
  await runChecked(["dpkg", "-x", deb, root]);
  const release = packageName.replace(/^linux-image-/, "");
  await extractVmlinux(join(root, "boot", `vmlinuz-${release}`), join(work, "vmlinux"));
  await pickModules(root, release, join(work, "modules"));
  await rm(root, { recursive: true, force: true });
  await Bun.write(join(work, "release"), `${release}\n`);
  await rm(dir, { recursive: true, force: true });
  await rename(work, dir);
  return cached(release);
}
