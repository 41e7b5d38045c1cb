/**
 * The relay sessions of a multipath tunnel (spec "Packet relays" and
 * "Coordination and path selection"; docs/relay.md): one session per
 * (peer, relay), each a datagram pipe opened through a connector port (the
 * roles pass src/relayclient's connectRelay; src/wireguard may not import
 * it), addressed by a path ID that PathSelector uses as the relay path's
 * `relayId` (src/wireguard/paths.ts).
 *
 * Owns: the session table (at most MAX_RELAY_SESSIONS), each session's
 * current token, and reconnection of a dropped session with bounded
 * exponential backoff (RELAY_RECONNECT_MIN_MS doubling up to
 * RELAY_RECONNECT_MAX_MS, with jitter). A refusal that a retry with the same
 * token cannot fix (RELAY_PERMANENT_CODES) stops the session until the
 * owner gives it a fresh token (setToken).
 * Must never: queue a datagram (a datagram for a session that is not open
 * is dropped and reported false, as UDP would lose it), keep a timer or a
 * connection after close()/closeAll(), or log a token.
 */
import type { Clock } from "../protocol/clock.ts";
import type { RelayEntry, SignedRelayToken } from "../protocol/connection.ts";
import type { WgRandom } from "./ports.ts";

/** Most relay sessions one tunnel holds (the host: MAX_APPLIED_GRANTS grants × MAX_RELAYS_PER_PEER). */
export const MAX_RELAY_SESSIONS = 2048;
/** Relays a peer's traffic is mirrored through at most (PathSelector.setRelays keeps two). */
export const MAX_RELAYS_PER_PEER = 2;
/** First reconnect delay after a session dropped, ms. */
export const RELAY_RECONNECT_MIN_MS = 500;
/** Longest reconnect delay, ms. */
export const RELAY_RECONNECT_MAX_MS = 30_000;
/** A session that stayed open this long resets the backoff, ms. */
export const RELAY_STABLE_MS = 10_000;
/** Refusals a retry with the same token cannot fix: the session waits for setToken(). */
export const RELAY_PERMANENT_CODES: ReadonlySet<string> = new Set([
  "RELAY_TOKEN_INVALID",
  "RELAY_TOKEN_EXPIRED",
  "RELAY_TOKEN_WRONG_RELAY",
  "RELAY_LIMITS_OVER_CAP",
  "RELAY_BYTES_EXHAUSTED",
]);

/** An admitted relay connection, as the connector returns it (src/relayclient's RelayTransport fits). */
export interface RelayLink {
  readonly paired: boolean;
  /** Resolves when the connection ends, with the relay's stable code when it closed with one. */
  readonly closed: Promise<{ code: string | null; closeCode: number }>;
  /** Sends one datagram; false when dropped. Never throws. */
  send(datagram: Uint8Array): boolean;
  close(): void;
}

/**
 * Opens one relay connection for `entry` with `token`, calling `onDatagram`
 * for each datagram from the other role. Rejects when the relay refused
 * (an error with `close.code`, as src/relayclient's RelayConnectError) or
 * could not be reached.
 */
export type RelayConnector = (
  entry: RelayEntry,
  token: SignedRelayToken,
  onDatagram: (datagram: Uint8Array) => void,
) => Promise<RelayLink>;

/** What a session is doing. */
export type RelaySessionState = "connecting" | "open" | "backoff" | "stopped";

/** One session as reported. */
export interface RelaySessionInfo {
  pathId: string;
  relayId: string;
  state: RelaySessionState;
  paired: boolean;
  /** Connections opened (the first and every reconnect). */
  connects: number;
  /** The stable code of the last refusal or close, if any. */
  lastCode: string | null;
}

interface Session {
  pathId: string;
  entry: RelayEntry;
  token: SignedRelayToken;
  state: RelaySessionState;
  link: RelayLink | null;
  timer: unknown;
  attempts: number;
  connects: number;
  openedAtMs: number;
  lastCode: string | null;
  /** Bumped on every (re)start, so a stale connect or close is ignored. */
  epoch: number;
}

/** Options of RelaySessions. */
export interface RelaySessionsOptions {
  connect: RelayConnector;
  /** A datagram that arrived through session `pathId`. */
  onDatagram(pathId: string, datagram: Uint8Array): void;
  /** Called when a session opens, closes or gives up (owners report paths on change). */
  onChange?(info: RelaySessionInfo): void;
  random: WgRandom;
  /** Times how long a session stayed open (its monoMs). */
  clock: Clock;
  /** Timer port (default setTimeout/clearTimeout), so tests can see the backoff delays. */
  timers?: { set(fn: () => void, ms: number): unknown; clear(handle: unknown): void };
}

/** The session table. */
export class RelaySessions {
  private readonly sessions = new Map<string, Session>();
  private closedAll = false;
  private readonly timers: NonNullable<RelaySessionsOptions["timers"]>;

