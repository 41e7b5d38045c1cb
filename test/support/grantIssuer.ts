/**
 * TEST SUPPORT, not a product path: signs connection grants, relay maps and
 * relay tokens exactly as src/protocol/connection.ts defines them, with a
 * throwaway Ed25519 key, standing in for the scheduler's Network object until
 * `POST /v1/allocations/{id}/connection-grants` exists on main.
 *
 * Owns: the test key and ID generation. Must never: be imported by src/
 * (only tests, test/support and bench/ use it).
 */
import { generateKeyPairSync, randomBytes } from "node:crypto";
import type {
  GrantPayload,
  GrantTransport,
  RelayEntry,
  RelayRole,
  SignedGrant,
  SignedRelayMap,
  SignedRelayToken,
} from "../../src/protocol/connection.ts";
import { connectionPublicKeyOf, signConnectionDocument } from "../../src/protocol/connectionSignature.ts";

/** A fresh identifier `<prefix>_<32 hex>`. */
export const testId = (prefix: string) => `${prefix}_${randomBytes(16).toString("hex")}`;

/** What a test grant needs; the rest is filled in. */
export interface TestGrantFields {
  allocationId: string;
  generation: number;
  hostId: string;
  hostPublicKey: string;
  clientPublicKey: string;
  clientAddress: string;
  allocationAddress: string;
  transport?: GrantTransport;
  ports: number[];
  tenant?: string;
  networkId?: string;
  grantId?: string;
}

/** The test issuer. */
export class TestGrantIssuer {
  /** Base64 of the Ed25519 seed (test only). */
  readonly seed: string;
  readonly publicKey: string;

  /** A fresh key, or the given seed (base64), so several processes can sign as one issuer. */
  constructor(
    readonly keyId = "test-issuer",
    seed?: string,
  ) {
    this.seed =
      seed ??
      Buffer.from(
        generateKeyPairSync("ed25519").privateKey.export({ format: "der", type: "pkcs8" }).subarray(16),
      ).toString("base64");
    this.publicKey = connectionPublicKeyOf(this.seed);
  }

  /** The verification keys a host or proxy is configured with to trust this issuer. */
  verificationKeys(): Map<string, string> {
    return new Map([[this.keyId, this.publicKey]]);
  }

  /** `KEYID=BASE64`, the form flags and config files take. */
  verificationKeyText(): string {
    return `${this.keyId}=${this.publicKey}`;
  }

  /** A signed grant valid from `nowMs` for `ttlMs`. */
  grant(f: TestGrantFields, nowMs: number, ttlMs: number): SignedGrant {
    const payload: GrantPayload = {
      v: 1,
      grantId: f.grantId ?? testId("grt"),
      tenant: f.tenant ?? "test-tenant",
      networkId: f.networkId ?? testId("net"),
      allocationId: f.allocationId,
      generation: f.generation,
      hostId: f.hostId,
      clientPublicKey: f.clientPublicKey,
      hostPublicKey: f.hostPublicKey,
      clientAddress: f.clientAddress,
      allocationAddress: f.allocationAddress,
      transport: f.transport ?? "tcp",
      ports: f.ports,
      policyRevision: 0,
      issuedAtMs: nowMs,
      expiresAtMs: nowMs + ttlMs,
    };
    return signConnectionDocument("grant", payload, this.keyId, this.seed);
  }

  /** A signed relay map. */
  relayMap(relays: RelayEntry[], nowMs: number, ttlMs: number): SignedRelayMap {
    return signConnectionDocument(
      "relay-map",
      { v: 1 as const, relays, issuedAtMs: nowMs, expiresAtMs: nowMs + ttlMs },
      this.keyId,
      this.seed,
    );
  }

  /** A signed relay token. */
  relayToken(relayId: string, grantId: string, role: RelayRole, nowMs: number, ttlMs: number): SignedRelayToken {
    const payload = {
      v: 1 as const,
      relayId,
      grantId,
      role,
      limits: { maxBytes: 1 << 30, maxBytesPerSecond: 64 << 20, idleTimeoutMs: 60_000 },
      issuedAtMs: nowMs,
      expiresAtMs: nowMs + ttlMs,
    };
    return signConnectionDocument("relay-token", payload, this.keyId, this.seed);
  }
}
