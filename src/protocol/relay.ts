/**
 * The relay's wire (spec "Packet relays"; docs/relay.md): what a relay
 * client and `bb relay run` say to each other besides the datagrams they
 * carry.
 *
 * Over WebSocket (RFC 6455): the client's first message is a text frame
 * holding a SignedRelayToken (src/protocol/connection.ts); the relay answers
 * with text status messages (RelayStatus); after that every binary message
 * is one WireGuard datagram. A refusal is a close frame whose code is
 * `4000 + HTTP status` of the stable error code and whose reason is the code
 * itself (relayCloseCode).
 *
 * Over QUIC (RFC 9000, one bidirectional stream per session): the same
 * messages as length-prefixed stream frames, `[u16 length][u8 kind][body]`
 * (length counts kind + body, big-endian), because a QUIC DATAGRAM frame
 * holds less than one full WireGuard packet. encodeStreamFrame and
 * StreamFrameDecoder are the codec.
 *
 * Owns: the path, the ALPN, the status shapes, the close-code mapping and
 * the stream framing, with their bounds. Pure: no I/O. Must never: carry
 * anything but a token, a status or a datagram (no key, no grant).
 */
import { Type, type Static } from "@sinclair/typebox";
import { MAX_RELAY_FRAME_BYTES } from "./connection.ts";
import { ERROR_STATUS, type ErrorCode } from "./errors.ts";

/** The WebSocket path of a relay (the relay map's `url` ends with it). */
export const RELAY_WS_PATH = "/v1/relay";
/** ALPN of the relay's QUIC listener. */
export const RELAY_QUIC_ALPN = "bb-relay/1";
/** Longest token message a relay reads, bytes of UTF-8 (a token is about 600). */
export const MAX_RELAY_TOKEN_BYTES = 4096;
/** Longest close reason, bytes (RFC 6455 §5.5: a control frame body is at most 125 bytes, two of them the code). */
export const MAX_RELAY_CLOSE_REASON_BYTES = 123;
/** Longest ping or pong body on a QUIC stream, bytes. */
export const MAX_RELAY_PING_BYTES = 16;

/** Status messages a relay sends (text frames). */
export const RelayStatus = Type.Union([
  /** The token was accepted; `paired` says whether the other role is already there. */
  Type.Object({ type: Type.Literal("ready"), paired: Type.Boolean() }, { additionalProperties: false }),
  /** The other role arrived: datagrams now flow. */
  Type.Object({ type: Type.Literal("paired") }, { additionalProperties: false }),
  /** The other role left; this session stays and waits for it to come back. */
  Type.Object({ type: Type.Literal("unpaired") }, { additionalProperties: false }),
]);
/** Status messages a relay sends. */
export type RelayStatus = Static<typeof RelayStatus>;

/** The close code a relay uses for a stable error code: 4000 + its HTTP status (a private-use code, RFC 6455 §7.4.2). */
export function relayCloseCode(code: ErrorCode): number {
  return 4000 + ERROR_STATUS[code];
}

/** The stable code in a close reason, or null when the reason is not one (e.g. a close by the peer itself). */
export function closeReasonCode(reason: string): ErrorCode | null {
  return Object.hasOwn(ERROR_STATUS, reason) ? (reason as ErrorCode) : null;
}

/** Kinds of QUIC stream frame. */
export const StreamFrameKind = {
  /** One datagram (≤ MAX_RELAY_FRAME_BYTES). */
  datagram: 0,
  /** UTF-8 JSON: the token (client → relay) or a RelayStatus (relay → client). */
  text: 1,
  /** u16 close code, then a UTF-8 reason (≤ MAX_RELAY_CLOSE_REASON_BYTES); the sender then ends the stream. */
  close: 2,
  /** Liveness probe; the receiver answers with a pong carrying the same body. */
  ping: 3,
  pong: 4,
} as const;
/** A QUIC stream frame kind. */
export type StreamFrameKind = (typeof StreamFrameKind)[keyof typeof StreamFrameKind];

