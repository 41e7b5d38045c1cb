/**
 * Shapes the Host object exchanges with its callers (registration,
 * reservation, views, observations, placement status, delivery outcomes)
 * and two pure conversions. Declarations only: no storage, no queries (the
 * Host's rows are read and written in ./hostStore.ts; its rules are in
 * src/domain/host*.ts; the object is ./hostObject.ts).
 */
import type { HostView } from "../../protocol/views.ts";
import { placementDiskMiB, type Resources } from "../../domain/capacity.ts";
import type { Capacity } from "../../protocol/api.ts";
import type { CommandSpec, PlacementSpec, PlacementUpdate } from "../../protocol/agent.ts";

/** Registration facts from enrollment. */
export interface HostRegistration {
  hostId: string;
  credentialDigest: string;
  enrollDigest: string;
  capacity: Capacity;
  reserve: Capacity;
  region: string;
  architecture: string;
  labels: Record<string, string>;
  agentProtocolVersion: string;
  vmmDriver: string;
  autoActivate: boolean;
}

/** A reservation request from an Allocation object. */
export interface ReserveRequest {
  key: string;
  allocationId: string;
  generation: number;
  placementId: string;
  /** What the placement's commands carry (commandSpecOf). */
  spec: CommandSpec;
}

/**
 * The spec a placement's commands carry: the allocation's resolved `spec`
 * plus its private IPv6 `address` when it has one (spec "Networks,
 * addresses, and grants": one address per allocation, the same for every
 * generation). Pure.
 */
export function commandSpecOf(spec: PlacementSpec, address: string | null): CommandSpec {
  return address ? { ...spec, ipv6Address: address } : { ...spec };
}

/**
 * What a placement of `spec` reserves on its host (spec "Reservation"): its
 * CPU, memory and one slot, and its ephemeral disk plus, for a suspendable
 * VM (issue 21), its memory again: the RAM file it keeps on the host's disk
 * and the snapshot a suspend leaves there. Pure.
 */
export function reservedResources(spec: PlacementSpec): Resources {
  return {
    cpuMillis: spec.cpuMillis,
    memoryMiB: spec.memoryMiB,
    ephemeralDiskMiB: placementDiskMiB(spec),
    slots: 1,
  };
}

/**
 * What a pause, suspend or resume request to a Host answered (issue 21):
 * `done` when the agent already confirmed the state, else `done: false` (the
 * command is queued); or a refusal with its stable code.
 */
export type TransitionAnswer = { done: boolean } | { refused: string };

/** Reservation outcome. */
export type ReserveResult = { accepted: true; placementId: string } | { accepted: false; code: string };

/** The operator's view of a host (src/protocol/views.ts). */
export type { HostView };

/** Observation forwarded to the owning Allocation object's inbox. */
export interface ObservationMessage {
  hostId: string;
  placementId: string;
  generation: number;
  state: PlacementUpdate["state"];
  errorCode: string | null;
  workloadExitCode: number | null;
  at: string;
}

/** Where an allocation's placement stands, for host-loss detection (src/domain/reconcile.ts). */
export type { PlacementStatus } from "../../domain/reconcile.ts";

/** A bootstrap delivery's outcome as the controller sees it. */
export type DeliveryOutcome =
  | { result: "consumed"; digest: string }
  | { result: "guest_not_connected" | "rejected" | "timeout" };

/** A registered capacity as a resource vector (slots = maxPlacements). */
export const toRes = (c: Capacity): Resources => ({
  cpuMillis: c.cpuMillis,
  memoryMiB: c.memoryMiB,
  ephemeralDiskMiB: c.ephemeralDiskMiB,
  slots: c.maxPlacements,
});
