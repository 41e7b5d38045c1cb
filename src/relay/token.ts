/**
 * Relay token verification (spec "Packet relays": "a relay token admits
 * one role of one grant"; src/protocol/connection.ts for the shape and the
 * signed bytes).
 *
 * Owns: the order of checks and the stable code each failure maps to:
 * size, JSON and shape (RELAY_TOKEN_INVALID), a trusted key by `keyId` and
 * an Ed25519 signature (RFC 8032) over `signingBytes("relay-token",
 * payload)` (RELAY_TOKEN_INVALID), this relay's ID
 * (RELAY_TOKEN_WRONG_RELAY), a lifetime of at most
 * MAX_RELAY_TOKEN_TTL_SECONDS (RELAY_TOKEN_INVALID), freshness with
 * RELAY_TOKEN_SKEW_MS (RELAY_TOKEN_EXPIRED), limits within the relay's caps
 * (RELAY_LIMITS_OVER_CAP). The signature is checked before anything the
 * payload claims, so an unsigned document learns nothing but "invalid".
 * Pure apart from the verification itself; the caller passes the wall clock.
 * Must never: log or echo the token, or accept one no configured key signed.
 */
import { createPublicKey, verify, type KeyObject } from "node:crypto";
import { TypeCompiler } from "@sinclair/typebox/compiler";
import {
  freshness,
  MAX_RELAY_TOKEN_TTL_SECONDS,
  SignedRelayToken,
  signingBytes,
  type RelayLimits,
  type RelayTokenPayload,
} from "../protocol/connection.ts";
import type { ErrorCode } from "../protocol/errors.ts";
import { MAX_RELAY_TOKEN_BYTES } from "../protocol/relay.ts";

/** Clock skew a token's `issuedAtMs` may be ahead of this relay's clock by, ms. */
export const RELAY_TOKEN_SKEW_MS = 10_000;

const SPKI_ED25519_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
const checkToken = TypeCompiler.Compile(SignedRelayToken);

/** Codes a token can be refused with. */
export type TokenRefusal = Extract<
  ErrorCode,
  "RELAY_TOKEN_INVALID" | "RELAY_TOKEN_EXPIRED" | "RELAY_TOKEN_WRONG_RELAY" | "RELAY_LIMITS_OVER_CAP"
>;

/** The outcome of verifyRelayToken. */
export type TokenCheck = { ok: true; token: RelayTokenPayload } | { ok: false; code: TokenRefusal };

/** What a relay checks tokens against. */
export interface TokenPolicy {
  relayId: string;
  /** Trusted Ed25519 keys by key ID (from publicKeyObjects). */
  keys: ReadonlyMap<string, KeyObject>;
  caps: RelayLimits;
  /** Defaults to RELAY_TOKEN_SKEW_MS. */
  skewMs?: number;
}

/** Wraps raw 32-byte Ed25519 public keys for node:crypto. Throws on a key that is not 32 bytes (configuration is validated before). */
export function publicKeyObjects(raw: ReadonlyMap<string, Uint8Array>): Map<string, KeyObject> {
  const out = new Map<string, KeyObject>();
  for (const [id, k] of raw) {
    if (k.length !== 32) throw new Error(`trusted key ${id} is not 32 bytes`);
    out.set(id, createPublicKey({ key: Buffer.concat([SPKI_ED25519_PREFIX, k]), format: "der", type: "spki" }));
  }
  return out;
}

/** Verifies the text of a token message against `policy` at wall-clock `wallMs` (see the module header for the order). Never throws. */
export function verifyRelayToken(text: string, policy: TokenPolicy, wallMs: number): TokenCheck {
  const bad = (code: TokenRefusal): TokenCheck => ({ ok: false, code });
  if (text.length > MAX_RELAY_TOKEN_BYTES || Buffer.byteLength(text) > MAX_RELAY_TOKEN_BYTES)
    return bad("RELAY_TOKEN_INVALID");
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return bad("RELAY_TOKEN_INVALID");
  }
  if (!checkToken.Check(doc)) return bad("RELAY_TOKEN_INVALID");
  const key = policy.keys.get(doc.keyId);
  if (!key) return bad("RELAY_TOKEN_INVALID");
  let signed = false;
  try {
    signed = verify(null, signingBytes("relay-token", doc.payload), key, Buffer.from(doc.signature, "base64"));
  } catch {
    signed = false;
  }
  if (!signed) return bad("RELAY_TOKEN_INVALID");
  const p = doc.payload;
  if (p.relayId !== policy.relayId) return bad("RELAY_TOKEN_WRONG_RELAY");
  if (p.expiresAtMs <= p.issuedAtMs || p.expiresAtMs - p.issuedAtMs > MAX_RELAY_TOKEN_TTL_SECONDS * 1000)
    return bad("RELAY_TOKEN_INVALID");
  if (freshness(p, wallMs, policy.skewMs ?? RELAY_TOKEN_SKEW_MS) !== null) return bad("RELAY_TOKEN_EXPIRED");
  const caps = policy.caps;
  if (
    p.limits.maxBytes > caps.maxBytes ||
    p.limits.maxBytesPerSecond > caps.maxBytesPerSecond ||
    p.limits.idleTimeoutMs > caps.idleTimeoutMs
  )
    return bad("RELAY_LIMITS_OVER_CAP");
  return { ok: true, token: p };
}
