/**
 * One UDP socket shared by WireGuard, STUN candidate discovery and direct-path
 * checks (spec "Data path": "Sharing the socket keeps one NAT mapping alive
 * for all three"), for the host endpoint and the client proxy.
 *
 * Owns: the socket (Bun.udpSocket), the demultiplexing of what arrives (a
 * WireGuard message: type 1–4 then three zero bytes; else a STUN message,
 * src/protocol/stun.ts; else dropped and counted), and STUN Binding
 * transactions (a bounded table keyed by transaction ID; a response counts
 * only from the server it was sent to). Direct-path checks are WireGuard
 * keepalives (src/wireguard/multipath.ts) and need nothing here.
 * ICMP errors the kernel queues on the socket (a candidate that is
 * unreachable: ENETUNREACH, ECONNREFUSED, EHOSTUNREACH) are counted and
 * otherwise ignored: probing candidates that do not answer is the point.
 * Must never: throw from the receive callback, keep more than
 * MAX_PENDING_STUN transactions, or keep a timer after close().
 */
import {
  decodeStun,
  encodeBindingRequest,
  STUN_BINDING_SUCCESS,
  STUN_TRANSACTION_ID_BYTES,
  type StunAddress,
} from "../protocol/stun.ts";
import { udpPath, type UdpPath } from "./paths.ts";
import type { WgRandom } from "./ports.ts";

/** Most STUN transactions in flight on one socket. */
export const MAX_PENDING_STUN = 16;
/** Retransmission delays of one Binding request, ms (RFC 5389 §7.2.1 starts at 500 ms; shortened: candidates refresh every 20 s anyway). */
export const STUN_RETRANSMIT_MS = [250, 500, 1000] as const;

/** Counters of the socket. */
export interface SharedSocketCounters {
  wireguardIn: number;
  stunRequestsSent: number;
  stunResponsesMatched: number;
  /** STUN messages that matched no transaction (or came from another address). */
  stunUnmatched: number;
  /** Datagrams that are neither WireGuard nor STUN. */
  unknownDropped: number;
  /** Sends the kernel refused (buffer full, unreachable). */
  sendFailures: number;
  /** Errors the socket reported (mostly ICMP unreachable for a candidate that does not answer). */
  socketErrors: number;
}

/** Options of openSharedSocket. */
export interface SharedSocketOptions {
  /** Local address, e.g. "0.0.0.0", "::" or an interface address. */
  hostname: string;
  /** Local port; 0 picks one. */
  port: number;
  random: WgRandom;
  /** Each WireGuard-shaped datagram, with its source. The view may be reused after return: copy to keep. */
  onWireGuard(datagram: Uint8Array, from: UdpPath): void;
}

interface Pending {
  server: string;
  resolve(a: StunAddress | null): void;
  timer: ReturnType<typeof setTimeout> | null;
}

/** The socket. */
export class SharedSocket {
  readonly counters: SharedSocketCounters = {
    wireguardIn: 0,
    stunRequestsSent: 0,
    stunResponsesMatched: 0,
    stunUnmatched: 0,
    unknownDropped: 0,
    sendFailures: 0,
    socketErrors: 0,
  };
  private readonly pending = new Map<string, Pending>();
  private closed = false;

  /** Use openSharedSocket(). */
  constructor(
    private readonly socket: Bun.udp.Socket<"uint8array">,
    private readonly random: WgRandom,
  ) {}

  /** The bound port. */
  get port(): number {
    return this.socket.port;
  }

  /** Sends one datagram. Never throws; a refusal is counted. */
  sendUdp(datagram: Uint8Array, address: string, port: number): void {
    if (this.closed) return;
    try {
      if (!this.socket.send(datagram, port, address)) this.counters.sendFailures++;
    } catch {
      this.counters.sendFailures++;
    }
  }

  /** Called by the socket for each datagram. Never throws. */
  handle(b: Uint8Array, port: number, address: string): void {
    try {
      if (b.length >= 4 && b[0]! >= 1 && b[0]! <= 4 && b[1] === 0 && b[2] === 0 && b[3] === 0) {
        this.counters.wireguardIn++;
        return this.onWireGuard(b, udpPath(address, port));
      }
      const m = decodeStun(b);
      if (!m) {
        this.counters.unknownDropped++;
        return;
      }
      const key = Buffer.from(m.transactionId).toString("hex");
      const p = this.pending.get(key);
      if (!p || p.server !== udpPath(address, port).key || m.type !== STUN_BINDING_SUCCESS || !m.mapped) {
        this.counters.stunUnmatched++;
        return;
      }
      this.counters.stunResponsesMatched++;
      this.finish(key, m.mapped);
    } catch {
      this.counters.unknownDropped++;
    }
  }

  /** Set by openSharedSocket. */
  onWireGuard: (datagram: Uint8Array, from: UdpPath) => void = () => {};

  /**
   * Asks STUN server `server` for this socket's mapped address (RFC 5389
   * Binding), retransmitting after STUN_RETRANSMIT_MS. Resolves the mapped
   * address, or null on timeout, when MAX_PENDING_STUN transactions are in
   * flight, or when the socket closes. Never rejects.
   */
  stunBinding(server: { address: string; port: number }): Promise<StunAddress | null> {
    if (this.closed || this.pending.size >= MAX_PENDING_STUN) return Promise.resolve(null);
    const txid = this.random.fill(new Uint8Array(STUN_TRANSACTION_ID_BYTES));
    const key = Buffer.from(txid).toString("hex");
    const request = encodeBindingRequest(txid);
    return new Promise((resolve) => {
      const entry: Pending = { server: udpPath(server.address, server.port).key, resolve, timer: null };
      this.pending.set(key, entry);
      let attempt = 0;
      const send = () => {
        if (!this.pending.has(key)) return;
        if (attempt >= STUN_RETRANSMIT_MS.length) return this.finish(key, null);
        this.counters.stunRequestsSent++;
        this.sendUdp(request, server.address, server.port);
        entry.timer = setTimeout(send, STUN_RETRANSMIT_MS[attempt++]);
      };
      send();
    });
  }

  private finish(key: string, result: StunAddress | null): void {
    const p = this.pending.get(key);
    if (!p) return;
    this.pending.delete(key);
    if (p.timer) clearTimeout(p.timer);
    p.resolve(result);
  }

  /** Closes the socket; pending STUN transactions resolve null. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const key of [...this.pending.keys()]) this.finish(key, null);
    this.socket.close();
  }
}

/** Binds the socket. Rejects when the address cannot be bound (in use, not local). */
export async function openSharedSocket(o: SharedSocketOptions): Promise<SharedSocket> {
  let shared: SharedSocket | null = null;
  const socket = await Bun.udpSocket({
    hostname: o.hostname,
    port: o.port,
    binaryType: "uint8array",
    socket: {
      data(_s, buf, port, address) {
        shared?.handle(buf, port, address);
      },
      error() {
        if (shared) shared.counters.socketErrors++;
      },
    },
  });
  shared = new SharedSocket(socket, o.random);
  shared.onWireGuard = o.onWireGuard;
  return shared;
}
