/**
 * Path selection for one WireGuard peer reachable several ways (spec
 * "Coordination and path selection"; docs/adr/0158-proxy-paths.md): until a
 * direct path is confirmed, every datagram goes to every known candidate of
 * the peer and is mirrored through the relay. Switching relay ↔ direct
 * changes only the transport address, never the session, so inner
 * connections survive.
 *
 * The rule (path liveness): a direct path is pinned, and kept, only while
 * OUR datagrams are seen to reach the peer over it: an authenticated ack
 * (src/wireguard/pathProbe.ts) arriving from path P for a probe we sent to P
 * within PIN_LOST_MS. The peer's own datagrams arriving over P prove nothing
 * about ours (UDP may be blocked one way only), so they never pin. While
 * pinned, the pin is probed every PIN_PROBE_INTERVAL_MS; PIN_LOST_PROBES
 * unanswered probes spanning PIN_LOST_MS lose the pin: traffic is mirrored
 * through the relays (whose sessions stay open) and to every candidate
 * again, and the loss is reported (state().lost) as a change.
 *
 * Owns: the endpoint values a Device<PathEndpoint> sees (a UDP address or a
 * relay), the pinned direct endpoint, the outstanding probes, sources the
 * peer's authenticated datagrams came from (probe targets beside the
 * candidates: a peer behind a symmetric NAT is reachable only there), when
 * each relay last carried an authenticated datagram, and which paths a
 * datagram goes to:
 * - handshake initiations go to every path (they are rate-limited to one per
 *   5 s, and the first to arrive decides the path);
 * - handshake responses and cookie replies go exactly where the message they
 *   answer came from, and a response to a direct source that is not the
 *   pin through the relays too (UDP may work towards us only);
 * - transport messages go to the pinned direct endpoint while it is pinned,
 *   else to every path.
 * Must never: send to more than MAX_CANDIDATES + MAX_LEARNED_SOURCES + 2
 * destinations per datagram, send to an address that names no single peer
 * (unspecified, multicast, broadcast), pin a path on anything but an ack, or
 * read a clock other than the one it is given.
 */
import { MESSAGE_COOKIE_REPLY, MESSAGE_INITIATION, MESSAGE_RESPONSE } from "./constants.ts";
import type { Endpoint } from "./peer.ts";
import { isPeerAddress } from "../protocol/ipScope.ts";
import type { Clock } from "../protocol/clock.ts";

/** Most candidates of a peer a selector keeps (src/protocol/connection.ts MAX_CANDIDATES). */
export const MAX_PATH_CANDIDATES = 16;
/** Most sources learnt from the peer's authenticated datagrams a selector probes besides its candidates (most recent kept). */
export const MAX_LEARNED_SOURCES = 4;
/** Most probes awaiting an ack per peer (oldest forgotten first): MAX_PATH_CANDIDATES + MAX_LEARNED_SOURCES per round, a few rounds. */
export const MAX_OUTSTANDING_PROBES = 64;
/** A relay that carried no authenticated datagram this long no longer counts as the current path, ms. */
export const DIRECT_STALE_MS = 15_000;
/** How often the owner should probe candidates while no direct path is pinned, ms. */
export const PROBE_INTERVAL_MS = 1_000;
/** Probe interval after PROBE_FAST_ROUNDS unanswered rounds, ms. */
export const PROBE_SLOW_INTERVAL_MS = 5_000;
/** Probe rounds at PROBE_INTERVAL_MS before slowing down. */
export const PROBE_FAST_ROUNDS = 10;
/** How often the pinned direct path is probed, ms. */
export const PIN_PROBE_INTERVAL_MS = 1_000;
/** Unanswered probes to the pin (in a row) that, spanning PIN_LOST_MS, lose it: one lost probe or ack is not a dead path. */
export const PIN_LOST_PROBES = 3;
/** How long the pin's probes must have gone unanswered before it is lost, ms; an ack older than this proves nothing. */
export const PIN_LOST_MS = 2_500;

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
  /** "direct" when a direct endpoint is pinned; "relay" when not, our datagrams go through the relays and the peer was heard within DIRECT_STALE_MS; else "none". */
  path: "direct" | "relay" | "none";
  /** The pinned direct endpoint's key, or null. */
  direct: string | null;
  /** The relay reported: the one that took over carrying the peer's authenticated datagrams (another takes over only after it was silent DIRECT_STALE_MS), else the first relay; or null. */
  relay: string | null;
  /** The direct endpoint whose pin was lost (its probes went unanswered), until the next pin; else null. */
  lost: string | null;
  /** Times a direct endpoint was pinned (first time and every change). */
  pins: number;
  /** Times a pinned endpoint was lost. */
  unpins: number;
  /** Path probes sent, and acks received that answered one of ours over the path it went to. */
  probesSent: number;
  acksReceived: number;
  /** Datagrams sent, per kind of destination. */
  sentDirect: number;
  sentMirrored: number;
  sentRelay: number;
}

