/**
 * The relay's core (spec "Packet relays"; docs/relay.md): admits sessions
 * by relay token, pairs exactly one `client` and one `host` per grant,
 * forwards datagrams between them unchanged, and enforces the pair's
 * limits and the relay's bounds. Transport-agnostic: WebSocket and QUIC
 * adapters (wsServer.ts, quicServer.ts) turn their events into calls here.
 *
 * Rules (each refusal closes the socket with relayCloseCode(code), reason
 * = the code):
 * - The first message is a text token within RELAY_HANDSHAKE_DEADLINE_MS
 *   (RELAY_HANDSHAKE_TIMEOUT); a binary message first is RELAY_TOKEN_INVALID;
 *   the token is checked by token.ts.
 * - Bounds: sockets without a token, in all and per remote address;
 *   admitted sessions; grants with one side waiting (RELAY_BUSY).
 * - One holder per role and grant. A second session of a held role is a
 *   reconnect or an intruder: the holder is pinged and the newcomer waits
 *   up to RELAY_PROBE_MS. If the holder answers (pong or any message), the
 *   newcomer is refused RELAY_PAIR_TAKEN; if it stays silent it is closed
 *   (RELAY_SESSION_REPLACED) and the newcomer takes its place. A live
 *   session is never displaced. A third session of that role while one
 *   waits is refused at once.
 * - Datagrams (binary, 1..MAX_RELAY_FRAME_BYTES, else RELAY_FRAME_INVALID)
 *   go to the other role unchanged. While it is absent, the last
 *   RELAY_PENDING_FRAMES are kept (older ones dropped) and delivered when it
 *   arrives. Limits are the tighter of the two tokens': maxBytes for both
 *   directions together closes both sessions (RELAY_BYTES_EXHAUSTED);
 *   maxBytesPerSecond per direction drops what the bucket cannot pay for
 *   (the inner TCP backs off, a burst does not kill the session);
 *   idleTimeoutMs without a datagram from or to a session closes it
 *   (RELAY_IDLE_TIMEOUT).
 * - When a holder leaves, its partner stays and is told `unpaired`.
 *
 * Time comes from the Clock port; sweep() runs the deadlines.
 * Must never: look into, log or change a datagram (observeFrame is a test
 * hook that only reads), hold a frame beyond the bounded waiting buffer,
 * or throw into a transport callback for bad input.
 */
import { MAX_RELAY_FRAME_BYTES, type RelayRole, type RelayTokenPayload } from "../protocol/connection.ts";
import type { ErrorCode } from "../protocol/errors.ts";
import { relayCloseCode, type RelayStatus } from "../protocol/relay.ts";
import { ByteBucket } from "./bucket.ts";
import { newRelayCounters, type DropReason, type RelayCounters } from "./counters.ts";
import { otherRole, tighterLimits, type RelayPair, type RelaySession, type RelaySocket } from "./session.ts";
import { verifyRelayToken, type TokenPolicy } from "./token.ts";
import type { Clock } from "../protocol/clock.ts";

/** How long a socket may take to present its token, ms. */
export const RELAY_HANDSHAKE_DEADLINE_MS = 5_000;
/** How long a held session has to answer a probe before a reconnect replaces it, ms. */
export const RELAY_PROBE_MS = 3_000;
/** Datagrams kept per session while the other side is absent (WireGuard retries handshakes itself; four covers a retry burst). */
export const RELAY_PENDING_FRAMES = 4;

/** The hub's bounds (src/relay/config.ts holds their defaults). */
export interface HubBounds {
  maxSessions: number;
  maxPendingPairs: number;
  maxHandshakes: number;
  maxHandshakesPerAddress: number;
}

/** Everything a hub is built from. */
export interface HubOptions {
  policy: TokenPolicy;
  bounds: HubBounds;
  clock: Clock;
  /** Test hook: sees every datagram the relay receives from an admitted or waiting session, before any decision. Must not keep or change it. */
  observeFrame?: (frame: Uint8Array) => void;
}

