/**
 * Test support for the relay: an Ed25519 signer that mints relay tokens as
 * the scheduler would (src/protocol/connection.ts signingBytes), and a
 * recording RelaySocket double for driving the hub without a network.
 *
 * Owns: nothing in production. Must never: be imported by the relay's
 * running code (only tests, benches and test support).
 */
import { createPublicKey, generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import {
  signingBytes,
  type RelayLimits,
  type RelayRole,
  type RelayTokenPayload,
  type SignedRelayToken,
} from "../protocol/connection.ts";
import type { RelaySocket } from "./session.ts";

/** A signing key as the scheduler holds one. */
export interface TokenSigner {
  keyId: string;
  /** Raw 32-byte public key. */
  publicKey: Uint8Array;
  /** Standard base64 of publicKey (the relay config's form). */
  publicKeyB64: string;
  /** Signs `payload` into a SignedRelayToken. */
  sign(payload: RelayTokenPayload): SignedRelayToken;
}

/** A fresh Ed25519 signer with key ID `keyId`. */
export function makeSigner(keyId: string): TokenSigner {
  const { privateKey }: { privateKey: KeyObject } = generateKeyPairSync("ed25519");
  const spki = createPublicKey(privateKey).export({ format: "der", type: "spki" });
  const publicKey = new Uint8Array(spki.subarray(spki.length - 32));
  return {
    keyId,
    publicKey,
    publicKeyB64: Buffer.from(publicKey).toString("base64"),
    sign: (payload) => ({
      payload,
      keyId,
      signature: sign(null, signingBytes("relay-token", payload), privateKey).toString("base64"),
    }),
  };
}

/** Generous limits for tests that are not about limits. */
export const TEST_LIMITS: RelayLimits = { maxBytes: 1 << 30, maxBytesPerSecond: 100_000_000, idleTimeoutMs: 60_000 };

/** A grant ID in the protocol's form, from a small number. */
export function grantId(n: number): string {
  return `grt_${n.toString(16).padStart(32, "0")}`;
}

/** A token payload for `relayId`, valid for 60 s from `wallMs`; `over` replaces fields. */
export function tokenPayload(
  relayId: string,
  role: RelayRole,
  grant: string,
  wallMs: number,
  over: Partial<RelayTokenPayload> = {},
): RelayTokenPayload {
  return {
    v: 1,
    relayId,
    grantId: grant,
    role,
    limits: TEST_LIMITS,
    issuedAtMs: wallMs,
    expiresAtMs: wallMs + 60_000,
    ...over,
  };
}

/** A RelaySocket that records what the hub does to it. */
export class RecordingSocket implements RelaySocket {
  readonly datagrams: Uint8Array[] = [];
  readonly texts: unknown[] = [];
  pings = 0;
  closedWith: { code: number; reason: string } | null = null;
  /** When false, sendDatagram reports a dropped frame (backpressure). */
  accepting = true;

  constructor(readonly remoteAddress = "192.0.2.1") {}

  sendDatagram(frame: Uint8Array): boolean {
    if (!this.accepting) return false;
    this.datagrams.push(frame.slice());
    return true;
  }
  sendText(text: string): void {
    this.texts.push(JSON.parse(text));
  }
  ping(): void {
    this.pings++;
  }
  close(code: number, reason: string): void {
    this.closedWith ??= { code, reason };
  }
}
