/**
 * Private networking on the wire (spec "Private networking", "Packet
 * relays"): connection grants, relay maps, relay tokens, the rendezvous
 * messages of a Connection, and the grant API bodies.
 *
 * Owns: the shapes, their bounds, and the exact bytes a signature covers.
 * Every signed document is `{ payload, keyId, signature }`: an Ed25519
 * signature (RFC 8032) over `signingBytes(kind, payload)`, i.e. a
 * domain-separation line naming the document kind and version followed by
 * the payload's canonical JSON, so a signature over one kind can never be
 * replayed as another. Pure: no I/O, no clock (callers pass `nowMs`).
 * Must never: carry a private key; a grant names public keys and addresses
 * only, and a relay token carries no credential for anything but one relay
 * pairing.
 */
import { Type, type Static } from "@sinclair/typebox";
import { canonicalJson } from "./canonical.ts";
import {
  ALLOCATION_ID_PATTERN,
  GRANT_ID_PATTERN,
  HOST_ID_PATTERN,
  NETWORK_ID_PATTERN,
  RELAY_ID_PATTERN,
} from "./ids.ts";

/** Most ports one grant may open. */
export const MAX_GRANT_PORTS = 16;
/** Longest grant lifetime the scheduler issues, seconds (renewed by a new grant). */
export const MAX_GRANT_TTL_SECONDS = 3600;
/** Default grant lifetime, seconds. */
export const DEFAULT_GRANT_TTL_SECONDS = 600;
/** Longest relay-token lifetime, seconds: short, a relay session is re-established with a fresh token. */
export const MAX_RELAY_TOKEN_TTL_SECONDS = 300;
/** Most relays one relay map lists. */
export const MAX_RELAYS = 16;
/** Most endpoint candidates one side publishes at once. */
export const MAX_CANDIDATES = 16;
/** Most rendezvous messages a Connection keeps per role (older ones are dropped once acknowledged). */
export const MAX_CONNECTION_MESSAGES_PER_ROLE = 64;
/** Largest rendezvous message body, bytes of JSON. */
export const MAX_CONNECTION_MESSAGE_BYTES = 4096;
/**
 * Largest frame a relay forwards, bytes: one WireGuard datagram of an inner
 * packet up to 1,468 bytes (1,500 − 32 bytes of transport overhead), so
 * peers whose MTU is at or above TUNNEL_MTU (1,280; 1,420 before ADR 0103)
 * all fit.
 */
export const MAX_RELAY_FRAME_BYTES = 1500;
/** The tunnel MTU, bytes (src/protocol/tunnelMtu.ts, ADR 0103). */
export { TUNNEL_MTU } from "./tunnelMtu.ts";
/** Default UDP port of the host endpoint. */
export const DEFAULT_ENDPOINT_PORT = 51820;
/** Most rendezvous messages one `POST /v1/connections/{id}/messages` carries. */
export const MAX_CONNECTION_MESSAGES_PER_POST = 16;
/** Largest body of the two Connection routes, bytes (16 messages of at most MAX_CONNECTION_MESSAGE_BYTES). */
export const MAX_CONNECTION_BODY_BYTES = 64 * 1024;
/** Longest a Connection poll is parked, ms. */
export const MAX_CONNECTION_POLL_WAIT_MS = 25_000;
/** Largest sequence number or cursor a rendezvous message carries (2^53 - 1: exact in JSON and SQLite). */
export const MAX_CONNECTION_SEQ = Number.MAX_SAFE_INTEGER;
/**
 * Shortest interval between two relay-token refreshes of one role of one
 * Connection, ms (POST /v1/connections/{id}/relay-tokens; a sooner one is
 * RATE_LIMITED): tokens live at least 30 s, an endpoint refreshes once per
 * token lifetime.
 */
export const MIN_RELAY_TOKEN_REFRESH_MS = 10_000;

const B64Key = Type.String({
  maxLength: 44,
  pattern: "^[A-Za-z0-9+/]{43}=$",
  description: "32-byte key, standard base64",
});
const B64Sig = Type.String({
  maxLength: 88,
  pattern: "^[A-Za-z0-9+/]{86}==$",
  description: "64-byte Ed25519 signature, standard base64",
});
const Ipv6 = Type.String({
  minLength: 2,
  maxLength: 45,
  pattern: "^[0-9a-f:]+$",
  description: "IPv6 address, lowercase, no prefix length",
});
const Port = Type.Integer({ minimum: 1, maximum: 65535 });
const KeyId = Type.String({ minLength: 1, maxLength: 64, pattern: "^[A-Za-z0-9._:-]+$" });