/** Largest body any stream frame may carry, bytes. */
export const MAX_STREAM_FRAME_BODY_BYTES = Math.max(MAX_RELAY_FRAME_BYTES, MAX_RELAY_TOKEN_BYTES);

/** One decoded stream frame. */
export interface StreamFrame {
  kind: StreamFrameKind;
  /** A view into the decoder's input or a copy; valid until the next push. */
  body: Uint8Array;
}

const bodyLimit = (kind: number): number | null => {
  switch (kind) {
    case StreamFrameKind.datagram:
      return MAX_RELAY_FRAME_BYTES;
    case StreamFrameKind.text:
      return MAX_RELAY_TOKEN_BYTES;
    case StreamFrameKind.close:
      return 2 + MAX_RELAY_CLOSE_REASON_BYTES;
    case StreamFrameKind.ping:
    case StreamFrameKind.pong:
      return MAX_RELAY_PING_BYTES;
    default:
      return null;
  }
};

/** Encodes one stream frame. Throws a RangeError when `body` exceeds the kind's bound (a local programming error). */
export function encodeStreamFrame(kind: StreamFrameKind, body: Uint8Array): Uint8Array {
  const limit = bodyLimit(kind);
  if (limit === null || body.length > limit)
    throw new RangeError(`stream frame of kind ${kind} with ${body.length} bytes is over its bound`);
  const out = new Uint8Array(3 + body.length);
  const n = body.length + 1;
  out[0] = n >>> 8;
  out[1] = n & 0xff;
  out[2] = kind;
  out.set(body, 3);
  return out;
}

/** The body of a close frame. */
export function encodeCloseBody(code: number, reason: string): Uint8Array {
  const r = new TextEncoder().encode(reason).subarray(0, MAX_RELAY_CLOSE_REASON_BYTES);
  const out = new Uint8Array(2 + r.length);
  out[0] = (code >>> 8) & 0xff;
  out[1] = code & 0xff;
  out.set(r, 2);
  return out;
}

/** Decodes a close frame's body; null when it is shorter than its code. */
export function decodeCloseBody(body: Uint8Array): { code: number; reason: string } | null {
  if (body.length < 2) return null;
  return { code: (body[0]! << 8) | body[1]!, reason: new TextDecoder().decode(body.subarray(2)) };
}

/**
 * Splits a byte stream into frames. Holds at most one partial frame
 * (≤ 3 + MAX_STREAM_FRAME_BODY_BYTES bytes). After a malformed frame
 * (length 0, unknown kind, body over its kind's bound) it stays failed:
 * the caller closes the stream with RELAY_FRAME_INVALID.
 */
export class StreamFrameDecoder {
  private pending: Uint8Array = new Uint8Array(0);
  /** Set once the stream carried a malformed frame. */
  failed = false;

  /** Feeds `chunk`; returns the complete frames in order (empty when failed). */
  push(chunk: Uint8Array): StreamFrame[] {
    if (this.failed) return [];
    let buf = chunk;
    if (this.pending.length > 0) {
      buf = new Uint8Array(this.pending.length + chunk.length);
      buf.set(this.pending);
      buf.set(chunk, this.pending.length);
    }
    const out: StreamFrame[] = [];
    let at = 0;
    while (buf.length - at >= 3) {
      const n = (buf[at]! << 8) | buf[at + 1]!;
      const kind = buf[at + 2]!;
      const limit = bodyLimit(kind);
      if (n === 0 || limit === null || n - 1 > limit) {
        this.failed = true;
        this.pending = new Uint8Array(0);
        return [];
      }
      if (buf.length - at < 2 + n) break;
      out.push({ kind: kind as StreamFrameKind, body: buf.subarray(at + 3, at + 2 + n) });
      at += 2 + n;
    }
    this.pending = at === buf.length ? new Uint8Array(0) : buf.slice(at);
    return out;
  }
}
