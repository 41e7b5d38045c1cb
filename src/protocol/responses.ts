/**
 * Response bodies of the public HTTP API as TypeBox schemas: the OpenAPI
 * document (src/scheduler/openapi.ts) publishes them and the public client
 * (src/client) is typed from them. The TypeScript interfaces the scheduler
 * fills (views.ts, agent.ts, api.ts) stay the source of the code's types;
 * responses.typecheck.ts proves each schema's static type equals its
 * interface, so a field added to one and not the other fails `tsc`.
 *
 * Spec: "Allocation lifecycle", "Observability and retention", "The agent
 * protocol", "Enrollment"; RFC 9457 for Problem. Pure shapes.
 * Must never: describe a field the scheduler does not send, or carry a
 * secret in an example.
 */
import { AGENT_PROTOCOL_VERSION } from "./platform.ts";
import { Type, type Static, type TSchema } from "@sinclair/typebox";
import { ALLOCATION_STATES, AllocationView, MAX_FORKS_PER_REQUEST } from "./api.ts";
import { COMMAND_TYPES, CommandSpec, ConfigureConnection } from "./agent.ts";
import {
  Candidate,
  ConnectionMessage,
  RelayRole,
  SignedGrant,
  SignedRelayMap,
  SignedRelayToken,
} from "./connection.ts";
import { ERROR_STATUS } from "./errors.ts";
import { MAX_STUN_SERVERS, StunServerText } from "./stunServers.ts";

const nullable = <T extends TSchema>(s: T) => Type.Union([s, Type.Null()]);
const Iso = Type.String({ description: "ISO 8601 time" });

/** RFC 9457 problem details with the stable `code` (every error answer). */
export const Problem = Type.Object(
  {
    type: Type.String({ description: "URI naming the problem type" }),
    title: Type.String({ description: "the stable code again (RFC 9457 title)" }),
    status: Type.Integer({ description: "HTTP status" }),
    code: Type.Union(
      (Object.keys(ERROR_STATUS) as (keyof typeof ERROR_STATUS)[]).map((c) => Type.Literal(c)),
      { description: "stable error code: branch on this, never on detail" },
    ),
    detail: Type.Optional(Type.String({ description: "human-readable; never echoes a request body" })),
    extra: Type.Optional(
      Type.Record(Type.String(), Type.Unknown(), {
        description:
          "machine-readable facts (retryAfterSeconds, allow, limitBytes; for VALIDATION_FAILED the field as a JSON pointer and, for an unknown field, allowedFields, or the path or query parameter; …)",
      }),
    ),
  },
  { additionalProperties: false },
);
/** A problem body. */
export type Problem = Static<typeof Problem>;

/** GET /healthz. */
export const Health = Type.Object({ ok: Type.Literal(true) }, { additionalProperties: false });

/** GET /v1/.well-known/beachball: discovery for agents and clients. */
export const WellKnown = Type.Object(
  {
    apiVersion: Type.Literal("v1"),
    agentProtocolVersion: Type.Literal(AGENT_PROTOCOL_VERSION),
    region: Type.String(),
    workloadClasses: Type.Array(Type.String()),
    connectionVerificationKeys: Type.Optional(
      Type.Record(Type.String(), Type.String(), {
        description:
          "with private networking: key ID → base64 Ed25519 public key grants, relay maps and relay tokens verify with",
      }),
    ),
  },
  { additionalProperties: false },
);

/** One allocation event (spec "Observability and retention"). */
export const AllocationEvent = Type.Object(
  {
    seq: Type.Integer({ minimum: 1, description: "position in the allocation's event log; resume with after=seq" }),
    eventId: Type.String(),
    type: Type.String({
      description: "e.g. allocation.created, allocation.state_changed, allocation.no_eligible_host",
    }),
    at: Iso,
    allocationId: Type.String(),
    generation: Type.Integer({ minimum: 1 }),
    placementId: nullable(Type.String()),
    hostId: nullable(Type.String()),
    fromState: nullable(Type.Union(ALLOCATION_STATES.map((s) => Type.Literal(s)))),
    toState: nullable(Type.Union(ALLOCATION_STATES.map((s) => Type.Literal(s)))),
    reason: nullable(Type.String()),
    clientId: Type.String({ description: "the controller identity that owns the allocation" }),
    correlationId: Type.String({ description: "the clientRequestId of the create call" }),
    data: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  },
  { additionalProperties: false },
);

/** GET /v1/allocations: one page of the caller's allocations. */
export const AllocationPage = Type.Object(
  {
    items: Type.Array(AllocationView),
    nextCursor: nullable(Type.String({ description: "pass as cursor for the next page; null on the last" })),
    damaged: Type.Array(Type.String(), {
      description: "allocation IDs the index lists whose stored view failed its checks",
    }),
  },
  { additionalProperties: false },
);

