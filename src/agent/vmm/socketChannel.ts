/**
 * A GuestChannel over one Bun socket: QEMU's virtio-serial chardev socket
 * (unixChannel.ts) and Firecracker's hybrid vsock (firecracker/vsock.ts).
 *
 * Writes queue on backpressure up to MAX_PENDING_WRITE_BYTES; text arriving
 * before a handler is registered is buffered under the same bound, and the
 * channel is closed when it would overflow. Must never: buffer without bound
 * or call the close handler more than once.
 */
import type { Socket } from "bun";
import { MAX_GUEST_LINE_BYTES } from "../../protocol/guest.ts";
import type { GuestChannel } from "./driver.ts";

/** Bound of queued outgoing bytes and of early incoming text. */
export const MAX_PENDING_WRITE_BYTES = 4 * MAX_GUEST_LINE_BYTES;

/** A GuestChannel bound to one socket; the owner forwards socket events to received/flush/closedByPeer. */
export class SocketChannel implements GuestChannel {
  socket: Socket<undefined> | null = null;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private early: string[] = [];
  private earlyBytes = 0;
  private dataHandler: ((chunk: string) => void) | null = null;
  private closeHandler: (() => void) | null = null;
  private closed = false;
  private readonly decoder = new TextDecoder();

  /** Queues and writes one line. Throws when closed or when the queue would exceed MAX_PENDING_WRITE_BYTES. */
  send(line: string): void {
    if (this.closed || !this.socket) throw new Error("guest channel is closed");
    const buf = Buffer.from(line, "utf8");
    if (this.pendingBytes + buf.length > MAX_PENDING_WRITE_BYTES) throw new Error("guest channel write queue full");
    this.pending.push(buf);
    this.pendingBytes += buf.length;
    this.flush();
  }

  /** Writes queued bytes until the socket pushes back. */
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

  /** Delivers incoming bytes (or buffers them, bounded, until onData). */
  received(data: Uint8Array): void {
    const text = this.decoder.decode(data, { stream: true });
    if (!text) return;
    if (this.dataHandler) return this.dataHandler(text);
    if (this.earlyBytes + text.length > MAX_PENDING_WRITE_BYTES) return this.close();
    this.early.push(text);
    this.earlyBytes += text.length;
  }

  /** Registers the data handler and replays buffered early text to it. */
  onData(handler: (chunk: string) => void): void {
    this.dataHandler = handler;
    for (const t of this.early.splice(0)) handler(t);
    this.earlyBytes = 0;
  }

  /** Registers the close handler (called at once if already closed). */
  onClose(handler: () => void): void {
    this.closeHandler = handler;
    if (this.closed) handler();
  }

  /** Marks the channel closed and calls the close handler once. */
  closedByPeer(): void {
    if (this.closed) return;
    this.closed = true;
    this.closeHandler?.();
  }

  /** Ends the socket and reports the close once. */
  close(): void {
    this.socket?.end();
    this.closedByPeer();
  }
}