/** Transports a grant may allow. */
export const GrantTransport = Type.Union([Type.Literal("tcp"), Type.Literal("udp")]);
/** Transports a grant may allow. */
export type GrantTransport = Static<typeof GrantTransport>;

/**
 * What a connection grant allows: exactly one client peer to reach exactly
 * one allocation generation on one host, over one transport and a set of
 * destination ports, until `expiresAtMs`.
 */
export const GrantPayload = Type.Object(
  {
    v: Type.Literal(1),
    grantId: Type.String({ pattern: GRANT_ID_PATTERN }),
    /** The principal that owns the allocation and asked for the grant. */
    tenant: Type.String({ minLength: 1, maxLength: 64 }),
    networkId: Type.String({ pattern: NETWORK_ID_PATTERN }),
    allocationId: Type.String({ pattern: ALLOCATION_ID_PATTERN }),
    /** The one placement generation this grant targets; never spans a replacement. */
    generation: Type.Integer({ minimum: 1 }),
    hostId: Type.String({ pattern: HOST_ID_PATTERN }),
    clientPublicKey: B64Key,
    hostPublicKey: B64Key,
    /** The client's /128 inside the Network. */
    clientAddress: Ipv6,
    /** The allocation's /128 inside the Network (survives replacement). */
    allocationAddress: Ipv6,
    transport: GrantTransport,
    ports: Type.Array(Port, { minItems: 1, maxItems: MAX_GRANT_PORTS, uniqueItems: true }),
    policyRevision: Type.Integer({ minimum: 0 }),
    issuedAtMs: Type.Integer({ minimum: 0 }),
    expiresAtMs: Type.Integer({ minimum: 0 }),
  },
  { additionalProperties: false },
);
/** What a connection grant allows. */
export type GrantPayload = Static<typeof GrantPayload>;

/** One relay a client or host may use. */
export const RelayEntry = Type.Object(
  {
    relayId: Type.String({ pattern: RELAY_ID_PATTERN }),
    /** WebSocket URL, `wss://host:443/v1/relay` (or `ws://` in tests on loopback). */
    url: Type.String({ minLength: 8, maxLength: 512, pattern: "^wss?://" }),
    /** QUIC endpoint `host:port`, when the relay offers one. */
    quic: Type.Optional(Type.String({ minLength: 3, maxLength: 256 })),
  },
  { additionalProperties: false },
);
/** One relay a client or host may use. */
export type RelayEntry = Static<typeof RelayEntry>;

/** The relays a grant's two ends may meet at. */
export const RelayMapPayload = Type.Object(
  {
    v: Type.Literal(1),
    relays: Type.Array(RelayEntry, { maxItems: MAX_RELAYS }),
    issuedAtMs: Type.Integer({ minimum: 0 }),
    expiresAtMs: Type.Integer({ minimum: 0 }),
  },
  { additionalProperties: false },
);
/** The relays a grant's two ends may meet at. */
export type RelayMapPayload = Static<typeof RelayMapPayload>;

/** Limits a relay enforces on one paired session. */
export const RelayLimits = Type.Object(
  {
    /** Bytes forwarded in both directions together before the pair is closed. */
    maxBytes: Type.Integer({ minimum: 1 }),
    /** Sustained bytes per second per direction (token bucket, burst = one second's worth). */
    maxBytesPerSecond: Type.Integer({ minimum: 1 }),
    /** A session with no frame for this long is closed, ms. */
    idleTimeoutMs: Type.Integer({ minimum: 1000 }),
  },
  { additionalProperties: false },
);
/** Limits a relay enforces on one paired session. */
export type RelayLimits = Static<typeof RelayLimits>;

/** Relay sides. A relay pairs exactly one of each per grant. */
export const RelayRole = Type.Union([Type.Literal("client"), Type.Literal("host")]);
/** Relay sides. */
export type RelayRole = Static<typeof RelayRole>;

/** A relay token: admits one role of one grant to one relay, briefly. */
export const RelayTokenPayload = Type.Object(
  {
    v: Type.Literal(1),
    relayId: Type.String({ pattern: RELAY_ID_PATTERN }),
    grantId: Type.String({ pattern: GRANT_ID_PATTERN }),
    role: RelayRole,
    limits: RelayLimits,
    issuedAtMs: Type.Integer({ minimum: 0 }),
    expiresAtMs: Type.Integer({ minimum: 0 }),
  },
  { additionalProperties: false },
);
/** A relay token. */
export type RelayTokenPayload = Static<typeof RelayTokenPayload>;

