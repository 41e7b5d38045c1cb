/**
 * WireGuard protocol constants: message types and sizes, the Noise
 * construction strings, and the timer and message-count limits.
 *
 * Owns: the numbers from the WireGuard whitepaper (J. A. Donenfeld, "WireGuard:
 * Next Generation Kernel Network Tunnel"), §5.4 (messages), §6.1 (timer
 * constants), and the bounds this implementation adds on what a peer controls.
 * Must never: import anything; every other file of src/wireguard reads these.
 */

/** Message type of a handshake initiation (whitepaper §5.4.2). */
export const MESSAGE_INITIATION = 1;
/** Message type of a handshake response (whitepaper §5.4.3). */
export const MESSAGE_RESPONSE = 2;
/** Message type of a cookie reply (whitepaper §5.4.7). */
export const MESSAGE_COOKIE_REPLY = 3;
/** Message type of a transport data message (whitepaper §5.4.6). */
export const MESSAGE_TRANSPORT = 4;

/** Size in bytes of a handshake initiation (whitepaper §5.4.2). */
export const INITIATION_BYTES = 148;
/** Size in bytes of a handshake response (whitepaper §5.4.3). */
export const RESPONSE_BYTES = 92;
/** Size in bytes of a cookie reply (whitepaper §5.4.7). */
export const COOKIE_REPLY_BYTES = 64;
/** Size in bytes of the transport message header: type, reserved, receiver, counter (whitepaper §5.4.6). */
export const TRANSPORT_HEADER_BYTES = 16;
/** Size in bytes of a Poly1305 tag. */
export const TAG_BYTES = 16;
/** Smallest transport message: a header and the tag of an empty (keepalive) payload. */
export const TRANSPORT_MIN_BYTES = TRANSPORT_HEADER_BYTES + TAG_BYTES;
/** Size in bytes of a Curve25519 key (private, public or shared). */
export const KEY_BYTES = 32;
/** Size in bytes of a TAI64N timestamp (whitepaper §5.4.2). */
export const TIMESTAMP_BYTES = 12;
/** Size in bytes of mac1, mac2 and a cookie (whitepaper §5.4.4). */
export const MAC_BYTES = 16;
/** Size in bytes of the XChaCha20-Poly1305 nonce of a cookie reply (whitepaper §5.4.7). */
export const COOKIE_NONCE_BYTES = 24;
/** Transport payloads are zero-padded to a multiple of this many bytes (whitepaper §5.4.6). */
export const PADDING_MULTIPLE = 16;

/** Noise protocol name hashed into the initial chaining key (whitepaper §5.4, Noise spec §8). */
export const CONSTRUCTION = "Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s";
/** Identifier mixed into the initial handshake hash as the Noise prologue (whitepaper §5.4). */
export const IDENTIFIER = "WireGuard v1 zx2c4 Jason@zx2c4.com";
/** Label hashed with the receiver's public key to key mac1 (whitepaper §5.4.4). */
export const LABEL_MAC1 = "mac1----";
/** Label hashed with the responder's public key to key the cookie reply's AEAD (whitepaper §5.4.7). */
export const LABEL_COOKIE = "cookie--";

/** After this many messages sent on a session, the sender starts a new handshake (whitepaper §6.1: 2^60). */
export const REKEY_AFTER_MESSAGES = 2 ** 60;
/**
 * Whitepaper §6.1 rejects a session after 2^64 − 2^13 − 1 messages. Counters here are JavaScript
 * numbers, exact only below 2^53, so this implementation stops a session (and drops any received
 * counter) at 2^53 − 1 instead: far beyond anything a session reaches in REJECT_AFTER_TIME.
 */
export const REJECT_AFTER_MESSAGES = Number.MAX_SAFE_INTEGER;
/** Age after which the initiator of a session starts a new handshake when sending (whitepaper §6.1: 120 s). */
export const REKEY_AFTER_TIME_MS = 120_000;
/** Age after which a session is neither used to send nor accepted on receipt (whitepaper §6.1: 180 s). */
export const REJECT_AFTER_TIME_MS = 180_000;
/** How long an initiator keeps retrying one handshake before giving up (whitepaper §6.1: 90 s). */
export const REKEY_ATTEMPT_TIME_MS = 90_000;
/** Time before retransmitting an unanswered initiation, and the least time between two initiations (whitepaper §6.1: 5 s). */
export const REKEY_TIMEOUT_MS = 5_000;
/** Time after receiving data with nothing sent back before a keepalive is sent (whitepaper §6.1: 10 s). */
export const KEEPALIVE_TIMEOUT_MS = 10_000;
/** Upper bound of the random jitter added to handshake timers (whitepaper §6.1: up to 333 ms). */
export const REKEY_TIMEOUT_JITTER_MAX_MS = 333;
/** A responder's cookie secret is replaced after this long; a received cookie expires after it too (whitepaper §5.4.7: 2 minutes). */
export const COOKIE_SECRET_MAX_AGE_MS = 120_000;
/** Least time between two initiations accepted from one peer (flood protection, as wireguard-go: 50 ms). */
export const INITIATION_MIN_INTERVAL_MS = 50;

/** Largest IP packet the Device seals (the IPv4/IPv6 total length field's maximum). */
export const MAX_PACKET_BYTES = 65_535;
/** Largest datagram the Device parses; anything longer is dropped unread (a peer-controlled size). */
export const MAX_DATAGRAM_BYTES = MAX_PACKET_BYTES + PADDING_MULTIPLE + TRANSPORT_MIN_BYTES;
/** Packets queued per peer while a handshake is pending; the oldest is dropped beyond this. */
export const MAX_STAGED_PACKETS = 128;
/** Bits in the replay bitmap (whitepaper §5.4.6 follows RFC 6479; the Linux module keeps 8,192 bits too). */
export const REPLAY_BITMAP_BITS = 8_192;
/** Counters this far behind the greatest one received are still accepted once (8,192 − one 32-bit word). */
export const REPLAY_WINDOW_PACKETS = REPLAY_BITMAP_BITS - 32;
