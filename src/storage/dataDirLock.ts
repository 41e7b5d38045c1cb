/**
 * An exclusive lock on a data directory (issue "the scheduler takes an
 * exclusive lock on its data directory"): `flock(LOCK_EX | LOCK_NB)` on
 * `<dir>/lock` through libc (bun:ffi), held for as long as the process (or
 * the caller) keeps it. The kernel drops it when the process dies, however
 * it dies, so a stale lock never blocks a restart. The holder writes its PID
 * into the file for the refusal message.
 * Lower layer: imports nothing of ours.
 * Must never: open a data directory's state before the lock is held.
 */
import { dlopen, FFIType } from "bun:ffi";
import { closeSync, ftruncateSync, openSync, readFileSync, writeSync } from "node:fs";
import { join } from "node:path";

const LOCK_EX = 2;
const LOCK_NB = 4;
const LOCK_UN = 8;

let libc: { symbols: { flock: (fd: number, op: number) => number } } | undefined;
function flock(fd: number, op: number): number {
  libc ??= dlopen("libc.so.6", { flock: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 } });
  return libc.symbols.flock(fd, op);
}

/** Thrown when another process holds the lock. */
export class DataDirLocked extends Error {
  constructor(
    readonly dir: string,
    readonly holderPid: number | null,
  ) {
    super(
      `${dir} is in use by another process${holderPid ? ` (PID ${holderPid})` : ""}: stop it first, or use another data directory`,
    );
    this.name = "DataDirLocked";
  }
}

/** A held lock; `release()` unlocks and closes it (idempotent). */
export interface DataDirLock {
  readonly path: string;
  release(): void;
}

/** Takes the lock of `dir` (creating `<dir>/lock` mode 0600). Throws DataDirLocked if another holder has it. */
export function lockDataDir(dir: string): DataDirLock {
  const path = join(dir, "lock");
  let fd: number;
  try {
    fd = openSync(path, "a+", 0o600);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "EROFS" || code === "EACCES" || code === "EPERM")
      throw new Error(`cannot write ${dir} (${code}): the data directory must be writable by this user`);
    throw e;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) !== 0) {
    closeSync(fd);
    let pid: number | null = null;
    try {
      pid = Number.parseInt(readFileSync(path, "utf8").trim(), 10) || null;
    } catch {
      pid = null;
    }
    throw new DataDirLocked(dir, pid);
  }
  ftruncateSync(fd, 0);
  writeSync(fd, `${process.pid}\n`);
  let held = true;
  return {
    path,
    release() {
      if (!held) return;
      held = false;
      flock(fd, LOCK_UN);
      closeSync(fd);
    },
  };
}