const ROLES: readonly RelayRole[] = ["client", "host"];

/** The hub. */
export class RelayHub {
  readonly counters: RelayCounters = newRelayCounters();
  private readonly live = new Set<RelaySession>();
  private readonly pairs = new Map<string, RelayPair>();
  private readonly probing = new Set<RelayPair>();
  private readonly handshakesByAddress = new Map<string, number>();
  private shuttingDown = false;

  constructor(private readonly o: HubOptions) {}

  /** Grants the hub holds state for (tests check nothing is left behind). */
  get pairCount(): number {
    return this.pairs.size;
  }

  /** A transport accepted `socket`. Returns its session (already closed when refused). */
  open(socket: RelaySocket): RelaySession {
    const now = this.o.clock.monoMs();
    const s: RelaySession = {
      socket,
      state: "handshake",
      openedAtMs: now,
      token: null,
      pair: null,
      lastActivityMs: now,
      waiting: [],
    };
    this.counters.connectionsOpened++;
    const fromAddress = this.handshakesByAddress.get(socket.remoteAddress) ?? 0;
    if (this.shuttingDown) return this.refuseNew(s, "SHUTTING_DOWN");
    if (this.counters.handshakes >= this.o.bounds.maxHandshakes || fromAddress >= this.o.bounds.maxHandshakesPerAddress)
      return this.refuseNew(s, "RELAY_BUSY");
    this.counters.handshakes++;
    this.handshakesByAddress.set(socket.remoteAddress, fromAddress + 1);
    this.live.add(s);
    return s;
  }

  /** A text message from `s`: the token while in handshake, a protocol error afterwards. */
  text(s: RelaySession, text: string): void {
    if (s.state === "closed") return;
    this.heard(s);
    if (s.state !== "handshake") return this.close(s, "RELAY_FRAME_INVALID");
    const check = verifyRelayToken(text, this.o.policy, this.o.clock.wallMs());
    if (!check.ok) return this.close(s, check.code);
    this.leaveHandshake(s);
    this.counters.tokensAccepted++;
    this.admit(s, check.token);
  }

  /** A binary message from `s`: one datagram. */
  binary(s: RelaySession, frame: Uint8Array): void {
    if (s.state === "closed") return;
    this.heard(s);
    if (s.state === "handshake") return this.close(s, "RELAY_TOKEN_INVALID");
    if (frame.length === 0 || frame.length > MAX_RELAY_FRAME_BYTES) return this.close(s, "RELAY_FRAME_INVALID");
    this.o.observeFrame?.(frame);
    if (s.state === "contending") return this.dropped("contending");
    const pair = s.pair!;
    const role = s.token!.role;
    s.lastActivityMs = this.o.clock.monoMs();
    if (!pair.holders[otherRole(role)]) {
      if (s.waiting.length >= RELAY_PENDING_FRAMES) {
        s.waiting.shift();
        this.dropped("unpaired");
      }
      s.waiting.push(frame.slice());
      return;
    }
    this.forward(pair, role, frame);
  }

  /** Any sign of life from `s` (a pong; text and binary call it too): a holder under probe is live, so its contender is refused. */
  heard(s: RelaySession): void {
    const pair = s.pair;
    if (s.state !== "admitted" || !pair) return;
    const c = pair.contenders[s.token!.role];
    if (c) {
      pair.contenders[s.token!.role] = null;
      this.unprobe(pair);
      this.close(c.session, "RELAY_PAIR_TAKEN");
    }
  }

  /** The transport closed `s` (by the peer or after close()). */
  closed(s: RelaySession): void {
    this.detach(s);
  }

