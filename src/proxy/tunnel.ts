/**
 * The proxy's tunnel (spec "Data path" step 3; docs/adr/0158-proxy-paths.md):
 * an ephemeral-key WireGuard Device with one peer, the host, on one
 * unprivileged UDP socket, with the userspace TCP/IP stack (src/netstack) on
 * top at the grant's client address. No TUN, no root, no route.
 *
 * Paths: the host's candidates from the grant response (and, once relays
 * exist on main, the relay sessions of the relay map) go to the peer's
 * PathSelector (src/wireguard/paths.ts): every datagram goes to every
 * candidate until the first one that decrypts pins its source; moving
 * between paths changes only the transport address, so the WireGuard
 * session and every inner TCP connection survive it.
 *
 * Owns: the socket, the Device, the stack and the one alarm driving the
 * Device's timers and probes. Must never: deliver a packet to the stack that
 * did not authenticate as the host, or keep a timer or socket after close().
 */
import { TUNNEL_MTU } from "../protocol/connection.ts";
import { createNetstack, type Netstack, type TcpConnection } from "../netstack/index.ts";
import { MultipathDevice, openSharedSocket, type Aead, type KeyPair25519, type PathState, type SharedSocket, type WgClock, type WgRandom } from "../wireguard/index.ts";
import type { VerifiedGrant } from "./grant.ts";

/** Persistent keepalive towards the host, seconds: keeps NAT mappings on both sides and the host's view of the path fresh. */
export const PROXY_KEEPALIVE_SECONDS = 15;
/** Longest single alarm sleep, ms. */
const MAX_ALARM_MS = 60_000;

/** Options of ClientTunnel.start. */
export interface ClientTunnelOptions {
  /** This run's ephemeral key pair (memory only). */
  keyPair: KeyPair25519;
  grant: VerifiedGrant;
  aead: Aead;
  clock: WgClock;
  random: WgRandom;
  /** Local address of the UDP socket: "0.0.0.0" (default) or "::". */
  bindHost?: string;
  /** Called when the path changes (direct pinned, unpinned, relay). */
  onPathChange?: (state: PathState) => void;
}

/** The running tunnel. */
export class ClientTunnel {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  private lastChanges = 0;
  private socket!: SharedSocket;
  private stack!: Netstack;
  private readonly mp: MultipathDevice;
  private readonly peer;
  private readonly selector;

  private constructor(private readonly o: ClientTunnelOptions) {
    this.mp = new MultipathDevice({
      privateKey: o.keyPair.privateKey,
      clock: o.clock,
      random: o.random,
      aead: o.aead,
      io: {
        sendUdp: (d, address, port) => this.socket?.sendUdp(d, address, port),
        sendRelay: () => false,
      },
      deliver: (packet) => this.stack?.input(packet),
      onAuthenticated: () => this.notePath(),
    });
    const g = o.grant.grant;
    const added = this.mp.addPeer({
      publicKey: new Uint8Array(Buffer.from(g.hostPublicKey, "base64")),
      allowedIps: [`${g.allocationAddress}/128`],
      persistentKeepaliveSec: PROXY_KEEPALIVE_SECONDS,
    });
    this.peer = added.peer;
    this.selector = added.selector;
    this.selector.setCandidates(o.grant.hostCandidates);
  }

  /** The UDP port the tunnel's socket is bound to (its candidates' port). */
  get port(): number {
    return this.socket.port;
  }

  /** Binds the socket, starts the stack and the first handshake. Rejects when the socket cannot be bound. */
  static async start(o: ClientTunnelOptions): Promise<ClientTunnel> {
    const t = new ClientTunnel(o);
    t.socket = await openSharedSocket({
      hostname: o.bindHost ?? "0.0.0.0",
      port: 0,
      random: o.random,
      onWireGuard: (d, from) => {
        t.mp.receive(d, from);
        t.arm();
      },
    });
    t.stack = createNetstack({
      ipv6: [o.grant.grant.clientAddress],
      mtu: TUNNEL_MTU,
      // The view is valid only during the call, and the Device may stage the packet for a handshake.
      output: (p) => {
        t.mp.device.sendPacket(Uint8Array.from(p));
        t.arm();
      },
    });
    t.mp.device.initiateHandshake(t.peer);
    t.arm();
    return t;
  }

  /** Opens a TCP connection to `port` on the allocation's address through the tunnel. Rejects with a NetstackError. */
  connect(port: number, timeoutMs = 30_000): Promise<TcpConnection> {
    return this.stack.connect(this.o.grant.grant.allocationAddress, port, { timeoutMs });
  }

  /** The current path. */
  path(): PathState {
    return this.selector.state();
  }

  /** True once a handshake with the host has completed. */
  connected(): boolean {
    return this.peer.keypairs.current !== null;
  }

  private notePath(): void {
    if (this.selector.changes === this.lastChanges) return;
    this.lastChanges = this.selector.changes;
    this.o.onPathChange?.(this.selector.state());
  }

  private arm(): void {
    if (this.closed) return;
    const next = this.mp.nextDeadlineMs();
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (next === null) return;
    this.timer = setTimeout(() => this.fire(), Math.ceil(Math.min(MAX_ALARM_MS, Math.max(0, next - this.o.clock.nowMs()))));
  }

  private fire(): void {
    this.timer = null;
    if (this.closed) return;
    this.mp.tick();
    this.notePath();
    this.arm();
  }

  /** Counters for logs and tests. */
  stats() {
    return { device: this.mp.device.counters, socket: { ...this.socket.counters }, path: this.selector.state(), stack: this.stack.stats() };
  }

  /** Aborts every inner connection, stops the alarm and closes the socket. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.stack.close();
    this.mp.removePeer(this.peer.remote.publicKey);
    this.socket.close();
  }
}
