/**
 * The few libc calls the native bindings need (open, ioctl, read, write,
 * poll, eventfd, socket, connect, close, setsockopt, getsockopt), loaded once through bun:ffi, with
 * errno read right after each call on the calling thread.
 *
 * Owns only the symbol table and errno/strerror helpers; device logic lives in
 * native/tun, native/vsock and native/sockbuf. Loading is lazy and never throws: callers get
 * a reason string when libc cannot be opened (non-Linux, bun:ffi missing).
 * Must never: keep state between calls, or be imported by code that runs
 * on platforms without bun:ffi unless it checks `loadLibc()` first.
 */
import { dlopen, FFIType, read } from "bun:ffi";

const SYMBOLS = {
  open: { args: [FFIType.ptr, FFIType.i32, FFIType.i32], returns: FFIType.i32 },
  close: { args: [FFIType.i32], returns: FFIType.i32 },
  read: { args: [FFIType.i32, FFIType.ptr, FFIType.u64], returns: FFIType.i32 },
  write: { args: [FFIType.i32, FFIType.ptr, FFIType.u64], returns: FFIType.i32 },
  ioctl: { args: [FFIType.i32, FFIType.u64, FFIType.ptr], returns: FFIType.i32 },
  poll: { args: [FFIType.ptr, FFIType.u64, FFIType.i32], returns: FFIType.i32 },
  eventfd: { args: [FFIType.u32, FFIType.i32], returns: FFIType.i32 },
  socket: { args: [FFIType.i32, FFIType.i32, FFIType.i32], returns: FFIType.i32 },
  connect: { args: [FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
  bind: { args: [FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
  getsockname: { args: [FFIType.i32, FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
  setsockopt: { args: [FFIType.i32, FFIType.i32, FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
  getsockopt: { args: [FFIType.i32, FFIType.i32, FFIType.i32, FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
  strerror: { args: [FFIType.i32], returns: FFIType.cstring },
  __errno_location: { args: [], returns: FFIType.ptr },
} as const;

/** The loaded libc symbols (bun:ffi signatures above; sizes are numbers, results are C ints). */
export type LibcSymbols = ReturnType<typeof dlopen<typeof SYMBOLS>>["symbols"];

/** libc with errno access. `errno()` must be read right after the failing call, on the same thread. */
export interface Libc {
  sym: LibcSymbols;
  /** The calling thread's errno. */
  errno(): number;
  /** strerror(code), e.g. "Operation not permitted". */
  describe(code: number): string;
}

/** Linux errno values the bindings branch on (asm-generic/errno-base.h, errno.h). */
export const Errno = {
  EPERM: 1,
  ENOENT: 2,
  EINTR: 4,
  EIO: 5,
  EBADF: 9,
  EAGAIN: 11,
  EACCES: 13,
  EBUSY: 16,
  ENODEV: 19,
  EINVAL: 22,
  ENOBUFS: 105,
  EAFNOSUPPORT: 97,
  ECONNREFUSED: 111,
  ETIMEDOUT: 110,
  ENETUNREACH: 101,
  EHOSTUNREACH: 113,
} as const;

/** open(2) flags (asm-generic/fcntl.h). */
export const O_RDWR = 0o2;
export const O_NONBLOCK = 0o4000;
export const O_CLOEXEC = 0o2000000;
/** poll(2) event bits. */
export const POLLIN = 0x1;
export const POLLERR = 0x8;
export const POLLHUP = 0x10;
export const POLLNVAL = 0x20;

let cached: { libc: Libc } | { reason: string } | undefined;

/** Loads libc.so.6 once. Returns the bindings or the reason they are unavailable (never throws). */
export function loadLibc(): { libc: Libc } | { reason: string } {
  if (cached) return cached;
  if (process.platform !== "linux")
    return (cached = { reason: `native bindings need Linux (this is ${process.platform})` });
  try {
    const lib = dlopen("libc.so.6", SYMBOLS);
    const sym = lib.symbols;
    cached = {
      libc: {
        sym,
        errno: () => read.i32(sym.__errno_location()!, 0),
        describe: (code) => String(sym.strerror(code)),
      },
    };
  } catch (e) {
    cached = { reason: `cannot load libc.so.6 through bun:ffi: ${(e as Error).message}` };
  }
  return cached;
}

/** A NUL-terminated copy of `s` for passing as `const char *`. */
export function cString(s: string): Buffer {
  return Buffer.from(s + "\0", "utf8");
}
