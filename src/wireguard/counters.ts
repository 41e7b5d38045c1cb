/**
 * A Device's counters: what it sent and received, and every datagram or
 * packet it dropped, by a closed set of reasons with stable names, so callers
 * branch on codes, never on text. The Device never throws on bad input; it
 * drops and counts here.
 *
 * Owns: the reason names and the counter object. Must never: carry packet
 * contents or keys.
 */

/** Why the Device dropped a datagram (rx) or an IP packet (tx). Stable names: dashboards and tests read them. */
export const DROP_REASONS = [
  /** Not a WireGuard message: too short, too long, wrong size for its type, unknown type or non-zero reserved bytes. */
  "malformed",
  /** A handshake message dropped unverified: more than MAC1_CHECKS_PER_SECOND arrived (ratelimit.ts). */
  "handshake-overload",
  /** A handshake message whose mac1 is not keyed with our public key (whitepaper §5.4.4). */
  "mac1-invalid",
  /** Under load, a handshake message without a valid mac2: answered with a cookie reply (whitepaper §5.3). */
  "cookie-required",
  /** Under load, more handshake messages from one source, or from all together, than the handshake limits allow (ratelimit.ts). */
  "rate-limited",
  /** Under load, a message that needed a cookie reply, not sent: over the cookie-reply limits per source or in all (ratelimit.ts). */
  "cookie-reply-limited",
  /** A handshake message that failed a DH or AEAD step. */
  "handshake-invalid",
  /** An initiation from a static key that is not a configured peer. */
  "unknown-peer",
  /** An initiation whose TAI64N timestamp is not newer than the last accepted from that peer (whitepaper §5.1). */
  "timestamp-replayed",
  /** An initiation less than INITIATION_MIN_INTERVAL_MS after the previous one from that peer. */
  "initiation-flood",
  /** A response that answers no initiation we have outstanding. */
  "unexpected-response",
  /** A cookie reply for an unknown index or that does not decrypt with our last mac1. */
  "cookie-invalid",
  /** A transport message for a receiver index we do not have. */
  "unknown-index",
  /** A transport message on a session older than REJECT_AFTER_TIME (whitepaper §6.2). */
  "session-expired",
  /** A transport counter already seen, too far behind the window, or ≥ 2^53 (whitepaper §5.4.6). */
  "counter-replayed",
  /** A transport message whose tag does not verify. */
  "decrypt-failed",
  /** A decrypted payload that is not an IPv4/IPv6 packet of consistent length. */
  "invalid-ip-packet",
  /** A decrypted packet whose source address is not among the sending peer's allowed IPs (whitepaper §2). */
  "source-not-allowed",
  /** An outgoing packet that is not an IPv4/IPv6 packet or is longer than MAX_PACKET_BYTES. */
  "packet-invalid",
  /** An outgoing packet whose destination no peer's allowed IPs contain. */
  "no-route",
  /** An outgoing packet dropped because MAX_STAGED_PACKETS were already waiting for a handshake. */
  "staged-overflow",
  /** Staged packets dropped after REKEY_ATTEMPT_TIME without a handshake (whitepaper §6.4). */
  "handshake-gave-up",
  /** A datagram that could not be sent: the peer has no known endpoint. */
  "no-endpoint",
  /** An exception inside the Device (a bug): caught so the caller never sees it, and counted. */
  "internal",
] as const;

/** One drop reason. */
export type DropReason = (typeof DROP_REASONS)[number];

/** Everything a Device counts. Byte counts are of datagrams (tx/rx) or IP packets (delivered/sent). */
export interface DeviceCounters {
  datagramsReceived: number;
  datagramsSent: number;
  bytesReceived: number;
  bytesSent: number;
  /** Decrypted IP packets handed to DeviceIo.deliverPacket. */
  packetsDelivered: number;
  /** IP packets sealed and sent. */
  packetsSent: number;
  keepalivesSent: number;
  keepalivesReceived: number;
  initiationsSent: number;
  responsesSent: number;
  handshakesCompleted: number;
  cookieRepliesSent: number;
  cookieRepliesAccepted: number;
  drops: Record<DropReason, number>;
}

/** A zeroed counter object. */
export function newCounters(): DeviceCounters {
  return {
    datagramsReceived: 0,
    datagramsSent: 0,
    bytesReceived: 0,
    bytesSent: 0,
    packetsDelivered: 0,
    packetsSent: 0,
    keepalivesSent: 0,
    keepalivesReceived: 0,
    initiationsSent: 0,
    responsesSent: 0,
    handshakesCompleted: 0,
    cookieRepliesSent: 0,
    cookieRepliesAccepted: 0,
    drops: Object.fromEntries(DROP_REASONS.map((r) => [r, 0])) as Record<DropReason, number>,
  };
}