/** POST /v1/allocations/{id}/fork: the forks, in index order (issue 21). */
export const ForkResult = Type.Object(
  {
    items: Type.Array(AllocationView, { maxItems: MAX_FORKS_PER_REQUEST }),
  },
  { additionalProperties: false },
);
/** POST /v1/allocations/{id}/fork answer. */
export type ForkResult = Static<typeof ForkResult>;

/** GET /v1/allocations/{id}/events. */
export const EventPage = Type.Object(
  {
    items: Type.Array(AllocationEvent),
    nextCursor: Type.Integer({
      minimum: 0,
      description: "the last seq returned (or `after` when none): pass as after",
    }),
  },
  { additionalProperties: false },
);

/** POST /v1/allocations/{id}/bootstrap: the guest consumed the payload (or an earlier identical delivery did). */
export const DeliveryResult = Type.Object(
  {
    deliveryId: Type.String(),
    digest: Type.String({ pattern: "^sha256:[0-9a-f]{64}$" }),
    replayed: Type.Boolean({ description: "true when this deliveryId was consumed before with the same payload" }),
  },
  { additionalProperties: false },
);

/** POST /v1/hosts/{id}/enrollment-tokens: a one-use token, shown once. */
export const EnrollmentToken = Type.Object(
  {
    token: Type.String({ description: "bbe_…; one use, shown once" }),
    hostId: Type.String(),
    expiresAt: Iso,
    joinCommand: Type.String(),
  },
  { additionalProperties: false },
);

/** A resource vector: CPU millicores, memory MiB, ephemeral disk MiB, placement slots. */
export const Resources = Type.Object(
  { cpuMillis: Type.Integer(), memoryMiB: Type.Integer(), ephemeralDiskMiB: Type.Integer(), slots: Type.Integer() },
  { additionalProperties: false },
);

/** The operator's view of a host. */
export const HostView = Type.Object(
  {
    hostId: Type.String(),
    adminState: Type.String({ description: "active, draining or disabled" }),
    health: Type.Union([
      Type.Literal("unknown"),
      Type.Literal("healthy"),
      Type.Literal("suspect"),
      Type.Literal("lost"),
    ]),
    registered: Resources,
    allocatable: Resources,
    free: Resources,
    placements: Type.Array(
      Type.Object(
        { placementId: Type.String(), allocationId: Type.String(), generation: Type.Integer(), state: Type.String() },
        { additionalProperties: false },
      ),
    ),
    heartbeatAt: nullable(Iso),
    vmmDriver: Type.String(),
    unschedulable: Type.Array(Type.String(), {
      description: "why the host takes no reservations now (empty: schedulable)",
    }),
    credentialVersion: Type.Integer(),
    suspended: Type.Object(
      {
        placements: Type.Integer({ minimum: 0, description: "placements suspended on the host now" }),
        diskMiB: Type.Integer({
          minimum: 0,
          description: "disk they hold, MiB: each its ephemeral disk and its snapshot (its memory again)",
        }),
        oldestReportAt: nullable(Iso),
        maxAgeSeconds: Type.Integer({
          minimum: 1,
          description: "how long a VM may stay suspended before it is released (SUSPEND_EXPIRED)",
        }),
      },
      {
        additionalProperties: false,
        description:
          "suspended VMs (issue 21): their count, the disk their snapshots and disks hold, the earliest of their last reports, the deployment's longest suspension",
      },
    ),
  },
  { additionalProperties: false },
);

/** GET /v1/hosts. */
export const HostList = Type.Object({ items: Type.Array(HostView) }, { additionalProperties: false });

/** One alert with its position in the alert log. */
export const AlertItem = Type.Object(
  {
    seq: Type.Integer({ minimum: 1 }),
    alertId: Type.String(),
    type: Type.String(),
    subject: Type.String(),
    reason: Type.String(),
    at: Iso,
    runbook: Type.String({ description: "runbook anchor for the alert type" }),
  },
  { additionalProperties: false },
);

/** GET /v1/operations/alerts. */
export const AlertList = Type.Object({ items: Type.Array(AlertItem) }, { additionalProperties: false });

/** POST /v1/agents/enroll: the host credential, shown once. */
export const EnrollResponse = Type.Object(
  {
    hostId: Type.String(),
    credential: Type.String({ description: "bbh_<hostId>.<secret>; shown once, stored by the agent mode 0600" }),
    credentialVersion: Type.Integer(),
    adminState: Type.Union([Type.Literal("active"), Type.Literal("draining"), Type.Literal("disabled")]),
  },
  { additionalProperties: false },
);

/** One command to an agent. */
export const AgentCommand = Type.Object(
  {
    commandId: Type.String(),
    type: Type.Union(COMMAND_TYPES.map((t) => Type.Literal(t))),
    allocationId: Type.String(),
    placementId: Type.String(),
    generation: Type.Integer(),
    agentEpoch: Type.String(),
    leaseExpiresAt: Iso,
    spec: CommandSpec,
  },
  { additionalProperties: false },
);