  /** Runs due deadlines: handshake timeouts, decided probes, idle sessions. Call every few hundred ms. */
  sweep(): void {
    const now = this.o.clock.monoMs();
    for (const pair of [...this.probing]) {
      for (const role of ROLES) {
        const c = pair.contenders[role];
        const holder = pair.holders[role];
        if (!c || now - c.probeStartedMs < RELAY_PROBE_MS) continue;
        // The contender is still here, so the holder said nothing since the probe (heard() would have refused it):
        // closing the holder promotes the contender (detach).
        if (holder) this.close(holder, "RELAY_SESSION_REPLACED");
      }
      this.unprobe(pair);
    }
    for (const s of [...this.live]) {
      if (s.state === "handshake" && now - s.openedAtMs >= RELAY_HANDSHAKE_DEADLINE_MS)
        this.close(s, "RELAY_HANDSHAKE_TIMEOUT");
      else if (s.state === "admitted" && now - s.lastActivityMs >= s.pair!.limits.idleTimeoutMs)
        this.close(s, "RELAY_IDLE_TIMEOUT");
    }
  }

  /** Refuses new sockets and closes every open one with SHUTTING_DOWN. */
  shutdown(): void {
    this.shuttingDown = true;
    for (const s of [...this.live]) this.close(s, "SHUTTING_DOWN");
  }

  /** Closes `s` with a stable code and forgets it. Idempotent. */
  close(s: RelaySession, code: ErrorCode): void {
    if (s.state === "closed") return;
    this.countClose(code);
    this.detach(s);
    s.socket.close(relayCloseCode(code), code);
  }

  private refuseNew(s: RelaySession, code: ErrorCode): RelaySession {
    s.state = "closed";
    this.countClose(code);
    s.socket.close(relayCloseCode(code), code);
    return s;
  }

  private countClose(code: ErrorCode): void {
    this.counters.closes[code] = (this.counters.closes[code] ?? 0) + 1;
  }

  /** Counts a datagram not forwarded; transports call it for drops they discover after sendDatagram returned (a batched send). */
  dropped(reason: DropReason): void {
    this.counters.framesDropped[reason]++;
  }

  private send(s: RelaySession, status: RelayStatus): void {
    s.socket.sendText(JSON.stringify(status));
  }

  private leaveHandshake(s: RelaySession): void {
    this.counters.handshakes--;
    const a = s.socket.remoteAddress;
    const n = (this.handshakesByAddress.get(a) ?? 1) - 1;
    if (n <= 0) this.handshakesByAddress.delete(a);
    else this.handshakesByAddress.set(a, n);
  }

  private admit(s: RelaySession, token: RelayTokenPayload): void {
    s.token = token;
    if (this.counters.sessions >= this.o.bounds.maxSessions) return this.reject(s, "RELAY_BUSY");
    const role = token.role;
    let pair = this.pairs.get(token.grantId);
    if (pair && pair.holders[role] && pair.contenders[role]) return this.reject(s, "RELAY_PAIR_TAKEN");
    if (!pair) {
      if (this.counters.pairsPending >= this.o.bounds.maxPendingPairs) return this.reject(s, "RELAY_BUSY");
      const now = this.o.clock.monoMs();
      pair = {
        grantId: token.grantId,
        holders: { client: null, host: null },
        contenders: { client: null, host: null },
        limits: token.limits,
        bytes: 0,
        buckets: {
          client: new ByteBucket(token.limits.maxBytesPerSecond, now),
          host: new ByteBucket(token.limits.maxBytesPerSecond, now),
        },
      };
      this.pairs.set(token.grantId, pair);
    }
    s.pair = pair;
    this.counters.sessions++;
    if (!pair.holders[role]) return this.takeSlot(pair, role, s);
    s.state = "contending";
    pair.contenders[role] = { session: s, probeStartedMs: this.o.clock.monoMs() };
    this.probing.add(pair);
    pair.holders[role]!.socket.ping();
  }

  /** Refuses a session that left its handshake but holds no place yet. */
  private reject(s: RelaySession, code: ErrorCode): void {
    this.live.delete(s);
    this.refuseNew(s, code);
  }

