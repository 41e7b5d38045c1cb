/**
 * The signed documents of one connection grant (spec "Data path" step 2:
 * "signs the grant, signs a relay map, and mints per-role relay tokens"):
 * the grant, the relay map (valid as long as the grant) and relay tokens
 * for one role, each relay's token short-lived (the manifest's
 * relayTokenTtlSeconds, never past the grant). Shapes and signed bytes are
 * src/protocol/connection.ts's. Pure apart from the signer port.
 * Must never: sign a grant spanning more than one generation and host
 * peer, or a relay token outliving its grant.
 */
import type {
  GrantPayload,
  RelayMapPayload,
  RelayRole,
  RelayTokenPayload,
  SignedGrant,
  SignedRelayMap,
  SignedRelayToken,
} from "../../protocol/connection.ts";
import type { ConnectionSettings } from "../connectionSettings.ts";
import type { ConnectionSigner } from "../connectionSigner.ts";

/** Signs the grant `payload` and the relay map that goes with it (same lifetime). */
export function signGrant(
  signer: ConnectionSigner,
  settings: ConnectionSettings,
  payload: GrantPayload,
): { grant: SignedGrant; relayMap: SignedRelayMap } {
  const map: RelayMapPayload = {
    v: 1,
    relays: [...settings.relays],
    issuedAtMs: payload.issuedAtMs,
    expiresAtMs: payload.expiresAtMs,
  };
  return { grant: signer.sign("grant", payload), relayMap: signer.sign("relay-map", map) };
}

/**
 * One relay token per relay of the deployment for `role` of grant
 * `grantId`, issued at `nowMs`, expiring after the relay-token lifetime or
 * at `grantExpiresAtMs`, whichever is first. Empty once the grant expired.
 */
export function relayTokens(
  signer: ConnectionSigner,
  settings: ConnectionSettings,
  grantId: string,
  role: RelayRole,
  grantExpiresAtMs: number,
  nowMs: number,
): Record<string, SignedRelayToken> {
  const out: Record<string, SignedRelayToken> = {};
  const expiresAtMs = Math.min(nowMs + settings.relayTokenTtlMs, grantExpiresAtMs);
  if (expiresAtMs <= nowMs) return out;
  for (const r of settings.relays) {
    const t: RelayTokenPayload = {
      v: 1,
      relayId: r.relayId,
      grantId,
      role,
      limits: { ...settings.relayLimits },
      issuedAtMs: nowMs,
      expiresAtMs,
    };
    out[r.relayId] = signer.sign("relay-token", t);
  }
  return out;
}