/** A signed document of payload type `P` (see the module header). */
export const Signed = <P extends ReturnType<typeof Type.Object>>(payload: P) =>
  Type.Object({ payload, keyId: KeyId, signature: B64Sig }, { additionalProperties: false });
/** A signed grant. */
export const SignedGrant = Signed(GrantPayload);
/** A signed grant. */
export type SignedGrant = Static<typeof SignedGrant>;
/** A signed relay map. */
export const SignedRelayMap = Signed(RelayMapPayload);
/** A signed relay map. */
export type SignedRelayMap = Static<typeof SignedRelayMap>;
/** A signed relay token. */
export const SignedRelayToken = Signed(RelayTokenPayload);
/** A signed relay token. */
export type SignedRelayToken = Static<typeof SignedRelayToken>;

/** Document kinds, each with its own domain-separation line. */
export type SignedKind = "grant" | "relay-map" | "relay-token";

/**
 * The exact bytes a signature of `kind` covers: `beachball-<kind>-v1\n`
 * followed by the canonical JSON of `payload` (src/protocol/canonical.ts).
 */
export function signingBytes(kind: SignedKind, payload: unknown): Uint8Array {
  return new TextEncoder().encode(`beachball-${kind}-v1\n${canonicalJson(payload)}`);
}

/** Where one side of a connection may be reached. */
export const Candidate = Type.Object(
  {
    /** IPv4 dotted quad or IPv6 address. */
    address: Type.String({ minLength: 2, maxLength: 45, pattern: "^[0-9a-fA-F:.]+$" }),
    port: Port,
    /** local: an interface address; stun: as seen by a STUN server; peer: as seen by the other side. */
    kind: Type.Union([Type.Literal("local"), Type.Literal("stun"), Type.Literal("peer")]),
  },
  { additionalProperties: false },
);
/** Where one side of a connection may be reached. */
export type Candidate = Static<typeof Candidate>;

/** A rendezvous message one side posts to its Connection (spec "Coordination and path selection"). */
export const ConnectionMessage = Type.Union([
  Type.Object(
    {
      type: Type.Literal("candidates"),
      seq: Type.Integer({ minimum: 1, maximum: MAX_CONNECTION_SEQ }),
      candidates: Type.Array(Candidate, { maxItems: MAX_CANDIDATES }),
    },
    { additionalProperties: false },
  ),
  Type.Object(
    {
      type: Type.Literal("path_observation"),
      seq: Type.Integer({ minimum: 1, maximum: MAX_CONNECTION_SEQ }),
      path: Type.Union([Type.Literal("direct"), Type.Literal("relay")]),
      /** The peer endpoint a decrypting datagram came from (direct) or the relay ID. */
      via: Type.String({ minLength: 1, maxLength: 128 }),
    },
    { additionalProperties: false },
  ),
  Type.Object(
    {
      type: Type.Literal("ack"),
      seq: Type.Integer({ minimum: 1, maximum: MAX_CONNECTION_SEQ }),
      upTo: Type.Integer({ minimum: 0, maximum: MAX_CONNECTION_SEQ }),
    },
    { additionalProperties: false },
  ),
]);
/** A rendezvous message. */
export type ConnectionMessage = Static<typeof ConnectionMessage>;

/** `POST /v1/allocations/{id}/connection-grants` body. */
export const ConnectionGrantBody = Type.Object(
  {
    clientPublicKey: B64Key,
    transport: GrantTransport,
    ports: Type.Array(Port, { minItems: 1, maxItems: MAX_GRANT_PORTS, uniqueItems: true }),
    ttlSeconds: Type.Optional(Type.Integer({ minimum: 30, maximum: MAX_GRANT_TTL_SECONDS })),
    /**
     * The generation the caller expects (optional): a grant for any other
     * generation is refused with STALE_GENERATION, so a client renewing a
     * grant learns that the allocation was replaced instead of silently
     * reaching the new VM.
     */
    generation: Type.Optional(Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER })),
  },
  { additionalProperties: false },
);
/** `POST /v1/allocations/{id}/connection-grants` body. */
export type ConnectionGrantBody = Static<typeof ConnectionGrantBody>;

/**
 * The grant routes' path: `/v1/allocations/{id}/connection-grants` (POST
 * creates a grant), and with `grantId`
 * `/v1/allocations/{id}/connection-grants/{grantId}` (DELETE revokes it;
 * idempotent, 204; spec "Data path" step 6 and "Revocation and replacement").
 */
