/**
 * The scheduler's use of the deployment's Ed25519 connection-signing key
 * (spec "Networks, addresses, and grants"; "All configuration comes from one
 * deployment manifest. The manifest names secrets by reference … resolved
 * at use time"): signing grants, relay maps and relay tokens over
 * `signingBytes` (src/protocol/connectionSignature.ts), and deriving the
 * host role's endpoint token of a Connection, so that token is never
 * stored: HMAC-SHA-256 (RFC 2104) under a key derived from the seed with
 * HKDF-SHA-256 (RFC 5869, info "beachball endpoint-token v1").
 *
 * The seed comes from a `SeedSource` each time it is needed (the embedded
 * host reads the key file, ./connectionKeyFile.ts; workerd a secret
 * binding); its public key must be the manifest's verification key for the
 * signing key ID, or signing refuses.
 * Must never: store, log or put into an error the seed, a derived key or a
 * token; sign with a key clients could not verify.
 */
import { hkdf } from "@noble/hashes/hkdf.js";
import { hmac } from "@noble/hashes/hmac.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex, utf8ToBytes } from "@noble/hashes/utils.js";
import { connectionPublicKeyOf, signConnectionDocument } from "../protocol/connectionSignature.ts";
import type { SignedKind } from "../protocol/connection.ts";
import { BeachballError } from "../protocol/errors.ts";

/** Returns the signing key's seed (standard base64 of 32 bytes), resolved now. Throws an Error saying why it cannot. */
export type SeedSource = () => string;

/** A document signed with the connection-signing key. */
export interface SignedDocument<P> {
  payload: P;
  keyId: string;
  signature: string;
}

/** See the module header. Every method throws INTERNAL (naming no secret) when the key cannot be resolved or does not match. */
export interface ConnectionSigner {
  /** The signing key's ID. */
  readonly keyId: string;
  /** Signs `payload` as a document of `kind`. */
  sign<P>(kind: SignedKind, payload: P): SignedDocument<P>;
  /** The host role's endpoint token of Connection `connectionId` (`bbx_` + 64 hex digits), the same every time. */
  hostEndpointToken(connectionId: string): string;
}

/**
 * A signer for key `keyId` whose public key must be `publicKey` (base64).
 * `check()` resolves the key once and throws an Error when it does not
 * match (the scheduler calls it at start, so a misconfiguration stops it
 * there instead of at the first grant).
 */
export function connectionSigner(
  keyId: string,
  publicKey: string,
  seedOf: SeedSource,
): ConnectionSigner & { check(): void } {
  let checkedSeed: string | null = null;
  let tokenKey: Uint8Array | null = null;
  const resolve = (): string => {
    let seed: string;
    try {
      seed = seedOf().trim();
      if (seed !== checkedSeed) {
        if (connectionPublicKeyOf(seed) !== publicKey)
          throw new Error(`its public key is not the verification key listed for ${keyId}`);
        checkedSeed = seed;
        tokenKey = hkdf(
          sha256,
          Buffer.from(seed, "base64"),
          utf8ToBytes("beachball"),
          utf8ToBytes("beachball endpoint-token v1"),
          32,
        );
      }
    } catch (e) {
      throw new BeachballError(
        "INTERNAL",
        `the connection-signing key ${keyId} cannot be used: ${(e as Error).message}`,
      );
    }
    return seed;
  };
  return {
    keyId,
    check() {
      try {
        resolve();
      } catch (e) {
        throw new Error((e as Error).message);
      }
    },
    sign<P>(kind: SignedKind, payload: P): SignedDocument<P> {
      return signConnectionDocument(kind, payload, keyId, resolve());
    },
    hostEndpointToken(connectionId: string): string {
      resolve();
      return `bbx_${bytesToHex(hmac(sha256, tokenKey!, utf8ToBytes(`host\u0000${connectionId}`)))}`;
    },
  };
}
