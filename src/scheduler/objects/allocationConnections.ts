/**
 * An allocation's connection grants (spec "Data path" step 2, "Revocation
 * and replacement"): issued through its Network for the current generation
 * of a ready allocation only, revoked on the owner's request; each recorded
 * as an event of the allocation. That a grant may exist for a generation is
 * recorded before the Network is asked, so a later replacement waits until
 * the Network confirms the old generation's grants are gone
 * (CONNECTIONS_NOT_FENCED).
 * Must never: issue a grant for another generation than the current one, or
 * ask the Network before the grant generation is stored.
 */
import { BeachballError } from "../../protocol/errors.ts";
import type { ConnectionGrantBody, ConnectionGrantResponse } from "../../protocol/connection.ts";
import { grantRefusal, noChange } from "../../domain/reconcile.ts";
import type { AllocationStore } from "./allocationStore.ts";

/**
 * Issues a connection grant for the current generation. Only the owner may
 * (NOT_FOUND otherwise); the allocation must be ready and not being
 * released (INVALID_STATE), of the expected generation if the body names
 * one (STALE_GENERATION). Throws what the Network throws (FORBIDDEN,
 * RATE_LIMITED, CONNECTIVITY_UNAVAILABLE, STALE_GENERATION).
 */
export async function requestConnectionGrant(
  store: AllocationStore,
  identity: string,
  body: ConnectionGrantBody,
): Promise<ConnectionGrantResponse> {
  const r = store.owned(identity).rec;
  const refused = grantRefusal(r, body.generation);
  if (refused) throw new BeachballError(refused.code, refused.message);
  if (r.grantGeneration < r.generation) store.persist(noChange({ grantGeneration: r.generation }));
  const res = await store.env.Network.get(r.networkId!).issueGrant({
    allocationId: r.allocationId,
    tenant: r.identity,
    workloadClass: r.workloadClass,
    generation: r.generation,
    hostId: r.hostId!,
    placementId: r.placementId!,
    clientPublicKey: body.clientPublicKey,
    transport: body.transport,
    ports: body.ports,
    ttlSeconds: body.ttlSeconds,
  });
  const g = res.grant.payload;
  store.persist({
    ...noChange(),
    events: [
      {
        type: "connection.granted",
        data: {
          grantId: g.grantId,
          generation: g.generation,
          transport: g.transport,
          ports: g.ports,
          expiresAt: new Date(g.expiresAtMs).toISOString(),
        },
      },
    ],
  });
  store.postIndexView();
  return res;
}

/** Revokes one of this allocation's grants (owner only, else NOT_FOUND; idempotent). Throws NOT_FOUND for an unknown grant. */
export async function revokeConnectionGrant(store: AllocationStore, identity: string, grantId: string): Promise<void> {
  const r = store.owned(identity).rec;
  if (!r.networkId) throw new BeachballError("NOT_FOUND", "no such grant for this allocation");
  const changed = await store.env.Network.get(r.networkId).revokeGrant(r.allocationId, grantId);
  if (changed) {
    store.persist({
      ...noChange(),
      events: [{ type: "connection.revoked", reason: "CLIENT_REVOKED", data: { grantId } }],
    });
    store.postIndexView();
  }
}
