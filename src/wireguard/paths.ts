/**
 * Path selection for one WireGuard peer reachable several ways (spec
 * "Coordination and path selection"): until a direct path is confirmed,
 * every datagram goes to every known candidate of the peer and is mirrored
 * through the relay; the first datagram that decrypts from a direct source
 * pins that source. Switching relay → direct changes only the transport
 * address, never the session, so inner connections survive.
 *
 * Owns: the endpoint values a Device<PathEndpoint> sees (a UDP address or a
 * relay), the pinned direct endpoint, per-path evidence (when each path last
 * carried an authenticated datagram), and which paths a datagram goes to:
 * - handshake initiations go to every path (they are rate-limited to one per
 *   5 s, and the first to arrive decides the path);
 * - handshake responses and cookie replies go exactly where the message they
 *   answer came from;
 * - transport messages go to the pinned direct endpoint while it is pinned,
 *   else to every path.
 * A pinned endpoint is dropped once another path has carried authenticated
 * traffic more recently and the pinned one has been silent for
 * DIRECT_STALE_MS (the peer is alive, but not there).
 * Must never: send to more than MAX_CANDIDATES + 2 destinations per
 * datagram, send to an address that names no single peer (unspecified,
 * multicast, broadcast), or read a clock other than the one it is given.
 */
import { MESSAGE_COOKIE_REPLY, MESSAGE_INITIATION, MESSAGE_RESPONSE } from "./constants.ts";
import type { Endpoint } from "./peer.ts";
import type { WgClock } from "./ports.ts";
import { isPeerAddress } from "../protocol/ipScope.ts";

/** Most candidates of a peer a selector keeps (src/protocol/connection.ts MAX_CANDIDATES). */
export const MAX_PATH_CANDIDATES = 16;
/** A pinned direct endpoint silent this long while another path carries the peer's traffic is dropped, ms. */
export const DIRECT_STALE_MS = 15_000;
/** How often the owner should probe candidates while no direct path is pinned, ms. */
export const PROBE_INTERVAL_MS = 1_000;
/** Probe interval after PROBE_FAST_ROUNDS unanswered rounds, ms. */
export const PROBE_SLOW_INTERVAL_MS = 5_000;
/** Probe rounds at PROBE_INTERVAL_MS before slowing down. */
export const PROBE_FAST_ROUNDS = 10;

/** A UDP destination. */
export interface UdpPath extends Endpoint {
  readonly kind: "udp";
  readonly address: string;
  readonly port: number;
}

/** A relay session. */
export interface RelayPath extends Endpoint {
  readonly kind: "relay";
  readonly relayId: string;
}

/** A peer whose address is not known yet: its datagrams go to every path. */
export interface UnknownPath extends Endpoint {
  readonly kind: "unknown";
}

/** Where a datagram came from or goes to. */
export type PathEndpoint = UdpPath | RelayPath | UnknownPath;

/** The endpoint of a peer not heard from yet (a Device drops datagrams to a peer without an endpoint). */
export function unknownPath(): UnknownPath {
  return { kind: "unknown", key: "unknown" };
}

/** A fresh UDP endpoint value ("192.0.2.1:51820", "[fd00::1]:51820"); a new object per datagram, so identity marks the one that authenticated. */
export function udpPath(address: string, port: number): UdpPath {
  return { kind: "udp", address, port, key: address.includes(":") ? `[${address}]:${port}` : `${address}:${port}` };
}

/** A fresh relay endpoint value (`relay:<id>`). */
export function relayPath(relayId: string): RelayPath {
  return { kind: "relay", relayId, key: `relay:${relayId}` };
}

/** Where the selector's datagrams go. */
export interface PathIo {
  sendUdp(datagram: Uint8Array, address: string, port: number): void;
  /** Sends through relay `relayId`; false when that relay session is not open. */
  sendRelay(relayId: string, datagram: Uint8Array): boolean;
}

