/**
 * The connection interface of the userspace TCP/IP stack: what a proxy needs
 * from TCP over a packet link (a TUN device or a WireGuard peer), and nothing
 * of the implementation behind it (today lwIP as WebAssembly, src/netstack/lwip;
 * a TypeScript TCP could replace it behind these types).
 *
 * Implements the client side of docs/architecture.md, "Private networking": TCP
 * over IPv4 and IPv6 with the tunnel's 1,280-byte MTU, backpressure in both directions
 * and bounded memory (src/netstack/limits.ts).
 * Must never: import a role (agent, scheduler, cli, proxy), or expose lwIP
 * handles, pointers or error numbers.
 */
import type { TimerPort } from "./timers.ts";

/** Where outgoing IP packets go. The view is valid only during the call: copy to keep. */
export type PacketOutput = (packet: Uint8Array) => void;

/** An IPv4 address with its prefix length, e.g. { address: "10.7.0.2", prefixLength: 24 }. */
export interface Ipv4Config {
  address: string;
  prefixLength: number;
}

/** Options of a stack. At least one address family must be configured. */
export interface NetstackOptions {
  /** The stack's IPv4 address, if any. */
  ipv4?: Ipv4Config;
  /** The stack's IPv6 addresses (at most 3), if any. */
  ipv6?: string[];
  /** Link MTU, bytes (1,280..65,535). Default TUNNEL_MTU (1,280). The TCP MSS follows it (limits.ts, TCP_MSS_CEILING_BYTES). */
  mtu?: number;
  /** Receives every outgoing packet. It must not call input() synchronously (input() then queues). */
  output: PacketOutput;
  /** Clock and timers. Default: realTimers. */
  timers?: TimerPort;
  /** 32 random bits per call, for initial sequence numbers and ports. Default: crypto.getRandomValues. */
  random?: () => number;
  /** Received-but-unread bytes held across all connections, 64 KiB..RECEIVE_BUDGET_BYTES. Default RECEIVE_BUDGET_BYTES. */
  receiveBudgetBytes?: number;
}

/** Counters and gauges of a stack. */
export interface NetstackStats {
  /** Open connections (connecting, established or closing, not yet released). */
  connections: number;
  listeners: number;
  /** Received bytes waiting for read() across all connections (≤ the receive budget). */
  receiveBufferedBytes: number;
  /** Bytes in write() calls the stack has not taken yet, all connections. */
  writeQueuedBytes: number;
  /** Bytes the stack's heap holds (send buffers), and its high-water mark. */
  heapBytes: number;
  heapPeakBytes: number;
  /** Size of the module's linear memory, bytes (≤ WASM_MAX_MEMORY_BYTES). */
  memoryBytes: number;
  packetsIn: number;
  packetsOut: number;
  /** Input packets dropped (pool exhausted, too large, re-entrant queue full). */
  packetsDropped: number;
}

/** Why a connection ended: "closed" (both sides finished), or the error code that ended it. */
export type ConnectionEnd = { reason: "closed" } | { reason: "error"; code: string; message: string };

/** One TCP connection. Every method is safe to call in any state; misuse rejects with a NetstackError. */
export interface TcpConnection {
  readonly localAddress: string;
  readonly localPort: number;
  readonly remoteAddress: string;
  readonly remotePort: number;
  /**
   * The next chunk of received data (any size ≥ 1), or null at end of stream
   * (the peer half-closed). Rejects with "reset", "timeout" or "aborted".
   * Reading reopens the receive window: an idle reader stops the sender.
   */
  read(): Promise<Uint8Array | null>;
  /**
   * Queues `data` for sending; resolves once the stack has taken all of it
   * (backpressure: await each write). The caller must not modify `data` until
   * then. Rejects with "closed" after closeWrite()/close(), "write-queue-full"
   * when WRITE_QUEUE_LIMIT_BYTES are already waiting, or the connection's error.
   */
  write(data: Uint8Array): Promise<void>;
  /** Half-close: sends FIN after the queued data; reading continues. Resolves when the FIN is queued. */
  closeWrite(): Promise<void>;
  /** Graceful close of both directions (unread data makes it a reset, as in the kernel). */
  close(): Promise<void>;
  /** Resets the connection (RST) at once; pending reads and writes reject with "aborted". */
  abort(): void;
  /** Settles when the connection is released by this side's view: closed cleanly or failed. Never rejects. */
  readonly ended: Promise<ConnectionEnd>;
}

/** A listening socket; `close()` stops accepting (accepted connections stay). */
export interface TcpListener {
  readonly address: string;
  readonly port: number;
  close(): void;
}

/** A TCP/IP stack over one packet link. */
export interface Netstack {
  /** Hands one received IP packet to the stack (copied). Returns false when it was dropped. */
  input(packet: Uint8Array): boolean;
  /** Hands several packets over in one pass (one timer check for all). Returns how many were taken. */
  inputBatch(packets: Uint8Array[]): number;
  /** Opens a connection to `host` (an IPv4 or IPv6 literal) and `port`. Rejects with a NetstackError. */
  connect(host: string, port: number, options?: { timeoutMs?: number }): Promise<TcpConnection>;
  /** Listens on `host`:`port` (the stack's own address, or "0.0.0.0" / "::"). Calls `onConnection` for each accepted one. */
  listen(host: string, port: number, onConnection: (connection: TcpConnection) => void): TcpListener;
  stats(): NetstackStats;
  /** Aborts every connection, closes listeners and stops timers. */
  close(): void;
}
