/**
 * The proxy's tunnel (spec "Data path" step 3; docs/adr/0158-proxy-paths.md):
 * an ephemeral-key WireGuard peer of the host on a MultipathTunnel
 * (src/wireguard/multipathTunnel.ts: one unprivileged UDP socket, the relay
 * sessions of the grant's relay map, one alarm), with the userspace TCP/IP
 * stack (src/netstack) on top at the grant's client address. No TUN, no
 * root, no route.
 *
 * Paths: the host's candidates from the grant response and one relay
 * session per relay of the verified relay map (the client-role token; at
 * most two) go to the peer's PathSelector (src/wireguard/paths.ts): every
 * datagram goes to every candidate and is mirrored through the relays until
 * a direct path acknowledges our path probes, and again once it stops doing
 * so (docs/adr/0158-proxy-paths.md "path liveness"); moving between paths changes
 * only the transport address, so the WireGuard session and every inner TCP
 * connection survive it. A dropped relay session reconnects with bounded
 * backoff (src/wireguard/relaySessions.ts).
 *
 * The socket also carries the proxy's STUN bindings (socket(); spec "Data
 * path": one socket, one NAT mapping), and the tunnel's one alarm also
 * drives its owners' deadlines (addOwner: the candidate refresh,
 * src/proxy/candidateRefresh.ts, and the relay-token refresh,
 * src/proxy/relayTokenRefresh.ts, whose tokens setRelayTokens hands to the
 * sessions).
 *
 * Owns: the tunnel, the stack and the one peer. Must never: deliver a
 * packet to the stack that did not authenticate as the host, or keep a
 * timer, socket or relay connection after close().
 */
import { debugTunnelMtu } from "../protocol/debugKnobs.ts";
import { createNetstack, type Netstack, type TcpConnection } from "../netstack/index.ts";
import {
  MultipathTunnel,
  type Aead,
  type CandidateSocket,
  type KeyPair25519,
  type PathState,
  type RelayConnector,
  type RelaySessionInfo,
  type WgRandom,
} from "../wireguard/index.ts";
import type { VerifiedGrant } from "./grant.ts";
import type { Clock } from "../protocol/clock.ts";

/** Persistent keepalive towards the host, seconds: keeps NAT mappings on both sides and the host's view of the path fresh. */
export const PROXY_KEEPALIVE_SECONDS = 15;
/**
 * How long the first handshake waits for a relay session to open when the
 * grant lists relays, ms: an initiation is sent once per 5 s at most
 * (REKEY_TIMEOUT), so one sent before the relay opened would leave a
 * relay-only session waiting for the retry.
 */
export const RELAY_START_WAIT_MS = 1_500;

/** Options of ClientTunnel.start. */
export interface ClientTunnelOptions {
  /** This run's ephemeral key pair (memory only). */
  keyPair: KeyPair25519;
  grant: VerifiedGrant;
  aead: Aead;
  clock: Clock;
  random: WgRandom;
  /** Local address of the UDP socket: "0.0.0.0" (default) or "::". */
  bindHost?: string;
  /** Opens relay sessions (src/relayclient relayConnector); without it the grant's relays are not used. */
  relayConnector?: RelayConnector;
  /** Called when the path changes (direct pinned, unpinned, relay). */
  onPathChange?: (state: PathState) => void;
  /** Called when a relay session opens, drops or is refused. */
  onRelayChange?: (info: RelaySessionInfo) => void;
}

/** Work the tunnel's alarm drives besides the Device's timers (e.g. src/proxy/candidateRefresh.ts). */
export interface TunnelOwner {
  /** The owner's next deadline, monotonic ms, or null. */
  deadlineMs(): number | null;
  /** Runs at each alarm. Must not throw. */
  tick(): void;
}

/** The running tunnel. */
export class ClientTunnel {
  private lastChanges = 0;
  private owners: TunnelOwner[] = [];
  private closed = false;
  private stack!: Netstack;
  private readonly peer;
  private readonly selector;