/** What the selector reports. */
export interface PathState {
  /** "direct" when a direct endpoint is pinned, "relay" when only a relay carried authenticated traffic recently, else "none". */
  path: "direct" | "relay" | "none";
  /** The pinned direct endpoint's key, or null. */
  direct: string | null;
  /** The relay that last carried authenticated traffic, or null. */
  relay: string | null;
  /** Times a direct endpoint was pinned (first time and every change). */
  pins: number;
  /** Times a pinned endpoint was dropped as stale. */
  unpins: number;
  /** Datagrams sent, per kind of destination. */
  sentDirect: number;
  sentMirrored: number;
  sentRelay: number;
}

/** The path selector of one peer. */
export class PathSelector {
  private candidates: UdpPath[] = [];
  private relays: string[] = [];
  private pinned: UdpPath | null = null;
  private readonly lastAuthMs = new Map<string, number>();
  private lastRelay: string | null = null;
  private onlyTo: PathEndpoint | null = null;
  private readonly stats = { pins: 0, unpins: 0, sentDirect: 0, sentMirrored: 0, sentRelay: 0 };
  /** Probe rounds since the last pin (the owner's probe timer reads probeIntervalMs()). */
  probeRounds = 0;
  /** Incremented whenever the path changes (a pin, an unpin, another relay): owners report on change only. */
  changes = 0;

  constructor(
    private readonly io: PathIo,
    private readonly clock: Pick<WgClock, "nowMs">,
  ) {}

  /**
   * Replaces the peer's known candidates (duplicates dropped, at most
   * MAX_PATH_CANDIDATES kept). A candidate that names no single peer
   * (unspecified, multicast, broadcast, not an IP: ipScope.ts
   * isPeerAddress) is dropped: the other side chose it, and a datagram to
   * it would reach this machine itself or everyone on the link.
   */
  setCandidates(list: ReadonlyArray<{ address: string; port: number }>): void {
    const seen = new Set<string>();
    const out: UdpPath[] = [];
    for (const c of list) {
      if (!isPeerAddress(c.address)) continue;
      const p = udpPath(c.address, c.port);
      if (seen.has(p.key) || out.length >= MAX_PATH_CANDIDATES) continue;
      seen.add(p.key);
      out.push(p);
    }
    this.candidates = out;
  }

  /** The keys ("address:port") of the peer's known candidates, in order (for stats). */
  candidateKeys(): string[] {
    return this.candidates.map((c) => c.key);
  }

  /** Adds one candidate learnt at run time (e.g. a peer-reflexive source), keeping the bound; one that names no single peer is ignored (see setCandidates). */
  addCandidate(address: string, port: number): void {
    if (!isPeerAddress(address)) return;
    const p = udpPath(address, port);
    if (this.candidates.some((c) => c.key === p.key)) return;
    if (this.candidates.length >= MAX_PATH_CANDIDATES) this.candidates.shift();
    this.candidates.push(p);
  }

  /** The relays datagrams are mirrored through (their sessions are the owner's). */
  setRelays(relayIds: readonly string[]): void {
    this.relays = [...new Set(relayIds)].slice(0, 2);
  }

  /** The UDP destinations a probe round covers: every candidate, and the pinned endpoint. */
  probeTargets(): UdpPath[] {
    const t = [...this.candidates];
    if (this.pinned && !t.some((c) => c.key === this.pinned!.key)) t.push(this.pinned);
    return t;
  }

  /** The interval until the owner's next probe round, ms (fast at first, slower after PROBE_FAST_ROUNDS). */
  probeIntervalMs(): number {
    return this.probeRounds < PROBE_FAST_ROUNDS ? PROBE_INTERVAL_MS : PROBE_SLOW_INTERVAL_MS;
  }

  /** Runs `fn` with every datagram it produces sent only to `target` (for per-candidate probes: each gets its own keepalive). */
  sendingOnlyTo(target: PathEndpoint, fn: () => void): void {
    const prev = this.onlyTo;
    this.onlyTo = target;
    try {
      fn();
    } finally {
      this.onlyTo = prev;
    }
  }