/** A bootstrap delivery riding in a poll response (memory only). */
export const BootstrapDelivery = Type.Object(
  {
    deliveryId: Type.String(),
    allocationId: Type.String(),
    placementId: Type.String(),
    generation: Type.Integer(),
    contentType: Type.String(),
    payloadBase64: Type.String(),
  },
  { additionalProperties: false },
);

/** POST /v1/agents/poll and /v1/agents/messages. */
export const PollResponse = Type.Object(
  {
    agentEpoch: Type.String(),
    commands: Type.Array(AgentCommand),
    deliveries: Type.Array(BootstrapDelivery),
    leases: Type.Record(Type.String(), Type.String(), {
      description: "authoritative lease expiry (ISO 8601) per placement ID",
    }),
    rejectedUpdates: Type.Optional(
      Type.Array(
        Type.Object(
          {
            seq: Type.Integer(),
            placementId: Type.String(),
            code: Type.Union([
              Type.Literal("UNKNOWN_PLACEMENT"),
              Type.Literal("STALE_GENERATION"),
              Type.Literal("SEQUENCE_NOT_INCREASING"),
              Type.Literal("INVALID_STATE"),
            ]),
          },
          { additionalProperties: false },
        ),
      ),
    ),
    connections: Type.Optional(
      Type.Array(ConfigureConnection, { description: "configure_connection commands, redelivered until acknowledged" }),
    ),
  },
  { additionalProperties: false },
);

/** GET /v1/allocations/{id}/logs: one page of the allocation's redacted console output. */
export const LogPage = Type.Object(
  {
    offset: Type.Integer({
      minimum: 0,
      description:
        "where `text` starts in the stream, bytes (may be past the asked offset when older bytes were dropped)",
    }),
    nextOffset: Type.Integer({ minimum: 0, description: "pass as offset to read on" }),
    droppedBytes: Type.Integer({
      minimum: 0,
      description: "bytes between the asked offset and `offset` that the bounded ring no longer holds",
    }),
    text: Type.String(),
    complete: Type.Boolean({ description: "the allocation has ended and nothing more will come" }),
  },
  { additionalProperties: false },
);

/** POST /v1/agents/logs: where each pushed placement's stream ends now. */
export const LogPushResponse = Type.Object(
  {
    results: Type.Array(
      Type.Object(
        {
          placementId: Type.String(),
          streamEnd: Type.Integer({ minimum: 0 }),
          code: Type.Optional(Type.Union([Type.Literal("UNKNOWN_PLACEMENT"), Type.Literal("STALE_GENERATION")])),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

/** POST /v1/allocations/{id}/connection-grants (src/protocol/connection.ts ConnectionGrantResponse). */
export const ConnectionGrantResponse = Type.Object(
  {
    grant: SignedGrant,
    relayMap: SignedRelayMap,
    relayTokens: Type.Record(Type.String(), SignedRelayToken, {
      description: "the client's relay token for each relay of the map, by relay ID",
    }),
    connectionId: Type.String({ description: "the grant's Connection (rendezvous)" }),
    endpointToken: Type.String({
      description: "the client role's bearer for that Connection only; shown once, stored as a digest",
    }),
    hostCandidates: Type.Array(Candidate),
    stunServers: Type.Optional(
      Type.Array(StunServerText, {
        maxItems: MAX_STUN_SERVERS,
        description:
          "the deployment's STUN servers; the client asks them from its tunnel socket and posts its public mapping as a candidate",
      }),
    ),
  },
  { additionalProperties: false },
);

/** POST /v1/connections/{id}/relay-tokens (src/protocol/connection.ts ConnectionRelayTokensResponse). */
export const ConnectionRelayTokensResponse = Type.Object(
  {
    grantId: Type.String(),
    role: RelayRole,
    relayTokens: Type.Record(Type.String(), SignedRelayToken, {
      description: "the caller role's fresh relay token for each relay of the deployment, by relay ID",
    }),
    expiresAtMs: Type.Integer({ description: "when the grant ends, ms since the epoch" }),
  },
  { additionalProperties: false },
);

/** POST /v1/connections/{id}/poll and …/messages (src/protocol/connection.ts ConnectionPollResponse). */
export const ConnectionPollResponse = Type.Object(
  {
    role: RelayRole,
    messages: Type.Array(ConnectionMessage, {
      description: "the peer's messages after the caller's cursor, oldest first",
    }),
    lastAcceptedSeq: Type.Integer({ minimum: 0 }),
    expiresAtMs: Type.Integer({ minimum: 0 }),
    closed: Type.Boolean({ description: "the grant was revoked or expired: nothing more will arrive" }),
  },
  { additionalProperties: false },
);
