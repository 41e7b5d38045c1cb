/**
 * File-system work of one Firecracker jail: finding the UIDs in use,
 * building the chroot (hard links of the VM's files, placement-owned
 * writable disks and run directory) and removing it again.
 *
 * Implements spec "Prepare (ensure_present)" (jailer chroot with the kernel,
 * root disk and scratch disk; read-only artifacts are hard links, never
 * copies) for the paths VmSpec supplies, and jailer.md "Observations" (the
 * user must hard-link every resource into the jail; a RW block device's file
 * must be readable and writable by the jail UID). Must never: copy a file
 * (a failed hard link, e.g. across file systems, is an error), change the
 * owner of a read-only artifact, or remove anything outside the jail dir and
 * the jail's cgroup.
 */
import { existsSync, linkSync, mkdirSync, readdirSync, rmdirSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import type { VmSpec } from "../driver.ts";
import { vmmError } from "../qemuHost.ts";
import { rootFormat } from "./config.ts";
import { SCRATCH_DISK_FILE } from "../driver.ts";
import { hostPath, JAIL_FILES, type IdRange, type JailLayout } from "./jailer.ts";

/** Sets the owner of a path (a port, so tests can run unprivileged and record calls). */
export type ChownPort = (path: string, uid: number, gid: number) => void;

export { SCRATCH_DISK_FILE } from "../driver.ts";

/**
 * Host path of the placement's scratch disk: spec.scratchDiskPath, else
 * `<spec.dir>/scratch.ext4`, the freshly formatted sparse ext4 that spec
 * "Prepare" creates.
 */
export function scratchDiskPath(spec: Pick<VmSpec, "dir" | "scratchDiskPath">): string {
  return spec.scratchDiskPath ?? join(spec.dir, SCRATCH_DISK_FILE);
}

/**
 * UIDs of `range` already owned by another jail: the owner of each
 * `<jailsDir>/<id>/root` (the jailer chowns the jail root to its UID, and the
 * driver does so first), except `exceptId`'s. Reading the file system, not
 * memory, keeps the answer right across agent restarts.
 */
export function jailIdsInUse(jailsDir: string, range: IdRange, exceptId: string): Set<number> {
  const used = new Set<number>();
  let entries: string[] = [];
  try {
    entries = readdirSync(jailsDir);
  } catch {
    return used;
  }
  for (const e of entries) {
    if (e === exceptId) continue;
    try {
      const uid = statSync(join(jailsDir, e, "root")).uid;
      if (uid >= range.first && uid < range.first + range.count) used.add(uid);
    } catch {}
  }
  return used;
}

/** Hard-links `src` to `dst` (never a copy). Throws VMM_START_FAILED, naming EXDEV's cause, when the link fails. */
export function hardLink(src: string, dst: string): void {
  try {
    linkSync(src, dst);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    const why =
      err.code === "EXDEV"
        ? " (different file systems: the image cache, allocation dirs and the chroot base must share one)"
        : "";
    throw vmmError(`cannot hard-link ${src} to ${dst}: ${err.code ?? err.message}${why}`);
  }
}

/**
 * Creates the jail root for `spec` owned by `uid:gid`, removing a stale jail
 * of the same (digest-named, never shared) instance ID first. Links the
 * kernel, initrd, root disk and scratch disk under their JAIL_FILES names;
 * hands the writable disks (an ext4 root and the scratch disk) and `/run`
 * (where Firecracker creates its API socket) to `uid:gid`. Throws
 * VMM_START_FAILED when a file is missing or cannot be linked.
 */
export function buildJail(layout: JailLayout, spec: VmSpec, uid: number, gid: number, chown: ChownPort): void {
  const scratch = scratchDiskPath(spec);
  for (const [what, p] of [
    ["kernel", spec.kernelPath],
    ["root disk", spec.rootDiskPath],
    ["scratch disk", scratch],
    ...(spec.initrdPath ? [["initrd", spec.initrdPath]] : []),
  ] as const)
    if (!existsSync(p)) throw vmmError(`${what} ${p} is missing (spec "Prepare" creates it)`);
  rmSync(layout.jailDir, { recursive: true, force: true });
  mkdirSync(join(layout.root, "run"), { recursive: true, mode: 0o755 });
  chown(layout.root, uid, gid);
  chown(join(layout.root, "run"), uid, gid);
  hardLink(spec.kernelPath, hostPath(layout.root, JAIL_FILES.kernel));
  if (spec.initrdPath) hardLink(spec.initrdPath, hostPath(layout.root, JAIL_FILES.initrd));
  const ext4 = rootFormat(spec.rootDiskPath) === "ext4";
  const rootInJail = hostPath(layout.root, ext4 ? JAIL_FILES.rootExt4 : JAIL_FILES.rootSquashfs);
  hardLink(spec.rootDiskPath, rootInJail);
  if (ext4) chown(rootInJail, uid, gid);
  const scratchInJail = hostPath(layout.root, JAIL_FILES.scratch);
  hardLink(scratch, scratchInJail);
  chown(scratchInJail, uid, gid);
}

/**
 * RLIMIT_FSIZE for the jail, bytes: the size of the largest disk Firecracker
 * writes (an ext4 root and the scratch disk), so no write may grow a file
 * past the ephemeral disk (spec "Start").
 */
export function writableDiskBytes(spec: VmSpec): number {
  const sizes = [statSync(scratchDiskPath(spec)).size];
  if (rootFormat(spec.rootDiskPath) === "ext4") sizes.push(statSync(spec.rootDiskPath).size);
  return Math.max(...sizes);
}

/**
 * Removes the jail dir and the jail's cgroup directory (`cgroupDir`, which
 * the kernel only lets go once it has no process). Returns what could not be
 * removed, empty on success; a missing path counts as removed.
 */
export function removeJail(layout: JailLayout, cgroupDir: string): string[] {
  const left: string[] = [];
  try {
    rmSync(layout.jailDir, { recursive: true, force: true });
  } catch (e) {
    left.push(`jail ${layout.jailDir}: ${(e as Error).message}`);
  }
  try {
    rmdirSync(cgroupDir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") left.push(`cgroup ${cgroupDir}: ${(e as Error).message}`);
  }
  return left;
}
