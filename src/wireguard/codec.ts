/**
 * The WireGuard wire format as pure functions (whitepaper §5.4.2–§5.4.7):
 * handshake initiation (148 bytes), handshake response (92 bytes), cookie
 * reply (64 bytes) and the transport data header (16 bytes + payload).
 *
 * Owns: byte layouts only. Decoders return views into the input (no copies)
 * or a reason the bytes are not a message; encoders allocate. All integers
 * are little-endian; the three reserved bytes after the type are zero.
 * Must never: throw on any input, do cryptography, or read a clock.
 */
import {
  COOKIE_NONCE_BYTES,
  COOKIE_REPLY_BYTES,
  INITIATION_BYTES,
  KEY_BYTES,
  MAC_BYTES,
  MAX_DATAGRAM_BYTES,
  MESSAGE_COOKIE_REPLY,
  MESSAGE_INITIATION,
  MESSAGE_RESPONSE,
  MESSAGE_TRANSPORT,
  RESPONSE_BYTES,
  TAG_BYTES,
  TIMESTAMP_BYTES,
  TRANSPORT_HEADER_BYTES,
  TRANSPORT_MIN_BYTES,
} from "./constants.ts";

/** Offset of mac1 in an initiation: everything before it is covered by mac1 (whitepaper §5.4.4). */
export const INITIATION_MAC1_OFFSET = INITIATION_BYTES - 2 * MAC_BYTES;
/** Offset of mac1 in a response. */
export const RESPONSE_MAC1_OFFSET = RESPONSE_BYTES - 2 * MAC_BYTES;

/** Handshake initiation fields (whitepaper §5.4.2). */
export interface Initiation {
  type: typeof MESSAGE_INITIATION;
  /** Sender index I_i (u32). */
  sender: number;
  /** Unencrypted ephemeral public key (32 bytes). */
  ephemeral: Uint8Array;
  /** AEAD of the initiator's static public key (32 + 16 bytes). */
  encryptedStatic: Uint8Array;
  /** AEAD of the TAI64N timestamp (12 + 16 bytes). */
  encryptedTimestamp: Uint8Array;
  mac1: Uint8Array;
  mac2: Uint8Array;
}

/** Handshake response fields (whitepaper §5.4.3). */
export interface Response {
  type: typeof MESSAGE_RESPONSE;
  sender: number;
  receiver: number;
  ephemeral: Uint8Array;
  /** AEAD of the empty string (16 bytes: the tag). */
  encryptedNothing: Uint8Array;
  mac1: Uint8Array;
  mac2: Uint8Array;
}

/** Cookie reply fields (whitepaper §5.4.7). */
export interface CookieReply {
  type: typeof MESSAGE_COOKIE_REPLY;
  receiver: number;
  /** XChaCha20-Poly1305 nonce (24 bytes). */
  nonce: Uint8Array;
  /** XAEAD of the 16-byte cookie (16 + 16 bytes). */
  encryptedCookie: Uint8Array;
}

/** Transport data message (whitepaper §5.4.6). */
export interface Transport {
  type: typeof MESSAGE_TRANSPORT;
  receiver: number;
  /** The 64-bit nonce counter as a number; inexact when `counterTooLarge`. */
  counter: number;
  /** True when the counter is at or above 2^53 and so `counter` is not exact (such messages are dropped). */
  counterTooLarge: boolean;
  /** Ciphertext with its 16-byte tag. */
  encrypted: Uint8Array;
}

/** Any decoded WireGuard message. */
export type Message = Initiation | Response | CookieReply | Transport;

/** Why bytes are not a message. */
export type DecodeError = "too-short" | "too-long" | "unknown-type" | "bad-length";

/** The result of decoding: the message, or why not. */
export type Decoded = { ok: true; message: Message } | { ok: false; error: DecodeError };

function u32(b: Uint8Array, o: number): number {
  return (b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16) | (b[o + 3]! << 24)) >>> 0;
}

function putU32(b: Uint8Array, o: number, v: number): void {
  b[o] = v & 0xff;
  b[o + 1] = (v >>> 8) & 0xff;
  b[o + 2] = (v >>> 16) & 0xff;
  b[o + 3] = (v >>> 24) & 0xff;
}

/** The message type of a datagram (its first 4 bytes as u32 LE, so non-zero reserved bytes give no known type), or 0. */
export function messageType(datagram: Uint8Array): number {
  if (datagram.length < 4) return 0;
  return u32(datagram, 0);
}

