/**
 * Shapes the Host object exchanges with its callers (registration,
 * reservation, views, observations, placement status), the agent facts it
 * stores, and its prepared statements. Pure declarations; the behaviour is
 * in hostObject.ts.
 */
import type { HostView } from "../../protocol/views.ts";
import { and, eq, ne, sql } from "drizzle-orm";
import type { ObjectDb } from "../runtime/drizzle.ts";
import type { Resources } from "../../domain/capacity.ts";
import type { HostFacts } from "../../domain/hostConditions.ts";
import type { Capacity } from "../../protocol/api.ts";
import {
  MAX_COMMANDS_PER_POLL,
  type CommandSpec,
  type PlacementSpec,
  type PlacementUpdate,
} from "../../protocol/agent.ts";
import { commandTable, deliveryTable, hostTable, placementTable } from "./hostSchema.ts";

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

/** Agent-reported facts before the first envelope. */
export const NO_FACTS: AgentFacts = {
  clockSkewMs: 0,
  inventory: null,
  volumesNearlyFull: false,
  overlapUntilMs: 0,
  vmmStartFailing: false,
  cachedImages: [],
};

/** The part of HostFacts that comes from agent reports (stored as JSON), plus the cached image digests. */
export type AgentFacts = Pick<
  HostFacts,
  "clockSkewMs" | "inventory" | "volumesNearlyFull" | "overlapUntilMs" | "vmmStartFailing"
> & { cachedImages?: string[] };

/** Where an allocation's placement stands, for host-loss detection (src/domain/reconcile.ts). */
export type { PlacementStatus } from "../../domain/reconcile.ts";

/** A bootstrap delivery's outcome as the controller sees it. */
export type DeliveryOutcome =
  | { result: "consumed"; digest: string }
  | { result: "guest_not_connected" | "rejected" | "timeout" };

/** Builds the Host object's prepared statements (once per storage; every one takes the host ID as `obj`). */
export function prepareHostQueries(db: ObjectDb) {
  const obj = sql.placeholder("obj");
  return {
    host: db.select().from(hostTable).where(eq(hostTable.obj, obj)).prepare(),
    consuming: db
      .select()
      .from(placementTable)
      .where(and(eq(placementTable.obj, obj), ne(placementTable.state, "absent")))
      .prepare(),
    byId: db
      .select()
      .from(placementTable)
      .where(and(eq(placementTable.obj, obj), eq(placementTable.placementId, sql.placeholder("id"))))
      .prepare(),
    byKey: db
      .select()
      .from(placementTable)
      .where(and(eq(placementTable.obj, obj), eq(placementTable.reservationKey, sql.placeholder("key"))))
      .prepare(),
    pending: db
      .select()
      .from(commandTable)
      .where(and(eq(commandTable.obj, obj), eq(commandTable.status, "pending")))
      .orderBy(commandTable.createdAtMs)
      .limit(MAX_COMMANDS_PER_POLL)
      .prepare(),
    delivery: db
      .select()
      .from(deliveryTable)
      .where(and(eq(deliveryTable.obj, obj), eq(deliveryTable.deliveryId, sql.placeholder("id"))))
      .prepare(),
  };
}

/** A registered capacity as a resource vector (slots = maxPlacements). */
export const toRes = (c: Capacity): Resources => ({
  cpuMillis: c.cpuMillis,
  memoryMiB: c.memoryMiB,
  ephemeralDiskMiB: c.ephemeralDiskMiB,
  slots: c.maxPlacements,
});
