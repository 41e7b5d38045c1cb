/**
 * Signing and verifying the signed documents of private networking (spec
 * "Networks, addresses, and grants": "Clients and hosts verify the signature
 * against configured verification keys and reject anything that does not
 * match exactly"): connection grants, relay maps and relay tokens, over the
 * exact bytes src/protocol/connection.ts defines (`signingBytes`).
 *
 * Owns: Ed25519 (RFC 8032) through node:crypto over those bytes, the shape
 * check before any signature work, the lifetime bound, freshness with a
 * clock skew, and the exact-match rules a verifier applies, each failure
 * with a stable code (src/protocol/errors.ts). Pure computation: callers pass
 * `nowMs` (wall-clock ms) and the trusted keys.
 * Must never: accept a document whose key ID is not trusted, whose signature
 * does not cover every payload field, or that is malformed; put a private
 * key into an error.
 */
import { createPrivateKey, createPublicKey, sign, verify, type KeyObject } from "node:crypto";
import { isIPv6 } from "node:net";
import { Value } from "@sinclair/typebox/value";
import {
  freshness,
  MAX_GRANT_TTL_SECONDS,
  MAX_RELAY_TOKEN_TTL_SECONDS,
  SignedGrant,
  SignedRelayMap,
  SignedRelayToken,
  signingBytes,
  type GrantPayload,
  type GrantTransport,
  type RelayMapPayload,
  type RelayRole,
  type RelayTokenPayload,
  type SignedKind,
} from "./connection.ts";
import type { ErrorCode } from "./errors.ts";

/** Clock skew a verifier tolerates on `issuedAtMs` (a document issued slightly in its future), ms. Expiry gets none. */
export const CONNECTION_CLOCK_SKEW_MS = 30_000;
/** Longest relay-map lifetime a verifier accepts, ms (it is re-issued with every grant). */
export const MAX_RELAY_MAP_TTL_MS = MAX_GRANT_TTL_SECONDS * 1000;

/** Trusted verification keys: key ID → standard base64 of a raw 32-byte Ed25519 public key. */
export type ConnectionVerificationKeys = ReadonlyMap<string, string>;

/** The outcome of a check: the verified payload, or a stable code and a sentence (never secret). */
export type Checked<P> = { ok: true; payload: P } | { ok: false; code: ErrorCode; reason: string };

const SPKI_ED25519_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");
const keyCache = new Map<string, KeyObject | null>();
/** Bound on the cache of parsed public keys (a verifier sees only its configured keys). */
const MAX_CACHED_KEYS = 64;

function decodeExact(s: string, bytes: number): Buffer | null {
  if (typeof s !== "string" || s.length !== 4 * Math.ceil(bytes / 3) || !/^[A-Za-z0-9+/]+={0,2}$/.test(s)) return null;
  const b = Buffer.from(s, "base64");
  return b.length === bytes && b.toString("base64") === s ? b : null;
}

function publicKeyObject(b64: string): KeyObject | null {
  const hit = keyCache.get(b64);
  if (hit !== undefined) return hit;
  const raw = decodeExact(b64, 32);
  let k: KeyObject | null = null;
  if (raw) {
    try {
      k = createPublicKey({ key: Buffer.concat([SPKI_ED25519_PREFIX, raw]), format: "der", type: "spki" });
    } catch {
      k = null;
    }
  }
  if (keyCache.size >= MAX_CACHED_KEYS) keyCache.clear();
  keyCache.set(b64, k);
  return k;
}

/** True when `b64` is standard base64 of a 32-byte Ed25519 public key. */
export function isVerificationKey(b64: string): boolean {
  return publicKeyObject(b64) !== null;
}

/**
 * Signs `payload` as a document of `kind` with the Ed25519 seed
 * `privateKeyB64` (standard base64 of 32 bytes) under `keyId`. For the
 * scheduler and test issuers. Throws an Error (without the key) when the
 * seed is malformed.
 */