  /** Sends one datagram the Device addressed to `to` (the peer's roaming endpoint, possibly null). See the module header for the rules. */
  send(datagram: Uint8Array, to: PathEndpoint | null): void {
    if (this.onlyTo) return this.sendTo(this.onlyTo, datagram);
    const type = datagram[0];
    if ((type === MESSAGE_RESPONSE || type === MESSAGE_COOKIE_REPLY) && to && to.kind !== "unknown") return this.sendTo(to, datagram);
    this.expireStalePin();
    if (type !== MESSAGE_INITIATION && this.pinned) return this.sendTo(this.pinned, datagram);
    // Direct copies first: where both arrive, the direct one should win the race.
    const sent = new Set<string>();
    const targets = this.probeTargets();
    if (to?.kind === "udp") targets.push(to);
    for (const t of targets) {
      if (sent.has(t.key)) continue;
      sent.add(t.key);
      this.io.sendUdp(datagram, t.address, t.port);
      this.stats.sentMirrored++;
    }
    for (const r of this.relays) {
      if (this.io.sendRelay(r, datagram)) this.stats.sentRelay++;
    }
    if (to?.kind === "relay" && !this.relays.includes(to.relayId) && this.io.sendRelay(to.relayId, datagram)) this.stats.sentRelay++;
  }

  private sendTo(t: PathEndpoint, datagram: Uint8Array): void {
    if (t.kind === "udp") {
      this.io.sendUdp(datagram, t.address, t.port);
      this.stats.sentDirect++;
    } else if (t.kind === "relay" && this.io.sendRelay(t.relayId, datagram)) this.stats.sentRelay++;
  }

  /**
   * Records that a datagram from `from` authenticated (it completed a
   * handshake or decrypted). The first direct source pins; a later direct
   * source replaces the pin (the peer roamed).
   */
  authenticated(from: PathEndpoint): void {
    if (from.kind === "unknown") return;
    const now = this.clock.nowMs();
    this.lastAuthMs.delete(from.key);
    this.lastAuthMs.set(from.key, now);
    // Insertion order is recency order: drop the oldest past the bound.
    if (this.lastAuthMs.size > MAX_PATH_CANDIDATES + 4) this.lastAuthMs.delete(this.lastAuthMs.keys().next().value!);
    if (from.kind === "relay") {
      // With two relays the first copy to arrive alternates between them: that is no change of
      // path. Only a relay taking over from one silent for DIRECT_STALE_MS (or from none) is.
      const prevAt = this.lastRelay === null ? -Infinity : (this.lastAuthMs.get(`relay:${this.lastRelay}`) ?? -Infinity);
      if (this.lastRelay !== from.relayId && (this.lastRelay === null || now - prevAt >= DIRECT_STALE_MS)) this.changes++;
      this.lastRelay = from.relayId;
      return;
    }
    if (this.pinned?.key !== from.key) {
      this.pinned = from;
      this.stats.pins++;
      this.changes++;
      this.probeRounds = 0;
    }
  }

  private expireStalePin(): void {
    const p = this.pinned;
    if (!p) return;
    const now = this.clock.nowMs();
    const mine = this.lastAuthMs.get(p.key) ?? 0;
    if (now - mine < DIRECT_STALE_MS) return;
    for (const [key, at] of this.lastAuthMs) {
      if (key !== p.key && at > mine) {
        this.pinned = null;
        this.stats.unpins++;
        this.changes++;
        return;
      }
    }
  }

  /** The current path and counters. */
  state(): PathState {
    this.expireStalePin();
    const now = this.clock.nowMs();
    const relayFresh = this.lastRelay !== null && now - (this.lastAuthMs.get(`relay:${this.lastRelay}`) ?? -Infinity) < DIRECT_STALE_MS;
    return {
      path: this.pinned ? "direct" : relayFresh ? "relay" : "none",
      direct: this.pinned?.key ?? null,
      relay: this.lastRelay,
      ...this.stats,
    };
  }

  /** True while a direct endpoint is pinned. */
  isDirect(): boolean {
    this.expireStalePin();
    return this.pinned !== null;
  }
}