export function connectionGrantsPath(allocationId: string, grantId?: string): string {
  const base = `/v1/allocations/${encodeURIComponent(allocationId)}/connection-grants`;
  return grantId === undefined ? base : `${base}/${encodeURIComponent(grantId)}`;
}

/** `POST /v1/allocations/{id}/connection-grants` response. */
export interface ConnectionGrantResponse {
  grant: SignedGrant;
  relayMap: SignedRelayMap;
  /** The client's relay token for each relay of the map, by relay ID. */
  relayTokens: Record<string, SignedRelayToken>;
  /** Rendezvous: the Connection's ID and the client's endpoint token (a bearer for that Connection only). */
  connectionId: string;
  endpointToken: string;
  /** The host endpoint's current candidates. */
  hostCandidates: Candidate[];
  /**
   * The deployment's STUN servers ("IPv4:PORT" / "[IPv6]:PORT", at most
   * MAX_STUN_SERVERS, src/protocol/stunServers.ts): the client asks them
   * from its tunnel socket for its public mapping and posts that as a
   * candidate. Absent from older schedulers (then: none).
   */
  stunServers?: string[];
}

/**
 * `POST /v1/connections/{id}/relay-tokens` response: freshly minted relay
 * tokens for the caller's role of the Connection's grant (the same grant ID,
 * so the same generation and host peer), one per relay of the deployment,
 * each short-lived and never past the grant's expiry. An endpoint whose
 * relay session drops after its first token expired reconnects with these.
 */
export interface ConnectionRelayTokensResponse {
  grantId: string;
  role: RelayRole;
  /** Relay ID → signed relay token for `role`. */
  relayTokens: Record<string, SignedRelayToken>;
  /** When the grant (and the Connection) ends, ms since the epoch. */
  expiresAtMs: number;
}

/**
 * `POST /v1/connections/{id}/poll` body (authenticated by the endpoint
 * token). `after` is the highest sequence number of the peer's messages the
 * caller has processed: those are acknowledged (deleted) and only later
 * ones are returned. With none waiting, the poll is parked up to `waitMs`.
 */
export const ConnectionPollBody = Type.Object(
  {
    after: Type.Integer({ minimum: 0, maximum: MAX_CONNECTION_SEQ }),
    waitMs: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_CONNECTION_POLL_WAIT_MS })),
  },
  { additionalProperties: false },
);
/** `POST /v1/connections/{id}/poll` body. */
export type ConnectionPollBody = Static<typeof ConnectionPollBody>;

/**
 * `POST /v1/connections/{id}/messages` body: the caller's messages, each
 * with a sequence number above the last one the Connection accepted from
 * this role (an equal or lower one is a redelivery and is dropped).
 */
export const ConnectionMessagesBody = Type.Object(
  { messages: Type.Array(ConnectionMessage, { minItems: 1, maxItems: MAX_CONNECTION_MESSAGES_PER_POST }) },
  { additionalProperties: false },
);
/** `POST /v1/connections/{id}/messages` body. */
export type ConnectionMessagesBody = Static<typeof ConnectionMessagesBody>;

/** Answer of both Connection routes. */
export interface ConnectionPollResponse {
  /** The caller's role, as its endpoint token says. */
  role: RelayRole;
  /** The peer's messages after the caller's cursor, oldest first (empty for `/messages`). */
  messages: ConnectionMessage[];
  /** The highest sequence number the Connection accepted from the caller. */
  lastAcceptedSeq: number;
  /** When the Connection (with its grant) ends, ms since the epoch. */
  expiresAtMs: number;
  /** True once the grant was revoked or expired: nothing more will arrive. */
  closed: boolean;
}

/** Why a peer refuses a signed document; each maps to a stable error code. */
export type SignedDocumentProblem =
  | "GRANT_SIGNATURE_INVALID"
  | "GRANT_EXPIRED"
  | "GRANT_NOT_YET_VALID"
  | "GRANT_MISMATCH"
  | "RELAY_TOKEN_INVALID"
  | "RELAY_TOKEN_EXPIRED"
  | "RELAY_TOKEN_WRONG_RELAY";

/**
 * The freshness rule every verifier applies: a document is valid from
 * `issuedAtMs - skewMs` until `expiresAtMs` (exclusive). Returns the
 * problem, or null when `nowMs` is inside the window. Pure.
 */
export function freshness(
  p: { issuedAtMs: number; expiresAtMs: number },
  nowMs: number,
  skewMs: number,
): "expired" | "not_yet_valid" | null {
  if (nowMs >= p.expiresAtMs) return "expired";
  if (nowMs < p.issuedAtMs - skewMs) return "not_yet_valid";
  return null;
}
