/**
 * File-system work of Firecracker snapshots (issue 21): the jail directory Firecracker writes a
 * snapshot into, moving the finished files out of the jail into the agent's snapshot directory
 * (fsync'd, read-only, owned by the agent), and linking them into a new jail for a restore.
 *
 * Firecracker runs chrooted, so it can only write a snapshot inside its jail (jailer.md); the
 * jail is removed when the process ends, so the files are hard-linked (never copied) into the
 * snapshot directory first. A restore links them into the new jail under the same names, in a
 * directory the jail cannot write, and Firecracker opens them read-only (snapshot-support.md:
 * the memory file is mapped MAP_PRIVATE and must be immutable). Must never: copy a snapshot
 * file, write or truncate one after it was collected, hand one to a jail UID, or touch a path
 * outside the jail, the snapshot directory and the placement's writable disks.
 */
import { chmodSync, lstatSync, mkdirSync, rmSync, type Stats, statSync } from "node:fs";
import { fsyncPath } from "../snapshotCommon.ts";
import { join } from "node:path";
import { vmmError } from "../qemuHost.ts";
import { type ChownPort, hardLink } from "./jailFs.ts";
import { hostPath, type JailLayout } from "./jailer.ts";
import { JAIL_SNAPSHOT_DIR, SNAPSHOT_FILES } from "./snapshot.ts";

/** Mode of a collected snapshot file: readable by everyone (a restored jail's UID), writable by no one. */
export const SNAPSHOT_FILE_MODE = 0o444;

const FILE_NAMES = [SNAPSHOT_FILES.state, SNAPSHOT_FILES.memory] as const;

/** Creates the jail's JAIL_SNAPSHOT_DIR (mode 0700) owned by the jail's `uid`, so Firecracker can create the files. Returns its host path. */
export function makeJailSnapshotDir(layout: JailLayout, uid: number, chown: ChownPort): string {
  const dir = hostPath(layout.root, JAIL_SNAPSHOT_DIR);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { mode: 0o700 });
  chown(dir, uid, uid);
  return dir;
}

/**
 * Moves the snapshot Firecracker wrote into the jail's JAIL_SNAPSHOT_DIR into `snapshotDir`:
 * each file fsync'd, hard-linked under its SNAPSHOT_FILES name (a stale link of an earlier
 * attempt is replaced), handed to `owner` (the agent) and made SNAPSHOT_FILE_MODE; then
 * `snapshotDir` itself is fsync'd. Returns the bytes the files take on disk (allocated blocks,
 * so a sparse memory file counts what it holds). Throws VMM_START_FAILED (subsystem vmm) when a
 * file is missing or not a regular file, or cannot be linked.
 */
export function collectSnapshot(
  layout: JailLayout,
  snapshotDir: string,
  owner: { uid: number; gid: number },
  chown: ChownPort,
): number {
  let bytes = 0;
  for (const name of FILE_NAMES) {
    const inJail = hostPath(layout.root, `${JAIL_SNAPSHOT_DIR}/${name}`);
    const st = lstatOrNull(inJail);
    if (!st?.isFile()) throw vmmError(`Firecracker left no snapshot file ${name} in the jail (${inJail})`);
    fsyncPath(inJail);
    const out = join(snapshotDir, name);
    rmSync(out, { force: true });
    hardLink(inJail, out);
    chown(out, owner.uid, owner.gid);
    chmodSync(out, SNAPSHOT_FILE_MODE);
    bytes += statSync(out).blocks * 512;
  }
  fsyncPath(snapshotDir);
  return bytes;
}

/**
 * Links the snapshot in `snapshotDir` into the new jail's JAIL_SNAPSHOT_DIR, a directory owned
 * by the agent (mode 0755) that the jail can read but not change. Refuses (VMM_START_FAILED)
 * a missing file, a symlink or other non-regular file, and a file the jail's `uid` could write
 * (its owner, or group/other write bits): a restore must never be able to modify the snapshot
 * other restores share. Never changes a snapshot file.
 */
export function linkSnapshotIntoJail(layout: JailLayout, snapshotDir: string, uid: number): void {
  const dir = hostPath(layout.root, JAIL_SNAPSHOT_DIR);
  mkdirSync(dir, { mode: 0o755 });
  for (const name of FILE_NAMES) {
    const src = join(snapshotDir, name);
    const st = lstatOrNull(src);
    if (!st?.isFile()) throw vmmError(`snapshot file ${src} is missing or not a regular file`);
    if (st.uid === uid || (st.mode & 0o022) !== 0)
      throw vmmError(`snapshot file ${src} is writable by the jail (mode ${(st.mode & 0o777).toString(8)})`);
    hardLink(src, join(dir, name));
  }
}

function lstatOrNull(p: string): Stats | null {
  try {
    return lstatSync(p);
  } catch {
    return null;
  }
}