export function signConnectionDocument<P>(
  kind: SignedKind,
  payload: P,
  keyId: string,
  privateKeyB64: string,
): { payload: P; keyId: string; signature: string } {
  const seed = decodeExact(privateKeyB64, 32);
  if (!seed) throw new Error("connection-signing key is not standard base64 of a 32-byte Ed25519 seed");
  const key = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: "der", type: "pkcs8" });
  const signature = sign(null, signingBytes(kind, payload), key).toString("base64");
  return { payload, keyId, signature };
}

/** The public key (base64) of an Ed25519 seed (base64). Throws an Error when the seed is malformed. */
export function connectionPublicKeyOf(privateKeyB64: string): string {
  const seed = decodeExact(privateKeyB64, 32);
  if (!seed) throw new Error("connection-signing key is not standard base64 of a 32-byte Ed25519 seed");
  const der = createPublicKey(
    createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: "der", type: "pkcs8" }),
  ).export({ format: "der", type: "spki" });
  return Buffer.from(der.subarray(SPKI_ED25519_PREFIX.length)).toString("base64");
}

/** True when `doc.signature` is a valid Ed25519 signature of `kind` over `doc.payload` by the trusted key named `doc.keyId`. */
export function verifyConnectionSignature(
  kind: SignedKind,
  doc: { payload: unknown; keyId: string; signature: string },
  keys: ConnectionVerificationKeys,
): boolean {
  const pub = keys.get(doc.keyId);
  const key = pub === undefined ? null : publicKeyObject(pub);
  const sig = decodeExact(doc.signature, 64);
  if (!key || !sig) return false;
  try {
    return verify(null, signingBytes(kind, doc.payload), key, sig);
  } catch {
    return false;
  }
}

/** Fields a verifier of a grant knows in advance; each present one must match exactly. */
export interface GrantExpectation {
  grantId?: string;
  allocationId?: string;
  generation?: number;
  hostId?: string;
  hostPublicKey?: string;
  clientPublicKey?: string;
  transport?: GrantTransport;
  /** A port the grant must include. */
  port?: number;
}

/**
 * Verifies a signed grant (spec "Networks, addresses, and grants"), in
 * order: shape (GRANT_SIGNATURE_INVALID: a malformed document cannot
 * verify), trusted key ID and signature (GRANT_SIGNATURE_INVALID), a
 * lifetime within MAX_GRANT_TTL_SECONDS and addresses that are IPv6
 * (GRANT_MISMATCH), freshness (GRANT_EXPIRED, GRANT_NOT_YET_VALID with
 * `skewMs`), then every field of `expect` (GRANT_MISMATCH naming the field).
 */
