/**
 * Path probes (docs/adr/0158-proxy-paths.md "path liveness"): the two
 * authenticated control messages by which a multipath peer learns that its
 * OWN datagrams reach the other side over one path. A probe is sealed in a
 * WireGuard transport message and sent to one path only; the other side
 * answers with an ack carrying the probe's nonce, sent only back to the
 * source the probe came from. An ack from path P for a probe sent to P
 * proves a round trip over P; nothing else does (the peer's own datagrams
 * arriving over P say nothing about ours going there: one-way UDP).
 *
 * Wire form: the 16-byte plaintext `01 kind 00×6 nonce(8)` (kind 1 probe,
 * 2 ack). Its first nibble is 0, so it is never an IPv4/IPv6 packet: a
 * WireGuard peer that does not know it drops it as an invalid packet, and it
 * can never be delivered to the application. 16 bytes is one padding block,
 * so a probe is as long as any other short transport message.
 *
 * Owns: the codec. Must never: accept anything but the exact 16-byte form.
 */

/** Length of a probe or ack plaintext, bytes (one PADDING_MULTIPLE block). */
export const PATH_CONTROL_BYTES = 16;
/** First byte of a path control plaintext (IP version nibble 0: never an IP packet). */
export const PATH_CONTROL_MARKER = 0x01;
/** Kind byte of a probe. */
export const PATH_PROBE = 1;
/** Kind byte of an ack. */
export const PATH_ACK = 2;

/** A decoded path control message; `nonce` is the 8 nonce bytes as 16 hex digits. */
export interface PathControl {
  kind: typeof PATH_PROBE | typeof PATH_ACK;
  nonce: string;
}

/** Encodes a probe or ack with `nonce` (16 hex digits). */
export function encodePathControl(kind: PathControl["kind"], nonce: string): Uint8Array {
  const b = new Uint8Array(PATH_CONTROL_BYTES);
  b[0] = PATH_CONTROL_MARKER;
  b[1] = kind;
  b.set(Buffer.from(nonce, "hex").subarray(0, 8), 8);
  return b;
}

/** Decodes a decrypted plaintext; null when it is not exactly a path control message. */
export function decodePathControl(p: Uint8Array): PathControl | null {
  if (p.length !== PATH_CONTROL_BYTES || p[0] !== PATH_CONTROL_MARKER) return null;
  const kind = p[1];
  if (kind !== PATH_PROBE && kind !== PATH_ACK) return null;
  for (let i = 2; i < 8; i++) if (p[i] !== 0) return null;
  return { kind, nonce: Buffer.from(p.subarray(8, 16)).toString("hex") };
}
