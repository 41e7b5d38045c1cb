/**
 * One TCP connection over an lwIP pcb: the TcpConnection interface
 * (src/netstack/types.ts) on top of the raw-API callbacks that stack.ts routes
 * here by connection id.
 *
 * Backpressure both ways: received data waits in `readQueue` and the receive
 * window reopens (tcp_recved) only as read() takes it, so a connection never
 * holds more than TCP_WINDOW_BYTES unread; write() resolves only once lwIP has
 * copied the bytes into its send buffer (tcp_write in ≤ 65,535-byte chunks).
 * Callbacks from the module only change state here; every call into the
 * module happens in flush(), which the stack runs outside module calls.
 * After close() the pcb is kept until the peer acknowledged all that is
 * still to send; after close() or closeWrite() a peer that accepts nothing
 * for DRAIN_STALL_LIMIT_MS is reset (the drain watch).
 * Must never: touch the pcb after it was released (error callback, close,
 * abort), or call into the module from a callback.
 */
import { NetstackError, type NetstackErrorCode } from "../errors.ts";
import { DRAIN_STALL_LIMIT_MS, MAX_WRITE_CHUNK_BYTES, WRITE_QUEUE_LIMIT_BYTES } from "../limits.ts";
import type { TimerHandle } from "../timers.ts";
import type { ConnectionEnd, TcpConnection } from "../types.ts";
import { Err, type LwipExports } from "./module.ts";

/** What a connection needs from its stack (implemented by LwipStack). */
export interface ConnectionHost {
  readonly lwip: LwipExports;
  /** The module's memory as bytes (refreshed after growth). */
  mem(): Uint8Array;
  /** Offset of the module's transmit buffer. */
  readonly txBuf: number;
  /** Asks for flush() to run once the current module call (if any) returns. */
  markDirty(c: LwipConnection): void;
  /** The heap was full: retry flush() on the next timer tick or when any data is acknowledged. */
  markBlocked(c: LwipConnection): void;
  /** The pcb is gone: forget the connection. */
  released(c: LwipConnection): void;
  /** Accounts `delta` bytes of received-but-unread data (negative when read or dropped). */
  accountReceived(delta: number): void;
  /** Runs `fn` (which calls into the module) now, or after the current module call returns. */
  call(fn: () => void): void;
  /** The stack's clock: its TimerPort's monoMs. */
  monoMs(): number;
  /** A one-shot timer on the stack's clock. */
  after(ms: number, fn: () => void): TimerHandle;
}

interface PendingWrite {
  data: Uint8Array;
  offset: number;
  resolve: () => void;
  reject: (e: NetstackError) => void;
}

interface Waiter<T> {
  resolve: (v: T) => void;
  reject: (e: NetstackError) => void;
}

/** Maps an lwIP err_t reported by the error callback to a stable code and sentence. */
export function connectionError(err: number, connecting: boolean): NetstackError {
  if (err === Err.RST)
    return connecting
      ? new NetstackError("refused", "connection refused (RST in answer to SYN)")
      : new NetstackError("reset", "connection reset by peer");
  if (err === Err.ABRT)
    return new NetstackError(
      "timeout",
      connecting
        ? "connect timed out (SYN retransmissions exhausted)"
        : "connection timed out (retransmissions exhausted) or reclaimed by the stack",
    );
  if (err === Err.CLSD) return new NetstackError("closed", "connection closed");
  if (err === Err.MEM) return new NetstackError("no-memory", "the stack ran out of memory");
  return new NetstackError("aborted", `connection failed (lwIP err ${err})`);
}

/** A TCP connection backed by an lwIP pcb. Created by LwipStack (connect or accept). */
export class LwipConnection implements TcpConnection {
  /** The pcb handle; 0 once released. */
  pcb: number;
  localAddress = "";
  localPort = 0;
  readonly ended: Promise<ConnectionEnd>;

  private readonly readQueue: Uint8Array[] = [];
  private readHead = 0;
  private bufferedBytes = 0;
  private readonly readers: Waiter<Uint8Array | null>[] = [];
  private eof = false;
  private failure: NetstackError | null = null;
  private readonly writes: PendingWrite[] = [];
  private queuedBytes = 0;
  /** "open", FIN requested after the queue ("pending"), or FIN queued in lwIP ("done"). */
  private writeSide: "open" | "pending" | "done" = "open";
  private closeRequested = false;
  private readonly closeWaiters: Array<() => void> = [];
  private recvedPending = 0;
  /** The drain watch (DRAIN_STALL_LIMIT_MS) after close()/closeWrite(), while data is still to send. */
  private drainTimer: TimerHandle | null = null;
  /** When the peer last acknowledged data, stack ms. */
  private lastAckedMs = 0;
  private endResolve!: (e: ConnectionEnd) => void;
  private connectWaiter: Waiter<LwipConnection> | null = null;

  constructor(
    private readonly host: ConnectionHost,
    /** The id lwIP passes to callbacks (the pcb's arg). */
    readonly id: number,
    pcb: number,
    readonly remoteAddress: string,
    readonly remotePort: number,
  ) {
    this.pcb = pcb;
    this.ended = new Promise((r) => (this.endResolve = r));
  }