export function checkSignedGrant(
  doc: unknown,
  keys: ConnectionVerificationKeys,
  expect: GrantExpectation,
  nowMs: number,
  skewMs = CONNECTION_CLOCK_SKEW_MS,
): Checked<GrantPayload> {
  if (!Value.Check(SignedGrant, doc))
    return {
      ok: false,
      code: "GRANT_SIGNATURE_INVALID",
      reason: `not a signed grant: ${firstError(SignedGrant, doc)}`,
    };
  if (!keys.has(doc.keyId))
    return {
      ok: false,
      code: "GRANT_SIGNATURE_INVALID",
      reason: `grant signed with key ${JSON.stringify(doc.keyId)}, which is not a configured verification key`,
    };
  if (!verifyConnectionSignature("grant", doc, keys))
    return {
      ok: false,
      code: "GRANT_SIGNATURE_INVALID",
      reason: `grant ${doc.payload.grantId}: the signature does not verify with key ${JSON.stringify(doc.keyId)}`,
    };
  const g = doc.payload;
  if (g.expiresAtMs <= g.issuedAtMs || g.expiresAtMs - g.issuedAtMs > MAX_GRANT_TTL_SECONDS * 1000)
    return {
      ok: false,
      code: "GRANT_MISMATCH",
      reason: `grant ${g.grantId}: lifetime ${g.expiresAtMs - g.issuedAtMs} ms is outside 1..${MAX_GRANT_TTL_SECONDS * 1000} ms`,
    };
  if (!isIPv6(g.clientAddress) || !isIPv6(g.allocationAddress) || g.clientAddress === g.allocationAddress)
    return {
      ok: false,
      code: "GRANT_MISMATCH",
      reason: `grant ${g.grantId}: client and allocation addresses must be two different IPv6 addresses`,
    };
  const fresh = freshness(g, nowMs, skewMs);
  if (fresh === "expired")
    return {
      ok: false,
      code: "GRANT_EXPIRED",
      reason: `grant ${g.grantId} expired at ${new Date(g.expiresAtMs).toISOString()}`,
    };
  if (fresh === "not_yet_valid")
    return {
      ok: false,
      code: "GRANT_NOT_YET_VALID",
      reason: `grant ${g.grantId} is issued at ${new Date(g.issuedAtMs).toISOString()}, beyond the allowed clock skew`,
    };
  for (const field of [
    "grantId",
    "allocationId",
    "generation",
    "hostId",
    "hostPublicKey",
    "clientPublicKey",
    "transport",
  ] as const) {
    const want = expect[field];
    if (want !== undefined && g[field] !== want)
      return {
        ok: false,
        code: "GRANT_MISMATCH",
        reason: `grant ${g.grantId}: ${field} is ${JSON.stringify(g[field])}, expected ${JSON.stringify(want)}`,
      };
  }
  if (expect.port !== undefined && !g.ports.includes(expect.port))
    return {
      ok: false,
      code: "GRANT_MISMATCH",
      reason: `grant ${g.grantId} does not allow port ${expect.port} (it allows ${g.ports.join(", ")})`,
    };
  return { ok: true, payload: g };
}

/**
 * Verifies a signed relay map: shape and signature (GRANT_SIGNATURE_INVALID),
 * lifetime within MAX_RELAY_MAP_TTL_MS (GRANT_MISMATCH), freshness
 * (GRANT_EXPIRED, GRANT_NOT_YET_VALID). Relay IDs must be unique (GRANT_MISMATCH).
 */
export function checkSignedRelayMap(
  doc: unknown,
  keys: ConnectionVerificationKeys,
  nowMs: number,
  skewMs = CONNECTION_CLOCK_SKEW_MS,
): Checked<RelayMapPayload> {
  if (!Value.Check(SignedRelayMap, doc))
    return {
      ok: false,
      code: "GRANT_SIGNATURE_INVALID",
      reason: `not a signed relay map: ${firstError(SignedRelayMap, doc)}`,
    };
  if (!verifyConnectionSignature("relay-map", doc, keys))
    return {
      ok: false,
      code: "GRANT_SIGNATURE_INVALID",
      reason: `relay map: the signature does not verify with a configured key (key ID ${JSON.stringify(doc.keyId)})`,
    };
  const m = doc.payload;
  if (m.expiresAtMs <= m.issuedAtMs || m.expiresAtMs - m.issuedAtMs > MAX_RELAY_MAP_TTL_MS)
    return {
      ok: false,
      code: "GRANT_MISMATCH",
      reason: `relay map lifetime ${m.expiresAtMs - m.issuedAtMs} ms is outside 1..${MAX_RELAY_MAP_TTL_MS} ms`,
    };
  if (new Set(m.relays.map((r) => r.relayId)).size !== m.relays.length)
    return { ok: false, code: "GRANT_MISMATCH", reason: "relay map lists a relay ID twice" };
  const fresh = freshness(m, nowMs, skewMs);
  if (fresh === "expired")
    return {
      ok: false,
      code: "GRANT_EXPIRED",
      reason: `relay map expired at ${new Date(m.expiresAtMs).toISOString()}`,
    };
  if (fresh === "not_yet_valid")
    return { ok: false, code: "GRANT_NOT_YET_VALID", reason: "relay map is issued beyond the allowed clock skew" };
  return { ok: true, payload: m };
}

