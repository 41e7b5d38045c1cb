/**
 * The messages each object class receives through its inbox, one typed
 * union per receiving class (TypeBox, so the runtime checks every stored
 * message before the receiver sees it, and the compiler rejects a post of a
 * kind the receiver does not know). Spec "Worker and Durable Objects",
 * "Messages"; docs/architecture.md, "The object runtime".
 * Must never: carry a secret or a bootstrap payload (deliveries travel by
 * call, in memory only).
 */
import { Type, type Static } from "@sinclair/typebox";
import { AllocationView } from "../../protocol/api.ts";
import { PLACEMENT_OBSERVED_STATES, StartOrigin, VmExit } from "../../protocol/agent.ts";
import type { AllocationInput } from "../../domain/reconcile.ts";
import type { Advertisement } from "../../domain/placement.ts";

const Id = Type.String({ minLength: 1, maxLength: 200 });
const Ms = Type.Integer({ minimum: 0 });

/** What an Allocation receives: observations forwarded by its Host, consumed deliveries, capacity wake-ups from the directory, and its Network's word that a closed generation's grants are gone. */
export const AllocationMessage = Type.Union([
  Type.Object(
    {
      kind: Type.Literal("observation"),
      hostId: Id,
      placementId: Id,
      generation: Type.Integer({ minimum: 1 }),
      state: Type.Union(PLACEMENT_OBSERVED_STATES.map((s) => Type.Literal(s))),
      errorCode: Type.Union([Type.String({ maxLength: 64 }), Type.Null()]),
      workloadExitCode: Type.Union([Type.Integer(), Type.Null()]),
      /** With VM_EXITED: the agent's diagnosis of the exit. */
      exit: Type.Optional(VmExit),
      /** How a templated class's placement came to run (issue 21, "Templates"). */
      start: Type.Optional(StartOrigin),
      at: Type.String({ maxLength: 40 }),
    },
    { additionalProperties: false },
  ),
  Type.Object(
    {
      kind: Type.Literal("delivery_consumed"),
      deliveryId: Id,
      generation: Type.Integer({ minimum: 1 }),
      digest: Type.String({ maxLength: 80 }),
    },
    { additionalProperties: false },
  ),
  Type.Object({ kind: Type.Literal("capacity_available"), hostId: Id }, { additionalProperties: false }),
  Type.Object(
    { kind: Type.Literal("connections_fenced"), generation: Type.Integer({ minimum: 1 }) },
    { additionalProperties: false },
  ),
]);
/** What an Allocation receives. */
export type AllocationMessage = Static<typeof AllocationMessage>;
// The decoded union is exactly what the pure reconcile rules take.
const _allocationMessageIsInput: (m: AllocationMessage) => AllocationInput = (m) => m;
void _allocationMessageIsInput;

/** What the AllocationIndex receives: the latest view of an allocation with its version (the index never stores an older one over a newer), or its purge after retention. */
export const IndexMessage = Type.Union([
  // version: the allocation's last event sequence number when the view was taken (strictly increasing between posted views; absent from messages of earlier releases).
  Type.Object(
    {
      kind: Type.Literal("upsert"),
      identity: Id,
      view: AllocationView,
      version: Type.Optional(Type.Integer({ minimum: 0 })),
    },
    { additionalProperties: false },
  ),
  Type.Object({ kind: Type.Literal("purge"), allocationId: Id }, { additionalProperties: false }),
]);
/** What the AllocationIndex receives. */
export type IndexMessage = Static<typeof IndexMessage>;

/** What the RunQueue receives: the latest view of a run's allocation (posted by the Allocation with each view it posts to the index; issue 22). */
export const RunQueueMessage = Type.Object(
  { kind: Type.Literal("allocation"), allocationId: Id, view: AllocationView },
  { additionalProperties: false },
);
/** What the RunQueue receives. */
export type RunQueueMessage = Static<typeof RunQueueMessage>;

/**
 * What Usage receives (issue 22): an allocation generation's VM observed
 * running (with what it holds), and the same generation observed absent or
 * ended by fencing. Times are the scheduler's, ms since the epoch.
 */
export const UsageMessage = Type.Union([
  Type.Object(
    {
      kind: Type.Literal("vm_started"),
      allocationId: Id,
      generation: Type.Integer({ minimum: 1 }),
      tenant: Id,
      workloadClass: Type.String({ maxLength: 64 }),
      hostId: Id,
      cpuMillis: Type.Integer({ minimum: 0 }),
      memoryMiB: Type.Integer({ minimum: 0 }),
      atMs: Ms,
    },
    { additionalProperties: false },
  ),
  Type.Object(
    {
      kind: Type.Literal("vm_ended"),
      allocationId: Id,
      generation: Type.Integer({ minimum: 1 }),
      atMs: Ms,
      /** The allocation ended: its budget reservation is released. */
      terminal: Type.Optional(Type.Boolean()),
    },
    { additionalProperties: false },
  ),
]);
/** What Usage receives. */
export type UsageMessage = Static<typeof UsageMessage>;