  private constructor(
    private readonly o: ClientTunnelOptions,
    private readonly t: MultipathTunnel,
  ) {
    const g = o.grant.grant;
    const added = t.mp.addPeer({
      publicKey: new Uint8Array(Buffer.from(g.hostPublicKey, "base64")),
      allowedIps: [`${g.allocationAddress}/128`],
      persistentKeepaliveSec: PROXY_KEEPALIVE_SECONDS,
    });
    this.peer = added.peer;
    this.selector = added.selector;
    this.selector.setCandidates(o.grant.hostCandidates);
    t.attachRelays(this.peer, o.grant.relays, (relayId) => relayId);
  }

  /** The UDP port the tunnel's socket is bound to (its candidates' port). */
  get port(): number {
    return this.t.udp.port;
  }

  /** The tunnel's socket, for STUN bindings (src/wireguard/candidates.ts gatherCandidates). */
  socket(): CandidateSocket {
    return this.t.udp;
  }

  /** Folds `owner`'s deadline into the tunnel's alarm and runs its tick at each alarm. */
  addOwner(owner: TunnelOwner): void {
    this.owners.push(owner);
    this.t.arm();
  }

  /** Re-arms the alarm (an owner's deadline moved outside an alarm). */
  rearm(): void {
    if (!this.closed) this.t.arm();
  }

  /** Gives the relay sessions fresh tokens (verified by the caller; src/proxy/relayTokenRefresh.ts): a stopped session starts again. */
  setRelayTokens(relays: VerifiedGrant["relays"]): void {
    if (this.closed) return;
    this.t.attachRelays(this.peer, relays, (relayId) => relayId);
    this.t.arm();
  }

  private ownerDeadline(): number | null {
    let m: number | null = null;
    for (const o of this.owners) {
      const d = o.deadlineMs();
      if (d !== null && (m === null || d < m)) m = d;
    }
    return m;
  }

  /** Binds the socket, starts the stack, the relay sessions and the first handshake. Rejects when the socket cannot be bound. */
  static async start(o: ClientTunnelOptions): Promise<ClientTunnel> {
    let self: ClientTunnel | null = null;
    let relayOpened: () => void = () => {};
    const firstRelay = new Promise<void>((r) => (relayOpened = r));
    const t = await MultipathTunnel.open({
      privateKey: o.keyPair.privateKey,
      clock: o.clock,
      random: o.random,
      aead: o.aead,
      listen: { hostname: o.bindHost ?? "0.0.0.0", port: 0 },
      ...(o.relayConnector ? { relayConnector: o.relayConnector } : {}),
      deliver: (packet) => self?.stack?.input(packet),
      onAuthenticated: () => self?.notePath(),
      ownerDeadlineMs: () => self?.ownerDeadline() ?? null,
      onAlarm: () => {
        self?.notePath();
        for (const owner of self?.owners ?? []) owner.tick();
      },
      onRelayChange: (i) => {
        o.onRelayChange?.(i);
        if (i.state === "open") relayOpened();
        // A relay that just opened gets the handshake at once rather than at the next retry.
        if (i.state === "open" && self && !self.connected()) self.t.mp.device.initiateHandshake(self.peer);
        self?.t.arm();
      },
    });
    self = new ClientTunnel(o, t);
    const me = self;
    me.stack = createNetstack({
      ipv6: [o.grant.grant.clientAddress],
      // TUNNEL_MTU (1,280, ADR 0103): the stack's segments and the MSS it advertises follow it.
      mtu: debugTunnelMtu(process.env),
      // The view is valid only during the call, and the Device may stage the packet for a handshake.
      output: (p) => {
        t.mp.device.sendPacket(Uint8Array.from(p));
        t.arm();
      },
    });
    if (o.relayConnector && o.grant.relays.length) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([firstRelay, new Promise<void>((r) => (timer = setTimeout(r, RELAY_START_WAIT_MS)))]);
      clearTimeout(timer);
    }
    if (!me.connected()) t.mp.device.initiateHandshake(me.peer);
    t.arm();
    return me;
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

  /** Counters for logs and tests. */
  stats() {
    return {
      device: this.t.mp.device.counters,
      socket: { ...this.t.udp.counters },
      path: this.selector.state(),
      relays: this.t.relays.list(),
      stack: this.stack.stats(),
    };
  }

  /** Aborts every inner connection, closes the relay sessions, stops the alarm and closes the socket. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.owners = [];
    this.stack?.close();
    this.t.removePeer(this.peer);
    this.t.close();
  }
}