/** Fields a verifier of a relay token knows in advance. */
export interface RelayTokenExpectation {
  relayId?: string;
  grantId?: string;
  role?: RelayRole;
}

/**
 * Verifies a signed relay token (spec "Packet relays": signature, relay ID,
 * freshness, limits): shape and signature (RELAY_TOKEN_INVALID), lifetime
 * within MAX_RELAY_TOKEN_TTL_SECONDS and freshness (RELAY_TOKEN_EXPIRED),
 * relay ID (RELAY_TOKEN_WRONG_RELAY), grant ID and role (RELAY_TOKEN_INVALID).
 */
export function checkSignedRelayToken(
  doc: unknown,
  keys: ConnectionVerificationKeys,
  expect: RelayTokenExpectation,
  nowMs: number,
  skewMs = CONNECTION_CLOCK_SKEW_MS,
): Checked<RelayTokenPayload> {
  if (!Value.Check(SignedRelayToken, doc))
    return {
      ok: false,
      code: "RELAY_TOKEN_INVALID",
      reason: `not a signed relay token: ${firstError(SignedRelayToken, doc)}`,
    };
  if (!verifyConnectionSignature("relay-token", doc, keys))
    return {
      ok: false,
      code: "RELAY_TOKEN_INVALID",
      reason: `relay token: the signature does not verify with a configured key (key ID ${JSON.stringify(doc.keyId)})`,
    };
  const t = doc.payload;
  if (t.expiresAtMs <= t.issuedAtMs || t.expiresAtMs - t.issuedAtMs > MAX_RELAY_TOKEN_TTL_SECONDS * 1000)
    return {
      ok: false,
      code: "RELAY_TOKEN_EXPIRED",
      reason: `relay token lifetime ${t.expiresAtMs - t.issuedAtMs} ms is outside 1..${MAX_RELAY_TOKEN_TTL_SECONDS * 1000} ms`,
    };
  if (freshness(t, nowMs, skewMs) !== null)
    return { ok: false, code: "RELAY_TOKEN_EXPIRED", reason: `relay token for grant ${t.grantId} is not valid now` };
  if (expect.relayId !== undefined && t.relayId !== expect.relayId)
    return {
      ok: false,
      code: "RELAY_TOKEN_WRONG_RELAY",
      reason: `relay token is for relay ${t.relayId}, not ${expect.relayId}`,
    };
  if (expect.grantId !== undefined && t.grantId !== expect.grantId)
    return {
      ok: false,
      code: "RELAY_TOKEN_INVALID",
      reason: `relay token is for grant ${t.grantId}, not ${expect.grantId}`,
    };
  if (expect.role !== undefined && t.role !== expect.role)
    return {
      ok: false,
      code: "RELAY_TOKEN_INVALID",
      reason: `relay token is for the ${t.role} role, not ${expect.role}`,
    };
  return { ok: true, payload: t };
}

function firstError(schema: Parameters<typeof Value.Errors>[0], v: unknown): string {
  const e = Value.Errors(schema, v).First();
  return e ? `${e.path || "/"} ${e.message}` : "invalid";
}

/** Parses `keyId=base64` pairs (comma-separated) into verification keys. Throws an Error naming the bad entry, or a key ID given twice (which key would win is not for the parser to guess). */
export function parseVerificationKeys(text: string): Map<string, string> {
  const keys = new Map<string, string>();
  for (const part of text
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)) {
    const eq = part.indexOf("=");
    const id = eq > 0 ? part.slice(0, eq) : "";
    const key = part.slice(eq + 1);
    if (!/^[A-Za-z0-9._:-]{1,64}$/.test(id) || !isVerificationKey(key))
      throw new Error(
        `verification key ${JSON.stringify(part.slice(0, 80))} is not KEYID=BASE64 of a 32-byte Ed25519 public key`,
      );
    if (keys.has(id)) throw new Error(`verification key ID ${id} is given twice; each key ID names one key`);
    keys.set(id, key);
  }
  return keys;
}
