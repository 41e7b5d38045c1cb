/**
 * Base64 of bytes with web-platform built-ins only (btoa), so the client
 * runs unchanged on Node, Bun, Deno and in browsers (packages/client ships
 * it to controller authors). Pure.
 */

/** Bytes read per btoa call (a multiple of 3, so the pieces join without padding in between). */
const PIECE_BYTES = 3 * 8192;

/** The standard (RFC 4648 §4, padded) base64 text of `bytes`. */
export function bytesToBase64(bytes: Uint8Array): string {
  let out = "";
  for (let at = 0; at < bytes.length; at += PIECE_BYTES) {
    const piece = bytes.subarray(at, at + PIECE_BYTES);
    let bin = "";
    for (let i = 0; i < piece.length; i++) bin += String.fromCharCode(piece[i]!);
    out += btoa(bin);
  }
  return out;
}