/** Decodes one datagram. Lengths are exact for handshake messages; transport needs ≥ 32 bytes. Never throws. */
export function decodeMessage(datagram: Uint8Array): Decoded {
  if (datagram.length < 4) return { ok: false, error: "too-short" };
  if (datagram.length > MAX_DATAGRAM_BYTES) return { ok: false, error: "too-long" };
  const type = u32(datagram, 0);
  const view = (o: number, n: number) => datagram.subarray(o, o + n);
  switch (type) {
    case MESSAGE_INITIATION:
      if (datagram.length !== INITIATION_BYTES) return { ok: false, error: "bad-length" };
      return {
        ok: true,
        message: {
          type,
          sender: u32(datagram, 4),
          ephemeral: view(8, KEY_BYTES),
          encryptedStatic: view(40, KEY_BYTES + TAG_BYTES),
          encryptedTimestamp: view(88, TIMESTAMP_BYTES + TAG_BYTES),
          mac1: view(116, MAC_BYTES),
          mac2: view(132, MAC_BYTES),
        },
      };
    case MESSAGE_RESPONSE:
      if (datagram.length !== RESPONSE_BYTES) return { ok: false, error: "bad-length" };
      return {
        ok: true,
        message: {
          type,
          sender: u32(datagram, 4),
          receiver: u32(datagram, 8),
          ephemeral: view(12, KEY_BYTES),
          encryptedNothing: view(44, TAG_BYTES),
          mac1: view(60, MAC_BYTES),
          mac2: view(76, MAC_BYTES),
        },
      };
    case MESSAGE_COOKIE_REPLY:
      if (datagram.length !== COOKIE_REPLY_BYTES) return { ok: false, error: "bad-length" };
      return {
        ok: true,
        message: {
          type,
          receiver: u32(datagram, 4),
          nonce: view(8, COOKIE_NONCE_BYTES),
          encryptedCookie: view(32, MAC_BYTES + TAG_BYTES),
        },
      };
    case MESSAGE_TRANSPORT: {
      if (datagram.length < TRANSPORT_MIN_BYTES) return { ok: false, error: "bad-length" };
      const lo = u32(datagram, 8);
      const hi = u32(datagram, 12);
      return {
        ok: true,
        message: {
          type,
          receiver: u32(datagram, 4),
          counter: hi * 2 ** 32 + lo,
          counterTooLarge: hi >= 2 ** 21,
          encrypted: datagram.subarray(TRANSPORT_HEADER_BYTES),
        },
      };
    }
    default:
      return { ok: false, error: "unknown-type" };
  }
}

function put(out: Uint8Array, o: number, field: Uint8Array, n: number, name: string): void {
  if (field.length !== n) throw new Error(`${name} must be ${n} bytes, got ${field.length}`);
  out.set(field, o);
}

/** Encodes an initiation (148 bytes). Throws when a field has the wrong size (a local bug, never peer input). */
export function encodeInitiation(m: Omit<Initiation, "type">): Uint8Array {
  const out = new Uint8Array(INITIATION_BYTES);
  putU32(out, 0, MESSAGE_INITIATION);
  putU32(out, 4, m.sender);
  put(out, 8, m.ephemeral, KEY_BYTES, "ephemeral");
  put(out, 40, m.encryptedStatic, KEY_BYTES + TAG_BYTES, "encryptedStatic");
  put(out, 88, m.encryptedTimestamp, TIMESTAMP_BYTES + TAG_BYTES, "encryptedTimestamp");
  put(out, 116, m.mac1, MAC_BYTES, "mac1");
  put(out, 132, m.mac2, MAC_BYTES, "mac2");
  return out;
}

/** Encodes a response (92 bytes). Throws when a field has the wrong size. */
export function encodeResponse(m: Omit<Response, "type">): Uint8Array {
  const out = new Uint8Array(RESPONSE_BYTES);
  putU32(out, 0, MESSAGE_RESPONSE);
  putU32(out, 4, m.sender);
  putU32(out, 8, m.receiver);
  put(out, 12, m.ephemeral, KEY_BYTES, "ephemeral");
  put(out, 44, m.encryptedNothing, TAG_BYTES, "encryptedNothing");
  put(out, 60, m.mac1, MAC_BYTES, "mac1");
  put(out, 76, m.mac2, MAC_BYTES, "mac2");
  return out;
}

/** Encodes a cookie reply (64 bytes). Throws when a field has the wrong size. */
export function encodeCookieReply(m: Omit<CookieReply, "type">): Uint8Array {
  const out = new Uint8Array(COOKIE_REPLY_BYTES);
  putU32(out, 0, MESSAGE_COOKIE_REPLY);
  putU32(out, 4, m.receiver);
  put(out, 8, m.nonce, COOKIE_NONCE_BYTES, "nonce");
  put(out, 32, m.encryptedCookie, MAC_BYTES + TAG_BYTES, "encryptedCookie");
  return out;
}

/**
 * Writes a transport header into the first 16 bytes of `out` (type 4, receiver,
 * counter as u64 LE). `counter` must be an integer in [0, 2^53).
 */
export function writeTransportHeader(out: Uint8Array, receiver: number, counter: number): void {
  putU32(out, 0, MESSAGE_TRANSPORT);
  putU32(out, 4, receiver);
  putU32(out, 8, counter >>> 0);
  putU32(out, 12, Math.floor(counter / 2 ** 32));
}

/** Encodes a transport message from its header fields and ciphertext (allocates; the Device writes in place instead). */
export function encodeTransport(receiver: number, counter: number, encrypted: Uint8Array): Uint8Array {
  const out = new Uint8Array(TRANSPORT_HEADER_BYTES + encrypted.length);
  writeTransportHeader(out, receiver, counter);
  out.set(encrypted, TRANSPORT_HEADER_BYTES);
  return out;
}

/** Writes mac1 and mac2 into a handshake message in place (the last 32 bytes). */
export function setMacs(message: Uint8Array, mac1: Uint8Array, mac2: Uint8Array): void {
  message.set(mac1, message.length - 2 * MAC_BYTES);
  message.set(mac2, message.length - MAC_BYTES);
}
