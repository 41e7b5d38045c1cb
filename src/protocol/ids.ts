/**
 * The shape of every identifier and bearer that crosses a process boundary,
 * declared once (spec "Worker and Durable Objects", "Networks, addresses,
 * and grants", "Authentication and identity"). TypeBox schemas take the
 * `*_PATTERN` strings; code that tests a string takes the `*_ID` RegExps
 * built from them; src/domain/identifiers.ts mints IDs with the prefixes.
 *
 * - allocation, grant, connection, network and run IDs: a prefix, `_`, 32 lower-case
 *   hex digits (128 bits of a digest or of randomness);
 * - host and relay IDs: a DNS label (lower-case letters, digits, `-`; at
 *   most 63 characters; no leading `-`), chosen by the operator;
 * - an endpoint token: `bbx_` and 64 hex digits; a host credential:
 *   `bbh_<hostId>.` and 64 hex digits.
 *
 * Imports nothing. Must never: be spelled out again elsewhere
 * (test/architecture.test.ts fails on a copy).
 */

/** Prefix of an allocation ID. */
export const ALLOCATION_ID_PREFIX = "alloc_";
/** Prefix of a connection grant ID. */
export const GRANT_ID_PREFIX = "grt_";
/** Prefix of a Connection (rendezvous) ID. */
export const CONNECTION_ID_PREFIX = "con_";
/** Prefix of a Network ID. */
export const NETWORK_ID_PREFIX = "net_";
/** Prefix of a run ID (issue 22, "Runs"). */
export const RUN_ID_PREFIX = "run_";
/** Prefix of a lease ID (issue 22, "Leases"). */
export const LEASE_ID_PREFIX = "lse_";
/** Hex digits after the prefix of a digest-derived ID (128 bits). */
export const ID_HEX_DIGITS = 32;

/** Prefix of an exec ID (the guest's control service, src/protocol/control.ts). */
export const EXEC_ID_PREFIX = "exec_";
/** The body of a host or relay ID without anchors: a DNS label of 1..63 characters. */
export const NAME_ID_BODY = "[a-z0-9][a-z0-9-]{0,62}";

/** `^exec_` and 32 lower-case hex digits (128 random bits, chosen by the guest). */
export const EXEC_ID_PATTERN = `^${EXEC_ID_PREFIX}[0-9a-f]{${ID_HEX_DIGITS}}$`;
/** `^alloc_` and 32 lower-case hex digits. */
export const ALLOCATION_ID_PATTERN = `^${ALLOCATION_ID_PREFIX}[0-9a-f]{${ID_HEX_DIGITS}}$`;
/** `^grt_` and 32 lower-case hex digits. */
export const GRANT_ID_PATTERN = `^${GRANT_ID_PREFIX}[0-9a-f]{${ID_HEX_DIGITS}}$`;
/** `^con_` and 32 lower-case hex digits. */
export const CONNECTION_ID_PATTERN = `^${CONNECTION_ID_PREFIX}[0-9a-f]{${ID_HEX_DIGITS}}$`;
/** `^net_` and 32 lower-case hex digits. */
export const NETWORK_ID_PATTERN = `^${NETWORK_ID_PREFIX}[0-9a-f]{${ID_HEX_DIGITS}}$`;
/** `^run_` and 32 lower-case hex digits (a digest of the owner and the run's clientRequestId). */
export const RUN_ID_PATTERN = `^${RUN_ID_PREFIX}[0-9a-f]{${ID_HEX_DIGITS}}$`;
/** `^lse_` and 32 lower-case hex digits (a digest of the owner and the lease's clientRequestId). */
export const LEASE_ID_PATTERN = `^${LEASE_ID_PREFIX}[0-9a-f]{${ID_HEX_DIGITS}}$`;
/** A host ID: a DNS label. */
export const HOST_ID_PATTERN = `^${NAME_ID_BODY}$`;
/** A relay ID: a DNS label, as a host ID. */
export const RELAY_ID_PATTERN = `^${NAME_ID_BODY}$`;
/** An endpoint token: a bearer for one role of one Connection only (`bbx_` and 64 hex digits). */
export const ENDPOINT_TOKEN_PATTERN = "^bbx_[0-9a-f]{64}$";
/** A host credential `bbh_<hostId>.<secret>`: group 1 is the host ID, group 2 the 64-hex-digit secret. */
export const HOST_CREDENTIAL_PATTERN = `^bbh_(${NAME_ID_BODY})\\.([0-9a-f]{64})$`;

/** ALLOCATION_ID_PATTERN as a RegExp. */
export const ALLOCATION_ID = new RegExp(ALLOCATION_ID_PATTERN);
/** GRANT_ID_PATTERN as a RegExp. */
export const GRANT_ID = new RegExp(GRANT_ID_PATTERN);
/** CONNECTION_ID_PATTERN as a RegExp. */
export const CONNECTION_ID = new RegExp(CONNECTION_ID_PATTERN);
/** NETWORK_ID_PATTERN as a RegExp. */
export const NETWORK_ID = new RegExp(NETWORK_ID_PATTERN);
/** LEASE_ID_PATTERN as a RegExp. */
export const LEASE_ID = new RegExp(LEASE_ID_PATTERN);
/** RUN_ID_PATTERN as a RegExp. */
export const RUN_ID = new RegExp(RUN_ID_PATTERN);
/** HOST_ID_PATTERN as a RegExp. */
export const HOST_ID = new RegExp(HOST_ID_PATTERN);
/** RELAY_ID_PATTERN as a RegExp. */
export const RELAY_ID = new RegExp(RELAY_ID_PATTERN);
/** ENDPOINT_TOKEN_PATTERN as a RegExp. */
export const ENDPOINT_TOKEN = new RegExp(ENDPOINT_TOKEN_PATTERN);
/** HOST_CREDENTIAL_PATTERN as a RegExp. */
export const HOST_CREDENTIAL = new RegExp(HOST_CREDENTIAL_PATTERN);
