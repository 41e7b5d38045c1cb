/**
 * Socket buffer sizes through bun:ffi (socket(7) SO_RCVBUF / SO_SNDBUF), for
 * UDP sockets that carry a whole tunnel: Bun.udpSocket exposes its descriptor
 * but no buffer setter, and the kernel's default (net.core.rmem_default,
 * ≈ 208 KiB) overflows when many TCP flows inside the tunnel burst at once
 * (measured: 34,209 of 157,497 datagrams dropped at the client's socket with
 * 100 flows, bench/tunnelLoss.ts). wireguard-go asks for 7 MiB each way the
 * same way: SO_RCVBUFFORCE / SO_SNDBUFFORCE where the process has
 * CAP_NET_ADMIN (they ignore net.core.rmem_max), else SO_RCVBUF / SO_SNDBUF
 * (capped by rmem_max / wmem_max).
 *
 * Must never: throw (a socket that keeps its default buffers still works),
 * or touch a descriptor other than the one given.
 */
import { ptr } from "bun:ffi";
import { loadLibc, type Libc } from "../libc.ts";

/** asm-generic/socket.h. */
const SOL_SOCKET = 1;
const SO_SNDBUF = 7;
const SO_RCVBUF = 8;
const SO_SNDBUFFORCE = 32;
const SO_RCVBUFFORCE = 33;

/** What wireguard-go asks for on its UDP sockets (conn/controlfns_linux.go: socketBufferSize), bytes. */
export const TUNNEL_SOCKET_BUFFER_BYTES = 7 << 20;

/** The outcome: sizes the kernel reports afterwards (it doubles the request for bookkeeping), bytes. */
export interface SocketBuffers {
  receiveBytes: number;
  sendBytes: number;
  /** True when the *FORCE options were accepted (CAP_NET_ADMIN). */
  forced: boolean;
  /** Why the request was not applied in full, or null. */
  reason: string | null;
}

function setInt(libc: Libc, fd: number, option: number, value: number): number {
  const v = new Int32Array([value]);
  return libc.sym.setsockopt(fd, SOL_SOCKET, option, ptr(v), 4) === 0 ? 0 : libc.errno();
}

function getInt(libc: Libc, fd: number, option: number): number {
  const v = new Int32Array(1);
  const len = new Uint32Array([4]);
  return libc.sym.getsockopt(fd, SOL_SOCKET, option, ptr(v), ptr(len)) === 0 ? v[0]! : -1;
}

/**
 * Asks for `bytes` (1 KiB..1 GiB) of receive and send buffer on socket `fd`;
 * returns the sizes in effect and, when they fall short, why. Never throws:
 * without libc or with a bad descriptor the reason says so and the sizes are -1.
 */
export function setSocketBuffers(fd: number, bytes: number = TUNNEL_SOCKET_BUFFER_BYTES): SocketBuffers {
  if (!Number.isInteger(bytes) || bytes < 1024 || bytes > 1 << 30)
    return { receiveBytes: -1, sendBytes: -1, forced: false, reason: `buffer size ${bytes} is outside 1 KiB..1 GiB` };
  const loaded = loadLibc();
  if ("reason" in loaded) return { receiveBytes: -1, sendBytes: -1, forced: false, reason: loaded.reason };
  const { libc } = loaded;
  let forced = true;
  let reason: string | null = null;
  for (const [force, plain] of [
    [SO_RCVBUFFORCE, SO_RCVBUF],
    [SO_SNDBUFFORCE, SO_SNDBUF],
  ] as const) {
    if (setInt(libc, fd, force, bytes) === 0) continue;
    forced = false;
    const err = setInt(libc, fd, plain, bytes);
    if (err !== 0)
      reason = `setsockopt(${plain === SO_RCVBUF ? "SO_RCVBUF" : "SO_SNDBUF"}) failed: ${libc.describe(err)}`;
  }
  const receiveBytes = getInt(libc, fd, SO_RCVBUF);
  const sendBytes = getInt(libc, fd, SO_SNDBUF);
  if (!reason && (receiveBytes < bytes || sendBytes < bytes))
    reason = `the kernel capped the buffers at ${receiveBytes}/${sendBytes} bytes (no CAP_NET_ADMIN; net.core.rmem_max/wmem_max)`;
  return { receiveBytes, sendBytes, forced, reason };
}

/**
 * The descriptor of a Bun.udpSocket: Bun 1.4 has an `fd` property at runtime
 * that bun-types does not declare. -1 when it is missing (setSocketBuffers
 * then reports the failure).
 */
export function udpSocketFd(socket: object): number {
  const fd = (socket as { fd?: unknown }).fd;
  return typeof fd === "number" && Number.isInteger(fd) && fd >= 0 ? fd : -1;
}
