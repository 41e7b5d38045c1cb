/**
 * A GuestChannel over a Unix stream socket (QEMU's virtio-serial chardev, or
 * Firecracker's hybrid vsock socket).
 *
 * Implements the host transport of spec "Guest handshake"; the channel itself
 * (bounded write queue and early-data buffer) is socketChannel.ts.
 */
import type { GuestChannel } from "./driver.ts";
import { SocketChannel } from "./socketChannel.ts";
import { vmmError } from "./qemuHost.ts";

export { MAX_PENDING_WRITE_BYTES } from "./socketChannel.ts";
/** Pause between connection attempts, ms. */
const RETRY_MS = 50;

/**
 * Connects to the Unix socket at `path`, retrying every 50 ms until
 * `timeoutMs` elapse. Throws VMM_START_FAILED on timeout.
 */
export async function connectUnixChannel(path: string, timeoutMs: number): Promise<GuestChannel> {
  const deadline = performance.now() + timeoutMs;
  let lastError = "";
  for (;;) {
    const ch = new SocketChannel();
    try {
      ch.socket = await Bun.connect<undefined>({
        unix: path,
        socket: {
          data: (_s, data) => ch.received(data),
          drain: () => ch.flush(),
          close: () => ch.closedByPeer(),
          error: () => ch.closedByPeer(),
        },
      });
      return ch;
    } catch (e) {
      lastError = (e as Error).message;
    }
    if (performance.now() > deadline) throw vmmError(`cannot connect to control socket ${path}: ${lastError}`);
    await Bun.sleep(RETRY_MS);
  }
}