  constructor(private readonly o: RelaySessionsOptions) {
    this.timers = o.timers ?? {
      set: (fn, ms) => setTimeout(fn, ms),
      clear: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
    };
  }

  /**
   * Opens (or, for a known path ID, re-tokens) the session `pathId` to
   * `entry` with `token`. Returns false when the table is full
   * (MAX_RELAY_SESSIONS) or the table is closed.
   */
  open(pathId: string, entry: RelayEntry, token: SignedRelayToken): boolean {
    if (this.closedAll) return false;
    const s = this.sessions.get(pathId);
    if (s) {
      this.setToken(pathId, token);
      return true;
    }
    if (this.sessions.size >= MAX_RELAY_SESSIONS) return false;
    const n: Session = {
      pathId,
      entry,
      token,
      state: "connecting",
      link: null,
      timer: null,
      attempts: 0,
      connects: 0,
      openedAtMs: 0,
      lastCode: null,
      epoch: 0,
    };
    this.sessions.set(pathId, n);
    this.start(n);
    return true;
  }

  /** Replaces a session's token (a redelivered grant carries fresh ones); a stopped session starts again. */
  setToken(pathId: string, token: SignedRelayToken): void {
    const s = this.sessions.get(pathId);
    if (!s) return;
    s.token = token;
    if (s.state === "stopped") {
      s.attempts = 0;
      this.start(s);
    }
  }

  /** Sends through session `pathId`; false when it is not open or the datagram was dropped. Never throws. */
  send(pathId: string, datagram: Uint8Array): boolean {
    const s = this.sessions.get(pathId);
    if (!s?.link || s.state !== "open") return false;
    try {
      return s.link.send(datagram);
    } catch {
      return false;
    }
  }

  /** The relay ID of session `pathId`, or null. */
  relayIdOf(pathId: string): string | null {
    return this.sessions.get(pathId)?.entry.relayId ?? null;
  }

  /** Every session, for stats and tests. */
  list(): RelaySessionInfo[] {
    return [...this.sessions.values()].map((s) => this.info(s));
  }

  /** Closes session `pathId` and forgets it. */
  close(pathId: string): void {
    const s = this.sessions.get(pathId);
    if (!s) return;
    this.sessions.delete(pathId);
    s.epoch++;
    s.state = "stopped";
    if (s.timer !== null) this.timers.clear(s.timer);
    s.timer = null;
    s.link?.close();
    s.link = null;
  }

  /** Closes every session; the table accepts no more. Idempotent. */
  closeAll(): void {
    this.closedAll = true;
    for (const id of [...this.sessions.keys()]) this.close(id);
  }

  private info(s: Session): RelaySessionInfo {
    return {
      pathId: s.pathId,
      relayId: s.entry.relayId,
      state: s.state,
      paired: s.link?.paired ?? false,
      connects: s.connects,
      lastCode: s.lastCode,
    };
  }

  private start(s: Session): void {
    const epoch = ++s.epoch;
    if (s.timer !== null) this.timers.clear(s.timer);
    s.timer = null;
    s.state = "connecting";
    s.connects++;
    this.o
      .connect(s.entry, s.token, (d) => {
        if (s.epoch === epoch) this.o.onDatagram(s.pathId, d);
      })
      .then(
        (link) => {
          if (s.epoch !== epoch || !this.sessions.has(s.pathId)) return link.close();
          s.link = link;
          s.state = "open";
          s.openedAtMs = this.o.clock.monoMs();
          this.o.onChange?.(this.info(s));
          void link.closed.then((c) => {
            if (s.epoch !== epoch) return;
            s.link = null;
            if (this.o.clock.monoMs() - s.openedAtMs >= RELAY_STABLE_MS) s.attempts = 0;
            this.dropped(s, c.code);
          });
        },
        (e: unknown) => {
          if (s.epoch !== epoch) return;
          const code = (e as { close?: { code?: string | null } })?.close?.code ?? null;
          this.dropped(s, code);
        },
      );
  }

  private dropped(s: Session, code: string | null): void {
    s.lastCode = code;
    if (code !== null && RELAY_PERMANENT_CODES.has(code)) {
      s.state = "stopped";
      this.o.onChange?.(this.info(s));
      return;
    }
    s.state = "backoff";
    const base = Math.min(RELAY_RECONNECT_MAX_MS, RELAY_RECONNECT_MIN_MS * 2 ** Math.min(s.attempts, 16));
    s.attempts++;
    const jitter = (this.o.random.fill(new Uint8Array(1))[0]! / 255) * 0.5 * base;
    const epoch = s.epoch;
    s.timer = this.timers.set(
      () => {
        s.timer = null;
        if (s.epoch === epoch && this.sessions.has(s.pathId)) this.start(s);
      },
      Math.round(base + jitter),
    );
    this.o.onChange?.(this.info(s));
  }
}
