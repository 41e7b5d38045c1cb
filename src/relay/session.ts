/**
 * The relay's records of one connection (RelaySession) and of one grant's
 * meeting point (RelayPair), and the transport interface the hub drives
 * (RelaySocket). docs/relay.md, "Sessions and pairs".
 *
 * Owns: the shapes and the pure helpers over them (the pair's effective
 * limits). Must never: hold frame contents beyond the bounded pre-pairing
 * buffer, or a token beyond its payload.
 */
import type { RelayLimits, RelayRole, RelayTokenPayload } from "../protocol/connection.ts";
import type { ByteBucket } from "./bucket.ts";

/** What the hub needs of one connection, whatever the transport (WebSocket, QUIC stream, a test double). */
export interface RelaySocket {
  /** The remote IP address (the per-address handshake bound counts by it). */
  readonly remoteAddress: string;
  /** Sends one datagram; false when the transport dropped it (its send buffer is over its bound). */
  sendDatagram(frame: Uint8Array): boolean;
  /** Sends one status message (UTF-8 JSON). */
  sendText(text: string): void;
  /** Sends a liveness probe; the transport reports the answer with RelayHub.heard(). */
  ping(): void;
  /** Closes with `code` and `reason`. The hub calls it at most once and ignores later events of this socket. */
  close(code: number, reason: string): void;
}

/** Where a session is in its life. */
export type SessionState = "handshake" | "contending" | "admitted" | "closed";

/** One connection as the hub sees it. */
export interface RelaySession {
  readonly socket: RelaySocket;
  state: SessionState;
  /** Monotonic ms when the transport accepted it (the handshake deadline runs from here). */
  readonly openedAtMs: number;
  /** The accepted token's payload (absent while in handshake). */
  token: RelayTokenPayload | null;
  pair: RelayPair | null;
  /** Last datagram received from or forwarded to this session, monotonic ms (idle timeout). */
  lastActivityMs: number;
  /** Datagrams received while the other side is absent (≤ RELAY_PENDING_FRAMES, oldest dropped first). */
  waiting: Uint8Array[];
}

/** One grant's meeting point: at most one holder per role, plus at most one reconnect per role waiting on a probe. */
export interface RelayPair {
  readonly grantId: string;
  holders: Record<RelayRole, RelaySession | null>;
  /** A reconnect of that role waiting while the holder is probed, with the probe's start (monotonic ms). */
  contenders: Record<RelayRole, { session: RelaySession; probeStartedMs: number } | null>;
  /** The tighter of the holders' token limits. */
  limits: RelayLimits;
  /** Bytes forwarded in both directions together since the pair was created. */
  bytes: number;
  /** One bucket per sending role. */
  buckets: Record<RelayRole, ByteBucket>;
}

/** The other role. */
export function otherRole(r: RelayRole): RelayRole {
  return r === "client" ? "host" : "client";
}

/** Element-wise minimum of limits (the pair obeys the stricter token). */
export function tighterLimits(a: RelayLimits, b: RelayLimits): RelayLimits {
  return {
    maxBytes: Math.min(a.maxBytes, b.maxBytes),
    maxBytesPerSecond: Math.min(a.maxBytesPerSecond, b.maxBytesPerSecond),
    idleTimeoutMs: Math.min(a.idleTimeoutMs, b.idleTimeoutMs),
  };
}