  /** Bytes in write() calls lwIP has not taken yet. */
  get writeQueuedBytes(): number {
    return this.queuedBytes;
  }

  /** Received bytes waiting for read(). */
  get receiveBufferedBytes(): number {
    return this.bufferedBytes;
  }

  // ---- connect (used by the stack) ----

  /** Resolves with this connection when the handshake completes; rejects on failure. */
  waitConnected(): Promise<LwipConnection> {
    return new Promise((resolve, reject) => (this.connectWaiter = { resolve, reject }));
  }

  // ---- callbacks from the module (no module calls here) ----

  /** lwIP: the handshake completed. */
  onConnected(): void {
    const w = this.connectWaiter;
    this.connectWaiter = null;
    w?.resolve(this);
  }

  /** lwIP: `data` received (a copy; the stack already checked the receive budget), or end of stream when null. */
  onData(data: Uint8Array | null): void {
    if (this.closeRequested) return; // closing: unread data makes lwIP reset, as the kernel does
    if (data === null) {
      this.eof = true;
      this.host.markDirty(this); // both directions may now be finished
    } else {
      this.readQueue.push(data);
      this.bufferedBytes += data.length;
      this.host.accountReceived(data.length);
    }
    this.wakeReaders();
  }

  /** lwIP: the peer acknowledged data; room in the send buffer. */
  onSent(): void {
    this.lastAckedMs = this.host.monoMs();
    if (this.writes.length > 0 || this.writeSide === "pending" || this.closeRequested) this.host.markDirty(this);
  }

  /** lwIP: the pcb failed and is already freed. */
  onError(err: number): void {
    this.pcb = 0;
    // Closed and lingering for the peer's acknowledgements (flush): the peer acknowledged everything and closed too.
    if (err === Err.CLSD && this.closeRequested && !this.failure) return this.release({ reason: "closed" });
    this.fail(connectionError(err, this.connectWaiter !== null));
  }

  // ---- TcpConnection ----

  read(): Promise<Uint8Array | null> {
    if (this.readQueue.length > this.readHead) return Promise.resolve(this.take());
    if (this.failure) return Promise.reject(this.failure);
    if (this.eof || this.closeRequested) return Promise.resolve(null);
    return new Promise((resolve, reject) => this.readers.push({ resolve, reject }));
  }

