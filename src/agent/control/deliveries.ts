/**
 * Bootstrap deliveries (spec "The bootstrap payload"): hands a payload that
 * rode in a poll response to the connected guest, in memory, and turns the
 * guest's receipt into a delivery acknowledgement. A repeated delivery ID
 * returns the earlier digest without touching the guest; only the ID and
 * digest are persisted.
 * Must never: log, persist or re-send the payload bytes.
 */
import { createHash } from "node:crypto";
import type { BootstrapDelivery, DeliveryAck } from "../../protocol/agent.ts";
import type { AgentStore } from "../store.ts";
import type { GuestSession } from "../guestSession.ts";

/** How long the guest has to confirm a delivery, ms. */
export const GUEST_DELIVERY_TIMEOUT_MS = 20_000;

/** Delivers `d` to `session` (null: no connected guest) and returns the acknowledgement to send. */
export async function deliverBootstrap(
  store: AgentStore,
  d: BootstrapDelivery,
  session: GuestSession | null,
): Promise<DeliveryAck> {
  const base = { deliveryId: d.deliveryId, placementId: d.placementId, generation: d.generation };
  const earlier = store.deliveryDigest(d.deliveryId);
  if (earlier) return { ...base, result: "consumed", digest: earlier };
  const p = store.placement(d.placementId);
  if (!p || p.generation !== d.generation || p.desired === "absent" || !session?.connected)
    return { ...base, result: "guest_not_connected" };
  const expected = `sha256:${createHash("sha256").update(Buffer.from(d.payloadBase64, "base64")).digest("hex")}`;
  const r = await session.deliver(d.deliveryId, d.contentType, d.payloadBase64, GUEST_DELIVERY_TIMEOUT_MS);
  if (r.result === "consumed" && r.digest === expected) {
    store.recordDelivery(d.deliveryId, d.placementId, r.digest);
    return { ...base, result: "consumed", digest: r.digest };
  }
  return { ...base, result: r.result === "guest_not_connected" ? "guest_not_connected" : "rejected" };
}
