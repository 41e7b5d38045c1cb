/**
 * The little of STUN (RFC 5389, "Session Traversal Utilities for NAT") that
 * candidate discovery needs (spec "Data path": local and STUN-discovered
 * candidates; "the same socket carries WireGuard traffic, STUN candidate
 * discovery, and direct-path checks"): a Binding request, a Binding success
 * response with XOR-MAPPED-ADDRESS (or MAPPED-ADDRESS, RFC 5389 §15.1), and
 * the test that tells a STUN message from a WireGuard one on a shared socket.
 *
 * Owns: the byte layout and its bounds. Pure: no sockets, no clock.
 * Must never: throw on bytes from the network (decoders return null), or
 * accept a response carrying an unknown comprehension-required attribute
 * (RFC 5389 §7.3.3).
 */
import { isIPv4, isIPv6 } from "node:net";
import { formatIpv6, ipv4Bytes, ipv6Bytes } from "./ipAddress.ts";

/** The fixed magic cookie of every RFC 5389 message (§6). */
export const STUN_MAGIC_COOKIE = 0x2112a442;
/** Header size, bytes. */
export const STUN_HEADER_BYTES = 20;
/** Transaction ID size, bytes. */
export const STUN_TRANSACTION_ID_BYTES = 12;
/** Largest STUN message accepted, bytes (a Binding response is under 100). */
export const MAX_STUN_MESSAGE_BYTES = 548;
/** Binding request (method 0x001, class request). */
export const STUN_BINDING_REQUEST = 0x0001;
/** Binding success response. */
export const STUN_BINDING_SUCCESS = 0x0101;
/** Binding error response. */
export const STUN_BINDING_ERROR = 0x0111;
const ATTR_MAPPED_ADDRESS = 0x0001;
const ATTR_XOR_MAPPED_ADDRESS = 0x0020;
/** Comprehension-required attributes RFC 5389 §15 defines (understood, even if not all are used here). */
const KNOWN_REQUIRED_ATTRIBUTES = new Set([0x0001, 0x0006, 0x0008, 0x0009, 0x000a, 0x0014, 0x0015, 0x0020]);
/** Most attributes a decoder walks before giving up. */
const MAX_ATTRIBUTES = 32;

/** A transport address. */
export interface StunAddress {
  address: string;
  port: number;
}

/** A decoded STUN message: its type, transaction ID and the mapped address when it carries one. */
export interface StunMessage {
  type: number;
  transactionId: Uint8Array;
  mapped: StunAddress | null;
}

/**
 * True when `b` has the shape of a STUN message (§6): first two bits zero,
 * the magic cookie, a length that is a multiple of 4 and matches the
 * datagram. A WireGuard message (type 1–4 followed by three zero bytes) never
 * passes: its second byte is zero, which no STUN message type used here has.
 */
export function isStunMessage(b: Uint8Array): boolean {
  if (b.length < STUN_HEADER_BYTES || b.length > MAX_STUN_MESSAGE_BYTES) return false;
  if ((b[0]! & 0xc0) !== 0 || b[1] === 0) return false;
  const length = (b[2]! << 8) | b[3]!;
  if (length % 4 !== 0 || length + STUN_HEADER_BYTES !== b.length) return false;
  return new DataView(b.buffer, b.byteOffset, b.byteLength).getUint32(4) === STUN_MAGIC_COOKIE;
}

function header(type: number, bodyBytes: number, transactionId: Uint8Array): Uint8Array {
  if (transactionId.length !== STUN_TRANSACTION_ID_BYTES) throw new Error("a STUN transaction ID is 12 bytes");
  const out = new Uint8Array(STUN_HEADER_BYTES + bodyBytes);
  const v = new DataView(out.buffer);
  v.setUint16(0, type);
  v.setUint16(2, bodyBytes);
  v.setUint32(4, STUN_MAGIC_COOKIE);
  out.set(transactionId, 8);
  return out;
}

/** A Binding request with no attributes (§10.1.1). Throws only for a transaction ID that is not 12 bytes. */
export function encodeBindingRequest(transactionId: Uint8Array): Uint8Array {
  return header(STUN_BINDING_REQUEST, 0, transactionId);
}

/**
 * A Binding success response carrying XOR-MAPPED-ADDRESS for `mapped`
 * (§15.2), as a STUN server sends. Throws for an address that is not an IP literal.
 */
export function encodeBindingSuccess(transactionId: Uint8Array, mapped: StunAddress): Uint8Array {
  const v6 = isIPv6(mapped.address);
  if (!v6 && !isIPv4(mapped.address)) throw new Error(`not an IP address: ${mapped.address}`);
  const addrBytes = v6 ? 16 : 4;
  const out = header(STUN_BINDING_SUCCESS, 4 + 4 + addrBytes, transactionId);
  const v = new DataView(out.buffer);
  v.setUint16(20, ATTR_XOR_MAPPED_ADDRESS);
  v.setUint16(22, 4 + addrBytes);
  out[25] = v6 ? 0x02 : 0x01;
  v.setUint16(26, mapped.port ^ (STUN_MAGIC_COOKIE >>> 16));
  const raw = v6 ? ipv6Bytes(mapped.address) : ipv4Bytes(mapped.address);
  const mask = out.subarray(4, 4 + addrBytes); // cookie ‖ transaction ID
  for (let i = 0; i < addrBytes; i++) out[28 + i] = raw[i]! ^ mask[i]!;
  return out;
}

/** Decodes a STUN message, or null when it is malformed or carries an unknown comprehension-required attribute. */
export function decodeStun(b: Uint8Array): StunMessage | null {
  if (!isStunMessage(b)) return null;
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const type = v.getUint16(0);
  const transactionId = b.slice(8, 20);
  let mapped: StunAddress | null = null;
  let xorMapped: StunAddress | null = null;
  let off = STUN_HEADER_BYTES;
  for (let n = 0; off < b.length; n++) {
    if (n >= MAX_ATTRIBUTES || off + 4 > b.length) return null;
    const at = v.getUint16(off);
    const len = v.getUint16(off + 2);
    const end = off + 4 + len;
    if (end > b.length) return null;
    const value = b.subarray(off + 4, end);
    if (at === ATTR_XOR_MAPPED_ADDRESS) xorMapped = decodeAddress(value, b.subarray(4, 20));
    else if (at === ATTR_MAPPED_ADDRESS) mapped = decodeAddress(value, null);
    else if (at < 0x8000 && !KNOWN_REQUIRED_ATTRIBUTES.has(at) && (type & 0x0100) !== 0) return null; // unknown comprehension-required attribute in a response
    off = end + ((4 - (len % 4)) % 4);
  }
  return { type, transactionId, mapped: xorMapped ?? mapped };
}

function decodeAddress(value: Uint8Array, xorMask: Uint8Array | null): StunAddress | null {
  if (value.length < 8) return null;
  const family = value[1];
  const n = family === 0x01 ? 4 : family === 0x02 ? 16 : 0;
  if (n === 0 || value.length !== 4 + n) return null;
  let port = (value[2]! << 8) | value[3]!;
  const raw = value.slice(4, 4 + n);
  if (xorMask) {
    port ^= STUN_MAGIC_COOKIE >>> 16;
    for (let i = 0; i < n; i++) raw[i]! ^= xorMask[i]!;
  }
  if (port === 0) return null;
  return { address: n === 4 ? [...raw].join(".") : formatIpv6(raw), port };
}
