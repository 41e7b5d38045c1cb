/**
 * The agent's `restored` message (src/protocol/guestRestored.ts; issue 21,
 * "Suspend / resume" and "Fork"): what the agent sends first on the control
 * channel of a VM restored from a snapshot, built from the placement record
 * the VM now runs as. The guest adds the entropy to its kernel's pool, steps
 * its clock, adopts the identity and answers with a guest_ready for it,
 * which the agent accepts only on an exact match (guestSession.ts), as for a
 * cold boot.
 *
 * Owns: building the message (a fresh 256-bit nonce from the agent's random
 * port, entropy from crypto.getRandomValues, the wall clock from the
 * agent's clock port) and checking it against its schema. The entropy never
 * comes from the random port: a seeded test double there must never become
 * the kernel entropy of a real guest, which would make every fork of a
 * snapshot draw the same numbers. Wiring it into the reconcile of
 * suspend/resume comes later (issue 21's next session). Must never: send a
 * message the schema refuses, or log the nonce.
 */
import { Value } from "@sinclair/typebox/value";
import type { Clock } from "../protocol/clock.ts";
import type { GuestIdentity } from "../protocol/guest.ts";
import { RestoredMessage, type RestoredNetwork } from "../protocol/guestRestored.ts";
import { AgentError } from "./errors.ts";
import { guestIpv6KernelArgs } from "./isolation/guestIpv6.ts";
import type { PlacementRef } from "./placementOps.ts";
import type { AgentRandom } from "./ports.ts";

/** Bytes of entropy the agent hands a restored guest (MIN_RESTORE_ENTROPY_BYTES..MAX_RESTORE_ENTROPY_BYTES; 512 bits). */
export const RESTORE_ENTROPY_BYTES = 64;
/** Bytes of a bootstrap nonce (256 bits, as Prepare makes them). */
const NONCE_BYTES = 32;

/** What the message is built for: the placement record the restored VM runs as. */
export type RestoredPlacement = Pick<PlacementRef, "allocationId" | "placementId" | "generation"> & {
  /** The command's spec; its `ipv6Address` (when present) becomes `network.ipv6Address`. */
  spec: { ipv6Address?: string };
};

/** Options of restoredMessage. */
export interface RestoredOptions {
  /** The fork flag: the caller allowed a payload for a VM that consumed one before the snapshot. */
  payloadAllowed?: boolean;
  /** The new placement's IPv4 (`beachball.ipv4` CIDR and `beachball.gateway` of its network). */
  ipv4?: { cidr: string; gateway: string };
}

/**
 * The `restored` message for `placement` and the identity the agent then
 * waits for (GuestSession's `expected`). `random` gives the nonce, `clock`
 * the wall clock (floored to whole ms). Throws AgentError
 * NETWORK_SETUP_FAILED (subsystem "isolation") when the spec's ipv6Address
 * is not a canonical global or unique-local address, and INTERNAL
 * (subsystem "guest") naming the first field when the schema refuses the
 * message (a placement ID outside [A-Za-z0-9._:-]{1,160}, a clock outside
 * 2020..9999, a malformed IPv4).
 */
export function restoredMessage(
  placement: RestoredPlacement,
  ports: { random: AgentRandom; clock: Clock },
  opts: RestoredOptions = {},
): { message: RestoredMessage; identity: GuestIdentity } {
  guestIpv6KernelArgs(placement.spec.ipv6Address); // the same check as a cold boot's kernel arguments
  const network: RestoredNetwork = {
    ...(opts.ipv4 ? { ipv4Cidr: opts.ipv4.cidr, ipv4Gateway: opts.ipv4.gateway } : {}),
    ...(placement.spec.ipv6Address !== undefined ? { ipv6Address: placement.spec.ipv6Address } : {}),
  };
  const identity: GuestIdentity = {
    allocationId: placement.allocationId,
    placementId: placement.placementId,
    generation: placement.generation,
    nonce: Buffer.from(ports.random.bytes(NONCE_BYTES)).toString("hex"),
  };
  const entropy = crypto.getRandomValues(new Uint8Array(RESTORE_ENTROPY_BYTES));
  const message: RestoredMessage = {
    type: "restored",
    ...identity,
    entropyBase64: Buffer.from(entropy).toString("base64"),
    wallClockMs: Math.floor(ports.clock.wallMs()),
    ...(opts.payloadAllowed !== undefined ? { payloadAllowed: opts.payloadAllowed } : {}),
    ...(Object.keys(network).length ? { network } : {}),
  };
  if (!Value.Check(RestoredMessage, message)) {
    const e = Value.Errors(RestoredMessage, message).First();
    const where = e?.path ?? "";
    // Never the nonce's value in the error: only the path and the rule.
    throw new AgentError("INTERNAL", `restored${where}: ${e?.message ?? "invalid"}`, { subsystem: "guest" });
  }
  return { message, identity };
}