/** The path selector of one peer. */
export class PathSelector {
  private candidates: UdpPath[] = [];
  private learned: UdpPath[] = [];
  private relays: string[] = [];
  private pinned: UdpPath | null = null;
  private lost: string | null = null;
  /** Probes to the pin since its last ack, and when the first of them went. */
  private pinUnanswered = 0;
  private pinFirstUnansweredMs = 0;
  private readonly outstanding = new Map<string, { key: string; sentMs: number }>();
  private readonly lastRelayMs = new Map<string, number>();
  private lastRelay: string | null = null;
  private lastAuthAnyMs = -Infinity;
  /** The reported path's identity when `changes` last moved (the direct path's relay is not part of it). */
  private reported = "none null - null";
  private onlyTo: PathEndpoint | null = null;
  private readonly stats = {
    pins: 0,
    unpins: 0,
    probesSent: 0,
    acksReceived: 0,
    sentDirect: 0,
    sentMirrored: 0,
    sentRelay: 0,
  };
  /** Probe rounds since the last pin or loss (the owner's probe timer reads probeIntervalMs()). */
  probeRounds = 0;
  /** Incremented whenever the reported path changes (a pin, a loss, a relay taking over): owners report on change only. */
  changes = 0;

  constructor(
    private readonly io: PathIo,
    private readonly clock: Pick<Clock, "monoMs">,
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

  /** The UDP destinations of the next probe round: the pin alone while pinned, else every candidate and learnt source. */
  probeTargets(): UdpPath[] {
    if (this.pinned) return [this.pinned];
    const t = [...this.candidates];
    for (const l of this.learned) if (!t.some((c) => c.key === l.key)) t.push(l);
    return t;
  }

  /** The interval until the owner's next probe round, ms: PIN_PROBE_INTERVAL_MS while pinned, else fast at first and slower after PROBE_FAST_ROUNDS. */
  probeIntervalMs(): number {
    if (this.pinned) return PIN_PROBE_INTERVAL_MS;
    return this.probeRounds < PROBE_FAST_ROUNDS ? PROBE_INTERVAL_MS : PROBE_SLOW_INTERVAL_MS;
  }

  /** Runs `fn` with every datagram it produces sent only to `target` (for per-path probes and their acks). */
  sendingOnlyTo(target: PathEndpoint, fn: () => void): void {
    const prev = this.onlyTo;
    this.onlyTo = target;
    try {
      fn();
    } finally {
      this.onlyTo = prev;
    }
  }

  /** Records a probe with `nonce` about to go to `target` (MAX_OUTSTANDING_PROBES kept); a probe to the pin counts towards losing it. */
  probeSent(target: UdpPath, nonce: string): void {
    const now = this.clock.monoMs();
    if (this.outstanding.size >= MAX_OUTSTANDING_PROBES) this.outstanding.delete(this.outstanding.keys().next().value!);
    this.outstanding.set(nonce, { key: target.key, sentMs: now });
    this.stats.probesSent++;
    if (this.pinned?.key === target.key) {
      if (this.pinUnanswered === 0) this.pinFirstUnansweredMs = now;
      this.pinUnanswered++;
    }
  }

  /**
   * An authenticated ack with `nonce` arrived from `from`. It counts only
   * when it answers a probe we sent to that same path less than PIN_LOST_MS
   * ago: then the path carries our datagrams both ways. Unpinned, that path
   * pins; pinned there, the pin is fresh again; an ack from another path
   * while pinned changes nothing. Returns whether it counted.
   */
  acked(from: PathEndpoint, nonce: string): boolean {
    const probe = this.outstanding.get(nonce);
    if (!probe || from.kind !== "udp" || probe.key !== from.key) return false;
    this.outstanding.delete(nonce);
    const now = this.clock.monoMs();
    if (now - probe.sentMs > PIN_LOST_MS) return false;
    this.stats.acksReceived++;
    if (this.pinned?.key === from.key) {
      this.pinUnanswered = 0;
      return true;
    }
    if (this.pinned) return true;
    this.pinned = from;
    this.lost = null;
    this.pinUnanswered = 0;
    this.stats.pins++;
    this.probeRounds = 0;
    this.checkPin();
    return true;
  }

  /** Sends one datagram the Device addressed to `to` (the peer's roaming endpoint, possibly null). See the module header for the rules. */
  send(datagram: Uint8Array, to: PathEndpoint | null): void {
    if (this.onlyTo) return this.sendTo(this.onlyTo, datagram);
    const type = datagram[0];
    if ((type === MESSAGE_RESPONSE || type === MESSAGE_COOKIE_REPLY) && to && to.kind !== "unknown") {
      this.sendTo(to, datagram);
      // A response to a direct source nothing has proven reachable goes through the relays too: the
      // initiation's direct copy may have won the race over UDP that works towards us only.
      if (type === MESSAGE_RESPONSE && to.kind === "udp" && this.pinned?.key !== to.key)
        for (const r of this.relays) if (this.io.sendRelay(r, datagram)) this.stats.sentRelay++;
      return;
    }
    this.checkPin();
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
    if (to?.kind === "relay" && !this.relays.includes(to.relayId) && this.io.sendRelay(to.relayId, datagram))
      this.stats.sentRelay++;
  }

  private sendTo(t: PathEndpoint, datagram: Uint8Array): void {
    if (t.kind === "udp") {
      this.io.sendUdp(datagram, t.address, t.port);
      this.stats.sentDirect++;
    } else if (t.kind === "relay" && this.io.sendRelay(t.relayId, datagram)) this.stats.sentRelay++;
  }

  /**
   * Records that a datagram from `from` authenticated (it completed a
   * handshake or decrypted). A relay's datagram keeps that relay current; a
   * direct source that is not a candidate is learnt as a probe target (the
   * most recent MAX_LEARNED_SOURCES). Nothing here pins: only acks do.
   */
  authenticated(from: PathEndpoint): void {
    if (from.kind === "unknown") return;
    const now = this.clock.monoMs();
    this.lastAuthAnyMs = now;
    if (from.kind === "relay") {
      // With two relays the first copy to arrive alternates between them: that is no change of
      // path. A relay takes over only from one silent for DIRECT_STALE_MS (or from none).
      const prevAt = this.lastRelay === null ? -Infinity : (this.lastRelayMs.get(this.lastRelay) ?? -Infinity);
      if (now - prevAt >= DIRECT_STALE_MS) this.lastRelay = from.relayId;
      this.lastRelayMs.set(from.relayId, now);
      if (this.lastRelayMs.size > 4) this.lastRelayMs.delete(this.lastRelayMs.keys().next().value!);
    } else if (!this.candidates.some((c) => c.key === from.key) && isPeerAddress(from.address)) {
      const i = this.learned.findIndex((c) => c.key === from.key);
      if (i >= 0) this.learned.splice(i, 1);
      this.learned.push(from);
      if (this.learned.length > MAX_LEARNED_SOURCES) this.learned.shift();
    }
    this.checkPin();
  }

  /** Loses the pin once PIN_LOST_PROBES probes to it in a row, spanning PIN_LOST_MS, went unanswered; then counts a change if the reported path changed. */
  private checkPin(): void {
    const p = this.pinned;
    if (p && this.pinUnanswered >= PIN_LOST_PROBES && this.clock.monoMs() - this.pinFirstUnansweredMs >= PIN_LOST_MS) {
      this.pinned = null;
      this.lost = p.key;
      this.pinUnanswered = 0;
      this.probeRounds = 0;
      this.stats.unpins++;
    }
    const v = this.view();
    const key = `${v.path} ${v.direct} ${v.path === "relay" ? v.relay : "-"} ${v.lost}`;
    if (key !== this.reported) {
      this.reported = key;
      this.changes++;
    }
  }

  private view(): Pick<PathState, "path" | "direct" | "relay" | "lost"> {
    const now = this.clock.monoMs();
    const relayFresh =
      this.lastRelay !== null && now - (this.lastRelayMs.get(this.lastRelay) ?? -Infinity) < DIRECT_STALE_MS;
    const path = this.pinned
      ? "direct"
      : relayFresh || (this.relays.length > 0 && now - this.lastAuthAnyMs < DIRECT_STALE_MS)
        ? "relay"
        : "none";
    // Relayed while the peer is heard only directly (UDP towards us only): ours go through the first relay.
    const relay = path === "relay" && !relayFresh ? (this.relays[0] ?? null) : this.lastRelay;
    return { path, direct: this.pinned?.key ?? null, relay, lost: this.lost };
  }

  /** The current path and counters. */
  state(): PathState {
    this.checkPin();
    return { ...this.view(), ...this.stats };
  }

  /** True while a direct endpoint is pinned (after losing a pin whose probes went unanswered). */
  isDirect(): boolean {
    this.checkPin();
    return this.pinned !== null;
  }
}
