/**
 * AF_VSOCK stream sockets through bun:ffi (vsock(7)): a probe that says why
 * vsock is unusable, the local context id (CID), and a connected stream's file
 * descriptor for a guest that talks to its host (Firecracker's guest side of
 * "Guest handshake" in docs/architecture.md; the host side uses Firecracker's
 * hybrid vsock over a Unix socket and needs none of this).
 *
 * The returned descriptor is blocking; read and write it with node:fs's
 * asynchronous read/write (run on the thread pool). connect() blocks the calling thread until the peer
 * answers or the kernel's vsock connect timeout (2 s by default) passes.
 * Must never: throw from the probe, or leave a descriptor open on failure.
 */
import { ptr } from "bun:ffi";
import { openSync, closeSync } from "node:fs";
import { Errno, loadLibc, type Libc } from "../libc.ts";

/** Address family number of vsock (linux/socket.h). */
export const AF_VSOCK = 40;
/** The host's CID, as seen from a guest. */
export const VMADDR_CID_HOST = 2;
const SOCK_STREAM = 1;
const SOCK_CLOEXEC = 0o2000000;
/** sizeof(struct sockaddr_vm). */
const SOCKADDR_VM_BYTES = 16;
/** ioctl on /dev/vsock returning the local CID (linux/vm_sockets.h, _IO(7, 0xb9)). */
const IOCTL_VM_SOCKETS_GET_LOCAL_CID = 0x7b9;

/** Stable error codes of vsock operations. */
export type VsockErrorCode =
  | "unavailable"
  | "permission"
  | "unreachable"
  | "refused"
  | "timeout"
  | "invalid-argument"
  | "io";

/** A vsock failure with a stable code and the errno behind it. */
export class VsockError extends Error {
  constructor(
    readonly code: VsockErrorCode,
    message: string,
    readonly errno = 0,
  ) {
    super(message);
    this.name = "VsockError";
  }
}

/** The probe's answer. `localCid` is null when /dev/vsock cannot be asked (no guest transport). */
export type VsockProbe =
  | { available: true; localCid: number | null }
  | { available: false; code: VsockErrorCode; reason: string };

function vsockError(libc: Libc, what: string, errno: number): VsockError {
  const code: VsockErrorCode =
    errno === Errno.EAFNOSUPPORT
      ? "unavailable"
      : errno === Errno.EPERM || errno === Errno.EACCES
        ? "permission"
        : errno === Errno.ENODEV || errno === Errno.ENETUNREACH || errno === Errno.EHOSTUNREACH
          ? "unreachable"
          : errno === Errno.ECONNREFUSED || errno === ECONNRESET
            ? "refused"
            : errno === Errno.ETIMEDOUT
              ? "timeout"
              : errno === Errno.EINVAL
                ? "invalid-argument"
                : "io";
  const hint = code === "unavailable" ? " (kernel without CONFIG_VSOCKETS, or the vsock module is not loaded)" : "";
  return new VsockError(code, `${what}: ${libc.describe(errno)}${hint}`, errno);
}
const ECONNRESET = 104;

function openSocket(libc: Libc): number {
  const fd = libc.sym.socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw vsockError(libc, "socket(AF_VSOCK)", libc.errno());
  return fd;
}

/** The local CID from /dev/vsock, or null when it cannot be read. */
function localCid(libc: Libc): number | null {
  let fd: number;
  try {
    fd = openSync("/dev/vsock", "r");
  } catch {
    return null;
  }
  try {
    const out = new Uint32Array(1);
    return libc.sym.ioctl(fd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, ptr(out)) === 0 ? out[0]! : null;
  } finally {
    closeSync(fd);
  }
}

/** Whether AF_VSOCK sockets can be created here, and this machine's CID. Never throws. */
export function probeVsock(): VsockProbe {
  const loaded = loadLibc();
  if ("reason" in loaded) return { available: false, code: "unavailable", reason: loaded.reason };
  try {
    loaded.libc.sym.close(openSocket(loaded.libc));
    return { available: true, localCid: localCid(loaded.libc) };
  } catch (e) {
    const err = e as VsockError;
    return { available: false, code: err.code ?? "io", reason: err.message };
  }
}

/**
 * Connects a stream socket to `cid`:`port` and returns its (blocking, close-on-exec)
 * descriptor; the caller closes it with fs.closeSync. Throws VsockError:
 * "unavailable", "unreachable" (no such CID), "refused" (nobody listens),
 * "timeout", "invalid-argument".
 */
export function connectVsock(cid: number, port: number): number {
  if (!Number.isInteger(cid) || cid < 0 || cid > 0xffffffff)
    throw new VsockError("invalid-argument", `CID ${cid} is outside 0..2^32-1`);
  if (!Number.isInteger(port) || port < 0 || port > 0xffffffff)
    throw new VsockError("invalid-argument", `port ${port} is outside 0..2^32-1`);
  const loaded = loadLibc();
  if ("reason" in loaded) throw new VsockError("unavailable", loaded.reason);
  const libc = loaded.libc;
  const fd = openSocket(libc);
  const addr = Buffer.alloc(SOCKADDR_VM_BYTES);
  addr.writeUInt16LE(AF_VSOCK, 0);
  addr.writeUInt32LE(port, 4);
  addr.writeUInt32LE(cid, 8);
  if (libc.sym.connect(fd, ptr(addr), SOCKADDR_VM_BYTES) !== 0) {
    const e = vsockError(libc, `connect vsock ${cid}:${port}`, libc.errno());
    libc.sym.close(fd);
    throw e;
  }
  return fd;
}
