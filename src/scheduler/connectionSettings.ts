/**
 * The manifest's private-networking section (manifestSchema.ts,
 * `connections`) checked beyond its schema and turned into the settings the
 * objects read: the parsed ULA /48, relays, STUN servers, token lifetimes
 * and the grant policy per workload class. Spec "Networks, addresses, and grants",
 * "Packet relays"; docs/manifest.md.
 * Pure (no file access: the signing key is resolved at use by
 * ./connectionSigner.ts), so both hosts use it.
 * Must never: accept a prefix outside fd00::/8, a relay listed twice, a
 * STUN server that is not an IP literal and port, a policy for a workload
 * class the manifest does not declare, a verification key that is not
 * canonical base64 of 32 bytes, or a signing key ID clients could not
 * verify.
 */
import { DEFAULT_GRANT_TTL_SECONDS, type RelayEntry, type RelayLimits } from "../protocol/connection.ts";
import { isVerificationKey } from "../protocol/connectionSignature.ts";
import { formatStunServer, parseStunServers } from "../protocol/stunServers.ts";
import { parseUlaPrefix, type UlaPrefix } from "../domain/network.ts";
import { parsePortRange, type ConnectionPolicy } from "../domain/grants.ts";
import type { DeploymentManifest } from "./manifestSchema.ts";

/** Default relay-token lifetime, seconds (a relay session is re-established with a fresh token). */
export const DEFAULT_RELAY_TOKEN_TTL_SECONDS = 120;

/** The settings the Network, Host and Connection objects read (see the module header). */
export interface ConnectionSettings {
  ula: UlaPrefix;
  signingKeyId: string;
  /** Path of the signing key's file (a reference: read when signing, never stored). */
  signingKeyFile: string;
  /** Key ID → base64 public key. */
  verificationKeys: Readonly<Record<string, string>>;
  relays: readonly RelayEntry[];
  /** STUN servers handed to clients in grant responses, canonical "IPv4:PORT" / "[IPv6]:PORT" (at most MAX_STUN_SERVERS). */
  stunServers: readonly string[];
  relayLimits: RelayLimits;
  relayTokenTtlMs: number;
  maxTtlSeconds: number;
  defaultTtlSeconds: number;
  policyRevision: number;
  /** The grant policy of `workloadClass`, or null when it allows no grant. */
  policyFor(workloadClass: string): ConnectionPolicy | null;
}

/**
 * The settings of `manifest`, or null when it has no `connections`
 * section. Throws an Error naming the field for: an invalid ULA prefix, a
 * malformed or reversed port range, a malformed STUN server (or more than
 * MAX_STUN_SERVERS), a policy for an undeclared workload class, a relay ID listed twice, a verification key that is not canonical
 * base64 of 32 bytes, or a signing key ID missing from `verificationKeys`.
 */
export function connectionSettings(manifest: DeploymentManifest): ConnectionSettings | null {
  const c = manifest.connections;
  if (!c) return null;
  const ula = parseUlaPrefix(c.ulaPrefix);
  if (typeof ula === "string") throw new Error(`/connections/ulaPrefix: ${ula}`);
  for (const [id, key] of Object.entries(c.verificationKeys))
    if (!isVerificationKey(key))
      throw new Error(`/connections/verificationKeys/${id}: not canonical base64 of a 32-byte Ed25519 public key`);
  if (!Object.hasOwn(c.verificationKeys, c.signingKey.keyId))
    throw new Error(
      `/connections/signingKey/keyId: ${c.signingKey.keyId} is not listed in /connections/verificationKeys, so no client or host could verify what it signs`,
    );
  const ids = new Set<string>();
  for (const r of c.relays) {
    if (ids.has(r.relayId)) throw new Error(`/connections/relays: relay ${r.relayId} is listed twice`);
    ids.add(r.relayId);
  }
  const stunServers = parseStunServers(c.stunServers ?? [], "/connections/stunServers").map(formatStunServer);
  const policies: [string, ConnectionPolicy][] = [];
  if (c.grants.default) policies.push(["default", c.grants.default]);
  for (const [name, p] of Object.entries(c.grants.workloadClasses ?? {})) {
    if (!Object.hasOwn(manifest.workloadClasses, name))
      throw new Error(`/connections/grants/workloadClasses/${name}: no such workload class`);
    policies.push([name, p]);
  }
  for (const [name, p] of policies) {
    for (const range of p.ports)
      if (!parsePortRange(range))
        throw new Error(
          `/connections/grants/${name === "default" ? "default" : `workloadClasses/${name}`}/ports: ${JSON.stringify(range)} is not a port (1-65535) or a range LO-HI with LO <= HI`,
        );
  }
  const g = c.grants;
  const perClass = g.workloadClasses ?? {};
  return {
    ula,
    signingKeyId: c.signingKey.keyId,
    signingKeyFile: c.signingKey.file,
    verificationKeys: c.verificationKeys,
    relays: c.relays,
    stunServers,
    relayLimits: c.relayLimits,
    relayTokenTtlMs: (c.relayTokenTtlSeconds ?? DEFAULT_RELAY_TOKEN_TTL_SECONDS) * 1000,
    maxTtlSeconds: g.maxTtlSeconds,
    defaultTtlSeconds: Math.min(g.defaultTtlSeconds ?? DEFAULT_GRANT_TTL_SECONDS, g.maxTtlSeconds),
    policyRevision: g.policyRevision,
    policyFor: (workloadClass) =>
      Object.hasOwn(perClass, workloadClass) ? perClass[workloadClass]! : (g.default ?? null),
  };
}
