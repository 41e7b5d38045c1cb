/**
 * A GuestChannel over a Unix stream socket (QEMU's virtio-serial chardev, or
 * Firecracker's hybrid vsock socket).
 *
 * Implements the host transport of spec "Guest handshake". Writes are queued
 * on backpressure up to MAX_PENDING_WRITE_BYTES; chunks that arrive before a
 * handler is registered are buffered (same bound). Must never: buffer without
 * bound or call the close handler more than once.
 */
import type { Socket } from "bun";
import { MAX_GUEST_LINE_BYTES } from "../../protocol/guest.ts";
import type { GuestChannel } from "./driver.ts";
import { vmmError } from "./qemuHost.ts";

/** Bound of queued outgoing bytes and of early incoming text. */
export const MAX_PENDING_WRITE_BYTES = 4 * MAX_GUEST_LINE_BYTES;
/** Pause between connection attempts, ms. */
const RETRY_MS = 50;

class UnixGuestChannel implements GuestChannel {
  socket: Socket<undefined> | null = null;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private early: string[] = [];
  private earlyBytes = 0;
  private dataHandler: ((chunk: string) => void) | null = null;
  private closeHandler: (() => void) | null = null;
  private closed = false;
  private readonly decoder = new TextDecoder();

  send(line: string): void {
    if (this.closed || !this.socket) throw new Error("guest channel is closed");
    const buf = Buffer.from(line, "utf8");
    if (this.pendingBytes + buf.length > MAX_PENDING_WRITE_BYTES) throw new Error("guest channel write queue full");
    this.pending.push(buf);
    this.pendingBytes += buf.length;
    this.flush();
  }
  flush(): void {
    while (this.socket && this.pending.length > 0) {
      const head = this.pending[0]!;
      const n = this.socket.write(head);
      if (n <= 0) return;
      this.pendingBytes -= n;
      if (n < head.length) {
        this.pending[0] = head.subarray(n);
        return;
      }
      this.pending.shift();
    }
  }
  received(data: Buffer): void {
    const text = this.decoder.decode(data, { stream: true });
    if (this.dataHandler) return this.dataHandler(text);
    if (this.earlyBytes + text.length > MAX_PENDING_WRITE_BYTES) return this.close();
    this.early.push(text);
    this.earlyBytes += text.length;
  }
  onData(handler: (chunk: string) => void): void {
    this.dataHandler = handler;
    for (const t of this.early.splice(0)) handler(t);
    this.earlyBytes = 0;
  }
  onClose(handler: () => void): void {
    this.closeHandler = handler;
    if (this.closed) handler();
  }
  closedByPeer(): void {
    if (this.closed) return;
    this.closed = true;
    this.closeHandler?.();
  }
  close(): void {
    this.socket?.end();
    this.closedByPeer();
  }
}

/**
 * Connects to the Unix socket at `path`, retrying every 50 ms until
 * `timeoutMs` elapse. Throws VMM_START_FAILED on timeout.
 */
export async function connectUnixChannel(path: string, timeoutMs: number): Promise<GuestChannel> {
  const deadline = performance.now() + timeoutMs;
  let lastError = "";
  for (;;) {
    const ch = new UnixGuestChannel();
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