/** What the Leases object receives (issue 22): activity on a lease's VM (a connection grant issued for it), or the VM's allocation ended. */
export const LeaseMessage = Type.Union([
  Type.Object({ kind: Type.Literal("activity"), allocationId: Id, atMs: Ms }, { additionalProperties: false }),
  Type.Object({ kind: Type.Literal("allocation_ended"), allocationId: Id, atMs: Ms }, { additionalProperties: false }),
]);
/** What the Leases object receives. */
export type LeaseMessage = Static<typeof LeaseMessage>;

/** What Admission receives: an allocation stopped counting as active (terminal), or as retained (purged). */
export const AdmissionMessage = Type.Union([
  Type.Object({ kind: Type.Literal("allocation_terminal"), allocationId: Id }, { additionalProperties: false }),
  Type.Object({ kind: Type.Literal("allocation_purged"), allocationId: Id }, { additionalProperties: false }),
]);
/** What Admission receives. */
export type AdmissionMessage = Static<typeof AdmissionMessage>;

/** What Operations receives: an alert, deduplicated by `alertId`. */
export const OperationsMessage = Type.Object(
  {
    kind: Type.Literal("alert"),
    alertId: Id,
    type: Type.String({ maxLength: 80 }),
    subject: Type.String({ maxLength: 200 }),
    reason: Type.String({ maxLength: 80 }),
    atMs: Ms,
  },
  { additionalProperties: false },
);
/** What Operations receives. */
export type OperationsMessage = Static<typeof OperationsMessage>;

const Free = Type.Object(
  { cpuMillis: Type.Integer(), memoryMiB: Type.Integer(), ephemeralDiskMiB: Type.Integer(), slots: Type.Integer() },
  { additionalProperties: false },
);

/** A host's advertisement as the directory receives it (the domain's `Advertisement`). */
export const AdvertisementSchema = Type.Object(
  {
    hostId: Id,
    revision: Type.Integer({ minimum: 0 }),
    adminState: Type.Union([Type.Literal("active"), Type.Literal("draining"), Type.Literal("disabled")]),
    heartbeatAtMs: Type.Union([Ms, Type.Null()]),
    region: Type.String({ maxLength: 64 }),
    architecture: Type.String({ maxLength: 32 }),
    labels: Type.Record(Type.String({ maxLength: 63 }), Type.String({ maxLength: 256 }), { maxProperties: 32 }),
    agentProtocolVersion: Type.String({ maxLength: 16 }),
    isolationHealthy: Type.Boolean(),
    unschedulable: Type.Array(Type.String({ maxLength: 64 }), { maxItems: 16 }),
    free: Free,
    cachedImages: Type.Array(Type.String({ maxLength: 80 }), { maxItems: 64 }),
  },
  { additionalProperties: false },
);
const _adIsDomain: (a: Static<typeof AdvertisementSchema>) => Advertisement = (a) => a;
void _adIsDomain;

/** What the HostDirectory receives: advertisements (newer revisions win). */
export const DirectoryMessage = Type.Object(
  { kind: Type.Literal("advertisement"), ad: AdvertisementSchema },
  { additionalProperties: false },
);
/** What the HostDirectory receives. */
export type DirectoryMessage = Static<typeof DirectoryMessage>;

/**
 * What a Network receives: a host acknowledged a grant's revoke (its peer
 * is gone); an allocation's release was requested (its generation closes
 * to new grants and its grants are revoked now); or one of its allocations
 * became terminal (its placement's cleanup completed; its grants are
 * revoked and its address freed once they are gone).
 */
export const NetworkMessage = Type.Union([
  Type.Object(
    { kind: Type.Literal("revoke_observed"), grantId: Id, hostId: Id, atMs: Ms },
    { additionalProperties: false },
  ),
  Type.Object(
    { kind: Type.Literal("close_generation"), allocationId: Id, generation: Type.Integer({ minimum: 1 }) },
    { additionalProperties: false },
  ),
  Type.Object({ kind: Type.Literal("allocation_terminal"), allocationId: Id }, { additionalProperties: false }),
]);
/** What a Network receives. */
export type NetworkMessage = Static<typeof NetworkMessage>;