  /** Makes `s` (already counted in sessions, s.pair = pair) the holder of `role`. */
  private takeSlot(pair: RelayPair, role: RelayRole, s: RelaySession): void {
    const before = this.pairShape(pair);
    pair.holders[role] = s;
    s.state = "admitted";
    s.lastActivityMs = this.o.clock.monoMs();
    this.refreshLimits(pair);
    this.reshaped(before, pair);
    const other = pair.holders[otherRole(role)];
    this.send(s, { type: "ready", paired: other !== null });
    if (!other) return;
    this.send(other, { type: "paired" });
    const waiting = other.waiting;
    other.waiting = [];
    for (const f of waiting) {
      if (pair.holders[role] !== s) break;
      this.forward(pair, otherRole(role), f);
    }
  }

  private forward(pair: RelayPair, from: RelayRole, frame: Uint8Array): void {
    const to = pair.holders[otherRole(from)]!;
    const now = this.o.clock.monoMs();
    if (pair.bytes + frame.length > pair.limits.maxBytes) {
      const everyone = [
        pair.contenders.client?.session,
        pair.contenders.host?.session,
        pair.holders.client,
        pair.holders.host,
      ];
      for (const x of everyone) if (x) this.close(x, "RELAY_BYTES_EXHAUSTED");
      return;
    }
    if (!pair.buckets[from].take(frame.length, now)) return this.dropped("rate");
    if (!to.socket.sendDatagram(frame)) return this.dropped("backpressure");
    pair.bytes += frame.length;
    to.lastActivityMs = now;
    this.counters.framesForwarded++;
    this.counters.bytesForwarded += frame.length;
  }

  private refreshLimits(pair: RelayPair): void {
    const c = pair.holders.client?.token?.limits;
    const h = pair.holders.host?.token?.limits;
    const limits = c && h ? tighterLimits(c, h) : (c ?? h);
    if (!limits) return;
    pair.limits = limits;
    const now = this.o.clock.monoMs();
    pair.buckets.client.setRate(limits.maxBytesPerSecond, now);
    pair.buckets.host.setRate(limits.maxBytesPerSecond, now);
  }

  /** 0: empty, 1: one side waiting, 2: paired. */
  private pairShape(pair: RelayPair): 0 | 1 | 2 {
    return ((pair.holders.client ? 1 : 0) + (pair.holders.host ? 1 : 0)) as 0 | 1 | 2;
  }

  private reshaped(before: 0 | 1 | 2, pair: RelayPair): void {
    const after = this.pairShape(pair);
    if (before === after) return;
    if (before === 1) this.counters.pairsPending--;
    if (before === 2) this.counters.pairsPaired--;
    if (after === 1) this.counters.pairsPending++;
    if (after === 2) this.counters.pairsPaired++;
  }

  private unprobe(pair: RelayPair): void {
    if (!pair.contenders.client && !pair.contenders.host) this.probing.delete(pair);
  }

  /** Forgets `s` everywhere; promotes a waiting reconnect; tells a partner it is alone; drops an empty pair. */
  private detach(s: RelaySession): void {
    const state = s.state;
    if (state === "closed") return;
    s.state = "closed";
    s.waiting = [];
    this.live.delete(s);
    if (state === "handshake") return this.leaveHandshake(s);
    this.counters.sessions--;
    const pair = s.pair!;
    const role = s.token!.role;
    if (state === "contending") {
      if (pair.contenders[role]?.session === s) pair.contenders[role] = null;
      this.unprobe(pair);
      return this.dropIfEmpty(pair);
    }
    if (pair.holders[role] !== s) return;
    const before = this.pairShape(pair);
    pair.holders[role] = null;
    this.reshaped(before, pair);
    const c = pair.contenders[role];
    if (c) {
      pair.contenders[role] = null;
      this.unprobe(pair);
      return this.takeSlot(pair, role, c.session);
    }
    const other = pair.holders[otherRole(role)];
    if (other) {
      this.refreshLimits(pair);
      return this.send(other, { type: "unpaired" });
    }
    this.dropIfEmpty(pair);
  }

  private dropIfEmpty(pair: RelayPair): void {
    if (pair.holders.client || pair.holders.host || pair.contenders.client || pair.contenders.host) return;
    this.pairs.delete(pair.grantId);
    this.probing.delete(pair);
  }
}
