/**
 * The bounds of the userspace TCP/IP stack, in one place. The lwIP build
 * (native/lwip/port/lwipopts.h, native/lwip/build.sh) compiles the same numbers
 * in; a test checks the two agree where the module can report them.
 *
 * Memory per connection: at most TCP_WINDOW_BYTES of received data the reader
 * has not taken (the window only reopens as read() consumes), at most
 * TCP_SEND_BUFFER_BYTES queued in the stack, and at most
 * WRITE_QUEUE_LIMIT_BYTES waiting in write() calls. In total: the module's
 * linear memory never exceeds WASM_MAX_MEMORY_BYTES (its heap for send data is
 * capped at HEAP_LIMIT_BYTES), and received-but-unread data across all
 * connections never exceeds RECEIVE_BUDGET_BYTES (beyond it the stack refuses
 * segments and the peers retransmit).
 */

import { tcpMssBytes, TUNNEL_MTU } from "../protocol/tunnelMtu.ts";

/** The default link MTU of a stack: the tunnel MTU (src/protocol/tunnelMtu.ts, ADR 0103), bytes. */
export { TUNNEL_MTU };
/**
 * Ceiling on the TCP maximum segment size, bytes, compiled into the module
 * (TCP_MSS): the MSS of a 1,420-byte MTU over IPv6. The segments a stack
 * sends and the MSS its SYNs advertise follow the stack's link MTU (lwIP's
 * TCP_CALCULATE_EFF_SEND_MSS: MTU − IP header − TCP header, per family),
 * never above this ceiling; so MTUs up to 1,420 are exact.
 */
export const TCP_MSS_CEILING_BYTES = 1360;
/** The MSS a stack at the default MTU uses over IPv6 (its SYNs advertise it), bytes: 1,220. */
export const TCP_MSS_BYTES = Math.min(TCP_MSS_CEILING_BYTES, tcpMssBytes(TUNNEL_MTU, 6));
/** Receive window per connection, bytes (TCP_WND, window scale 3). */
export const TCP_WINDOW_BYTES = 256 * 1024;
/** Send buffer per connection inside the stack, bytes (TCP_SND_BUF). */
export const TCP_SEND_BUFFER_BYTES = 256 * 1024;
/** Most simultaneous connections (listeners excluded); lwIP's pcb pool holds this many (MEMP_NUM_TCP_PCB). */
export const MAX_CONNECTIONS = 512;
/** Most listeners (MEMP_NUM_TCP_PCB_LISTEN). */
export const MAX_LISTENERS = 16;
/** The module's linear memory ceiling, bytes (build.sh --max-memory). */
export const WASM_MAX_MEMORY_BYTES = 64 * 1024 * 1024;
/** Cap on the module's heap (send data copied by tcp_write, small control buffers), bytes. */
export const HEAP_LIMIT_BYTES = 32 * 1024 * 1024;
/** Received data held for readers across all connections, bytes: the default and the most a stack may set (NetstackOptions.receiveBudgetBytes). */
export const RECEIVE_BUDGET_BYTES = 32 * 1024 * 1024;
/** Bytes a connection's pending write() calls may hold beyond what the stack took. */
export const WRITE_QUEUE_LIMIT_BYTES = 1024 * 1024;
/** Largest single chunk handed to tcp_write (its length is 16-bit), bytes. */
export const MAX_WRITE_CHUNK_BYTES = 65535;
/** Largest IP packet input() takes, bytes (the module's input buffer). */
export const MAX_PACKET_BYTES = 65535;
/** Packets queued when input() is called from inside the stack (e.g. a synchronous link); beyond, dropped. */
export const REENTRANT_INPUT_QUEUE_PACKETS = 1024;
/**
 * After close() or closeWrite(), how long the peer may accept none of the
 * data still to send (its window stays zero) before the connection is reset
 * (RST, end code "timeout"), ms. Bounds what a peer that never reads holds
 * after our side closed: the pcb, up to TCP_SEND_BUFFER_BYTES in the stack
 * and WRITE_QUEUE_LIMIT_BYTES in write() calls (issue 18 item 4). Any byte
 * the peer acknowledges starts the period again.
 */
export const DRAIN_STALL_LIMIT_MS = 30_000;
/** How long connect() waits for the handshake before aborting, ms. */
export const CONNECT_TIMEOUT_MS = 10_000;
/** How often blocked writers retry when the heap was full, ms (the TCP timer interval). */
export const TCP_TIMER_MS = 20;
/** Pending accepted connections per listener (TCP_DEFAULT_LISTEN_BACKLOG). */
export const LISTEN_BACKLOG = 64;
