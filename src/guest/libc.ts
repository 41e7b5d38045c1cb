/**
 * The few system calls the guest needs that Bun does not offer, through
 * bun:ffi on the C library: chroot(2)/chdir(2) to enter the workload's root,
 * waitpid(2) to reap orphans as PID 1, sync(2) and reboot(2) to power off.
 *
 * Owns: loading libc once (before any chroot, since the workload's root may
 * have another C library or none). Must never: be loaded on the host (only
 * `bb guest` imports it), or call reboot(2) without sync(2) first.
 */
import { dlopen, FFIType, ptr } from "bun:ffi";

/** reboot(2) command that resets the machine (with -no-reboot QEMU then exits). */
export const RB_AUTOBOOT = 0x01234567;
/** reboot(2) command that powers the machine off. */
export const RB_POWER_OFF = 0x4321fedc;
/** waitpid(2) flag: do not block. */
const WNOHANG = 1;

type Libc = ReturnType<typeof open>;
let lib: Libc | null = null;

function open() {
  return dlopen("libc.so.6", {
    chroot: { args: [FFIType.ptr], returns: FFIType.i32 },
    chdir: { args: [FFIType.ptr], returns: FFIType.i32 },
    sync: { args: [], returns: FFIType.void },
    reboot: { args: [FFIType.i32], returns: FFIType.i32 },
    waitpid: { args: [FFIType.i32, FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
  });
}

/** Loads libc now (call before chroot). Throws when it cannot be loaded. */
export function loadLibc(): void {
  lib ??= open();
}

function symbols() {
  loadLibc();
  return lib!.symbols;
}

const cstr = (s: string) => ptr(Buffer.from(`${s}\0`, "utf8"));

/** chroot(dir) then chdir("/"). Throws an Error with the failing call. */
export function enterRoot(dir: string): void {
  const s = symbols();
  if (s.chroot(cstr(dir)) !== 0) throw new Error(`chroot(${dir}) failed`);
  if (s.chdir(cstr("/")) !== 0) throw new Error("chdir(/) after chroot failed");
}

/** Reaps `pid` if it is a zombie; true when it was reaped. */
export function reapIfZombie(pid: number): boolean {
  const status = new Int32Array(1);
  return symbols().waitpid(pid, ptr(status), WNOHANG) === pid;
}

/** sync(2), then reboot(2) with `cmd`. Returns only when reboot(2) failed. */
export function syncAndReboot(cmd: number = RB_AUTOBOOT): void {
  const s = symbols();
  s.sync();
  s.reboot(cmd);
}
