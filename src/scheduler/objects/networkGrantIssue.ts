/**
 * Steps of the Network's grant issuing (./networkObject.ts, issueGrant;
 * spec "Data path" step 2): the refusal thrown as an error, the grant's
 * payload, and handing the grant to its Connection and Host. The Network
 * keeps the order (admit, ask the Host, record, hand out, confirm) and its
 * rows; these steps hold no state.
 * Must never: put a token in the payload or the Host's command (only its
 * digest goes to the Connection), or sign for more than one generation and
 * host peer.
 */
import { BeachballError } from "../../protocol/errors.ts";
import type { GrantPayload } from "../../protocol/connection.ts";
import type { GrantRefusal } from "../../domain/grantIssue.ts";
import { tokenDigest } from "../manifestSchema.ts";
import type { SchedulerEnv } from "../env.ts";
import type { ConnectionSettings } from "../connectionSettings.ts";
import type { ConnectionSigner } from "../connectionSigner.ts";
import type { signGrant } from "./grantDocuments.ts";
import type { IssueGrant } from "./networkObject.ts";

/** The signed grant and relay map of one grant. */
export type GrantDocuments = ReturnType<typeof signGrant>;

/** A grant's identifiers and secrets, chosen once it is admitted (the client token is handed out once, never stored). */
export interface NewGrant {
  grantId: string;
  connectionId: string;
  clientToken: string;
  /** When the grant expires, ms since the epoch. */
  expiresAtMs: number;
}

/** Throws `r` as a BeachballError with its code (and retry hint), if there is one. */
export function refuse(r: GrantRefusal | null): void {
  if (r)
    throw new BeachballError(
      r.code,
      r.message,
      r.retryAfterSeconds === undefined ? undefined : { retryAfterSeconds: r.retryAfterSeconds },
    );
}

/** The payload of grant `ids` for `req` in Network `networkId`, issued at `nowMs` (ms since the epoch). */
export function grantPayload(
  req: IssueGrant,
  networkId: string,
  peers: { hostPublicKey: string; clientAddress: string; allocationAddress: string },
  ids: NewGrant,
  nowMs: number,
  settings: ConnectionSettings,
): GrantPayload {
  return {
    v: 1,
    grantId: ids.grantId,
    tenant: req.tenant,
    networkId,
    allocationId: req.allocationId,
    generation: req.generation,
    hostId: req.hostId,
    clientPublicKey: req.clientPublicKey,
    hostPublicKey: peers.hostPublicKey,
    clientAddress: peers.clientAddress,
    allocationAddress: peers.allocationAddress,
    transport: req.transport,
    ports: [...req.ports],
    policyRevision: settings.policyRevision,
    issuedAtMs: nowMs,
    expiresAtMs: ids.expiresAtMs,
  };
}

/** Opens grant `ids`'s Connection (token digests only), then queues its apply at the Host. */
export async function openAndApply(
  env: SchedulerEnv,
  networkId: string,
  req: IssueGrant,
  ids: NewGrant,
  docs: GrantDocuments,
  signer: ConnectionSigner,
): Promise<void> {
  const { grantId, connectionId, expiresAtMs } = ids;
  await env.Connection.get(connectionId).open({
    grantId,
    expiresAtMs,
    clientTokenDigest: tokenDigest(ids.clientToken),
    hostTokenDigest: tokenDigest(signer.hostEndpointToken(connectionId)),
    hostId: req.hostId,
  });
  await env.Host.get(req.hostId).configureConnection({
    action: "apply",
    grantId,
    networkId,
    allocationId: req.allocationId,
    placementId: req.placementId,
    generation: req.generation,
    connectionId,
    expiresAtMs,
    grant: docs.grant,
    relayMap: docs.relayMap,
  });
}