  write(data: Uint8Array): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.writeSide !== "open" || this.closeRequested)
      return Promise.reject(new NetstackError("closed", "write after closeWrite() or close()"));
    if (data.length === 0) return Promise.resolve();
    if (this.queuedBytes > 0 && this.queuedBytes + data.length > WRITE_QUEUE_LIMIT_BYTES) {
      return Promise.reject(
        new NetstackError(
          "write-queue-full",
          `${this.queuedBytes} bytes already wait in write(); await each write (limit ${WRITE_QUEUE_LIMIT_BYTES})`,
        ),
      );
    }
    return new Promise((resolve, reject) => {
      this.writes.push({ data, offset: 0, resolve, reject });
      this.queuedBytes += data.length;
      this.host.markDirty(this);
    });
  }

  closeWrite(): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.writeSide === "done" || !this.pcb) return Promise.resolve();
    if (this.writeSide === "open") this.writeSide = "pending";
    this.watchDrain();
    return new Promise((resolve) => {
      this.closeWaiters.push(resolve);
      this.host.markDirty(this);
    });
  }

  close(): Promise<void> {
    if (!this.pcb) return Promise.resolve();
    this.closeRequested = true;
    this.watchDrain();
    this.dropUnread();
    for (const r of this.readers.splice(0)) r.resolve(null);
    return new Promise((resolve) => {
      this.closeWaiters.push(resolve);
      this.host.markDirty(this);
    });
  }

  abort(): void {
    this.abortWith(new NetstackError("aborted", "connection aborted"));
  }

  // ---- work done outside module callbacks ----

  /**
   * Moves queued writes into lwIP as far as its send buffer allows, sends a
   * FIN or closes when asked and the queue is empty, and reopens the receive
   * window by what read() consumed. Called by the stack, never from a callback.
   */
  flush(): void {
    const lwip = this.host.lwip;
    if (!this.pcb) return;
    if (this.recvedPending > 0) {
      lwip.bb_tcp_recved(this.pcb, this.recvedPending);
      this.recvedPending = 0;
    }
    let wrote = false;
    while (this.writes.length > 0) {
      const w = this.writes[0]!;
      const room = lwip.bb_tcp_sndbuf(this.pcb);
      if (room === 0) break;
      const n = Math.min(room, MAX_WRITE_CHUNK_BYTES, w.data.length - w.offset);
      this.host.mem().set(w.data.subarray(w.offset, w.offset + n), this.host.txBuf);
      const more = w.offset + n < w.data.length || this.writes.length > 1 ? 1 : 0;
      const err = lwip.bb_tcp_write(this.pcb, n, more);
      if (err === Err.MEM) {
        this.host.markBlocked(this);
        break;
      }
      if (err !== Err.OK) {
        this.abortWith(connectionError(err, false));
        return;
      }
      wrote = true;
      w.offset += n;
      this.queuedBytes -= n;
      if (w.offset === w.data.length) {
        this.writes.shift();
        w.resolve();
      }
    }
    if (wrote) lwip.bb_tcp_output(this.pcb);
    if (this.writes.length > 0) return;
    if (this.closeRequested) {
      const pcb = this.pcb;
      if (lwip.bb_tcp_outstanding(pcb) > 0) {
        // lwIP still holds data the peer has not acknowledged: FIN after it, and keep the pcb (so the
        // drain watch can bound it) until the peer took it all; onSent brings us back here.
        if (this.writeSide !== "done") {
          const err = lwip.bb_tcp_shutdown(pcb, 0, 1);
          if (err !== Err.OK && err !== Err.CONN) return this.abortWith(connectionError(err, false));
          this.writeSide = "done";
        }
        return;
      }
      this.release({ reason: "closed" });
      lwip.bb_tcp_close(pcb);
      return;
    }
    if (this.writeSide === "pending") {
      const err = lwip.bb_tcp_shutdown(this.pcb, 0, 1);
      if (err !== Err.OK && err !== Err.CONN) return this.abortWith(connectionError(err, false));
      this.writeSide = "done";
      for (const r of this.closeWaiters.splice(0)) r();
    }
    if (this.writeSide === "done" && this.eof) {
      // Both directions finished: hand the pcb back to lwIP (it finishes TIME_WAIT on its own).
      const pcb = this.pcb;
      this.release({ reason: "closed" });
      lwip.bb_tcp_close(pcb);
    }
  }

  /** Aborts (RST) with a given code, e.g. "timeout" when connect() gives up. */
  abortWithCode(code: NetstackErrorCode, message: string): void {
    this.abortWith(new NetstackError(code, message));
  }

  /** The stack is going away or failed: forget the pcb without touching it. */
  forget(error: NetstackError): void {
    this.pcb = 0;
    this.fail(error);
  }

  private take(): Uint8Array {
    const chunk = this.readQueue[this.readHead]!;
    this.readQueue[this.readHead++] = EMPTY;
    if (this.readHead > 64 && this.readHead * 2 > this.readQueue.length) {
      this.readQueue.splice(0, this.readHead);
      this.readHead = 0;
    }
    this.bufferedBytes -= chunk.length;
    this.host.accountReceived(-chunk.length);
    this.recvedPending += chunk.length;
    this.host.markDirty(this);
    return chunk;
  }

  private wakeReaders(): void {
    while (this.readers.length > 0) {
      if (this.readQueue.length > this.readHead) this.readers.shift()!.resolve(this.take());
      else if (this.eof) this.readers.shift()!.resolve(null);
      else break;
    }
  }

  private dropUnread(): void {
    this.host.accountReceived(-this.bufferedBytes);
    this.bufferedBytes = 0;
    this.readQueue.length = 0;
    this.readHead = 0;
  }

  private abortWith(e: NetstackError): void {
    if (this.pcb) {
      const pcb = this.pcb;
      this.pcb = 0;
      this.host.call(() => this.host.lwip.bb_tcp_abort(pcb));
    }
    this.fail(e);
  }

  private fail(e: NetstackError): void {
    if (this.failure) return;
    this.failure = e;
    this.dropUnread();
    const cw = this.connectWaiter;
    this.connectWaiter = null;
    cw?.reject(e);
    for (const r of this.readers.splice(0)) r.reject(e);
    for (const w of this.writes.splice(0)) w.reject(e);
    this.queuedBytes = 0;
    for (const r of this.closeWaiters.splice(0)) r();
    this.release({ reason: "error", code: e.code as NetstackErrorCode, message: e.message });
  }

  /** Starts the drain watch (once): from now, DRAIN_STALL_LIMIT_MS without an acknowledgement while data is still to send resets the connection. */
  private watchDrain(): void {
    if (this.drainTimer || !this.pcb) return;
    this.lastAckedMs = this.host.monoMs();
    this.armDrain();
  }

  private armDrain(): void {
    const due = Math.max(0, this.lastAckedMs + DRAIN_STALL_LIMIT_MS - this.host.monoMs());
    this.drainTimer = this.host.after(due, () => {
      this.drainTimer = null;
      if (!this.pcb) return;
      const outstanding = this.queuedBytes > 0 || this.host.lwip.bb_tcp_outstanding(this.pcb) > 0;
      if (!outstanding) return; // everything was taken; a later write would have to be after closeWrite(), which fails
      if (this.host.monoMs() - this.lastAckedMs >= DRAIN_STALL_LIMIT_MS) {
        return this.abortWithCode(
          "timeout",
          `the peer accepted nothing for ${DRAIN_STALL_LIMIT_MS / 1000} s after the connection was closed`,
        );
      }
      this.armDrain();
    });
  }

  private release(end: ConnectionEnd): void {
    this.drainTimer?.cancel();
    this.drainTimer = null;
    this.pcb = 0;
    for (const r of this.closeWaiters.splice(0)) r();
    this.host.released(this);
    this.endResolve(end);
  }
}

const EMPTY = new Uint8Array(0);
