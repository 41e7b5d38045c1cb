/**
 * Every route of the scheduler's HTTP API as data: method, path, who may
 * call it, its body schema and byte limit, and its query parameters. The
 * request guard (edge.ts) enforces these before any handler runs; the app
 * (app.ts) binds one handler to each name; the hostile-input test walks
 * this table, so a new route is fuzzed without being listed twice; the
 * OpenAPI document (openapi.ts) is generated from it, so a new route is
 * published (with its response schema) without being listed twice either.
 *
 * Spec: "Authentication and identity", "Admission and limits", "The agent
 * protocol", "Enrollment", "Data path" and "Coordination and path
 * selection" (connection grants and their rendezvous: long-poll, and the
 * WebSocket route `GET /v1/connections/{id}/connect`, src/scheduler/rendezvousSocket.ts).
 * Must never: hold a handler or a business rule.
 */
import { Type, type TSchema } from "@sinclair/typebox";
import { BeachballError, type ErrorCode } from "../protocol/errors.ts";
import {
  AllocationView,
  BootstrapBody,
  CreateAllocationBody,
  EnrollBody,
  EnrollmentTokenBody,
  ForkAllocationBody,
  MAX_API_BODY_BYTES,
  MAX_PAGE_SIZE,
  MAX_REQUEST_BODY_BYTES,
  MAX_WIRE_INTEGER,
  ReplacementAuthorizationBody,
} from "../protocol/api.ts";
import { Envelope, MAX_ENVELOPE_BYTES } from "../protocol/agent.ts";
import {
  ConnectionGrantBody,
  ConnectionMessagesBody,
  ConnectionPollBody,
  MAX_CONNECTION_BODY_BYTES,
} from "../protocol/connection.ts";
import * as R from "../protocol/responses.ts";
import { LogPushBody, MAX_LOG_PUSH_BODY_BYTES } from "../protocol/logs.ts";
import { EVENT_FOLLOW_WAIT_MS, MAX_EVENT_FOLLOWERS } from "../protocol/eventFollow.ts";
import { ALLOCATION_ID, CONNECTION_ID, GRANT_ID, HOST_ID, LEASE_ID, RUN_ID } from "../protocol/ids.ts";
import {
  CreateLeaseBody,
  ExtendLeaseBody,
  LeaseEventPage,
  LeasePage,
  LeaseView,
  ShareLeaseBody,
  UnshareLeaseBody,
} from "../protocol/leases.ts";
import { RunEventPage, RunPage, RunView, SubmitRunBody } from "../protocol/runs.ts";
import { USAGE_GROUP_PATTERN, UsageReport } from "../protocol/usage.ts";

/**
 * Who may call a route, checked from the Authorization header before the
 * body is read: nobody (`none`), any principal, a principal of one role, or
 * an enrolled host, or the holder of a Connection's endpoint token
 * (`endpoint`: the token names one role of the Connection in the path's
 * `:id`). `enroll` is unauthenticated by header: its one-use token is in
 * the (small, bounded) body.
 */
export type RouteAuth = "none" | "enroll" | "principal" | "controller" | "operator" | "host" | "endpoint";

/** A query parameter: a decimal integer in [min, max], or a string matching `pattern`. */
export type QueryParam = { kind: "integer"; min: number; max: number } | { kind: "string"; pattern: RegExp };

/**
 * The shape of each kind of ID a path carries. A path parameter that does
 * not match its route's pattern is refused 400 VALIDATION_FAILED by the
 * guard (after authentication, before the query and body); one that
 * matches but names nothing the caller may see is the handler's 404
 * NOT_FOUND.
 */
export const PATH_ID = {
  allocation: ALLOCATION_ID,
  grant: GRANT_ID,
  connection: CONNECTION_ID,
  host: HOST_ID,
  run: RUN_ID,
  lease: LEASE_ID,
} as const;

/** A route's JSON body: its schema, its byte limit and the 413 code past it. */
export interface RouteBody {
  schema: TSchema;
  maxBytes: number;
  tooLarge: ErrorCode;
}

/**
 * A route's success answer: its status and either a JSON body schema or a
 * non-JSON content type (the metrics text); `also`: a second success status
 * with the same body (create's 200 for a replayed request). Errors are
 * always problem+json.
 */
export type RouteResponse =
  | { status: 200 | 201 | 202; schema: TSchema; also?: 200 }
  | { status: 200; contentType: string }
  | { status: 204 }
  | { status: 101 };

/** One route as data (see the module header). */
export interface RouteSpec {
  method: "GET" | "POST" | "DELETE";
  /** Path with `:name` segments, as Elysia writes them. */
  path: string;
  auth: RouteAuth;
  body?: RouteBody;
  /** The pattern of each `:name` segment of `path` (every one has a pattern; routes.test.ts checks). */
  params?: Record<string, RegExp>;
  query?: Record<string, QueryParam>;
  /** Route-specific codes a handler refuses a well-formed request with, published in the API document (the guard's own refusals are implied). */
  refusals?: ErrorCode[];
  /** One line for the API reference (docs/http-api.md). */
  summary: string;
  /** The success answer (published in /openapi.json; the public client is typed from it). */
  response: RouteResponse;
}

const api = (schema: TSchema): RouteBody => ({ schema, maxBytes: MAX_API_BODY_BYTES, tooLarge: "BODY_TOO_LARGE" });
const envelope: RouteBody = { schema: Envelope, maxBytes: MAX_ENVELOPE_BYTES, tooLarge: "ENVELOPE_TOO_LARGE" };
const rendezvous = (schema: TSchema): RouteBody => ({
  schema,
  maxBytes: MAX_CONNECTION_BODY_BYTES,
  tooLarge: "BODY_TOO_LARGE",
});
const allocation = { id: PATH_ID.allocation };
const host = { id: PATH_ID.host };
const connection = { id: PATH_ID.connection };
const run = { id: PATH_ID.run };
const lease = { id: PATH_ID.lease };
const limit: QueryParam = { kind: "integer", min: 1, max: MAX_PAGE_SIZE };
const after: QueryParam = { kind: "integer", min: 0, max: MAX_WIRE_INTEGER };
const ok = (schema: TSchema, status: 200 | 201 | 202 = 200): RouteResponse => ({ status, schema });
/** The OpenAPI document's own schema: an object (validated by an OpenAPI validator in tests, not here). */
const OpenApiDocument = Type.Object({ openapi: Type.String() }, { additionalProperties: true });

/** The scheduler's routes by name. */
export const ROUTES = {
  healthz: {
    method: "GET",
    path: "/healthz",
    auth: "none",
    summary: "Liveness and storage health (503 STORAGE_UNAVAILABLE when the store cannot be written)",
    response: ok(R.Health),
  },
  openapi: {
    method: "GET",
    path: "/openapi.json",
    auth: "none",
    summary: "This API as an OpenAPI 3.1 document",
    response: ok(OpenApiDocument),
  },
  wellKnown: {
    method: "GET",
    path: "/v1/.well-known/beachball",
    auth: "none",
    summary: "Discovery: API and agent protocol versions, region, workload classes",
    response: ok(R.WellKnown),
  },
  createAllocation: {
    method: "POST",
    path: "/v1/allocations",
    auth: "controller",
    body: api(CreateAllocationBody),
    refusals: ["UNKNOWN_WORKLOAD_CLASS", "IDEMPOTENCY_CONFLICT"],
    summary:
      "Create an allocation; idempotent by clientRequestId (201 created, 200 the same request replayed, 422 IDEMPOTENCY_CONFLICT for another body)",
    response: { status: 201, schema: AllocationView, also: 200 },
  },
  listAllocations: {
    method: "GET",
    path: "/v1/allocations",
    auth: "principal",
    query: { cursor: { kind: "string", pattern: PATH_ID.allocation }, limit },
    summary: "List the caller's allocations, one page",
    response: ok(R.AllocationPage),
  },
  getAllocation: {
    method: "GET",
    path: "/v1/allocations/:id",
    params: allocation,
    auth: "principal",
    summary: "One allocation",
    response: ok(AllocationView),
  },
  releaseAllocation: {
    method: "POST",
    path: "/v1/allocations/:id/release",
    params: allocation,
    auth: "principal",
    summary: "Request release (idempotent); the allocation reaches released once its VM is gone",
    response: ok(AllocationView, 202),
  },
  pauseAllocation: {
    method: "POST",
    path: "/v1/allocations/:id/pause",
    params: allocation,
    auth: "principal",
    refusals: ["INVALID_STATE"],
    summary:
      "Pause the VM (idempotent): its vCPUs stop and its CPU goes back to the host; the allocation is paused once the agent confirms",
    response: ok(AllocationView, 202),
  },
  suspendAllocation: {
    method: "POST",
    path: "/v1/allocations/:id/suspend",
    params: allocation,
    auth: "principal",
    refusals: ["INVALID_STATE", "NOT_SUSPENDABLE"],
    summary:
      "Suspend the VM (idempotent; its workload class must be suspendable): memory and device state to the host's disk, CPU and memory back to the host, disk kept",
    response: ok(AllocationView, 202),
  },
  resumeAllocation: {
    method: "POST",
    path: "/v1/allocations/:id/resume",
    params: allocation,
    auth: "principal",
    refusals: ["INVALID_STATE"],
    summary:
      "Resume a paused or suspended VM (idempotent): the host takes its capacity back first (else it waits with NO_CAPACITY); a suspended VM is restored as the next generation",
    response: ok(AllocationView, 202),
  },
  forkAllocation: {
    method: "POST",
    path: "/v1/allocations/:id/fork",
    params: allocation,
    auth: "controller",
    body: api(ForkAllocationBody),
    refusals: ["INVALID_STATE", "PAYLOAD_CONSUMED", "IDEMPOTENCY_CONFLICT"],
    summary:
      "Fork a suspended VM: count new allocations restored from its snapshot on its host, each with its own identity, address and lifetime; idempotent by clientRequestId (201 created, 200 replayed); a parent that consumed a bootstrap payload needs allowConsumedPayload",
    response: { status: 201, schema: R.ForkResult, also: 200 },
  },
  events: {
    method: "GET",
    path: "/v1/allocations/:id/events",
    params: allocation,
    auth: "principal",
    query: { after, limit, follow: { kind: "integer", min: 0, max: 1 } },
    summary: `The allocation's events after a sequence number (resumable; follow=1 waits up to ${EVENT_FOLLOW_WAIT_MS / 1000} s for the next event when there is none, at most ${MAX_EVENT_FOLLOWERS} such reads per allocation, past it 429 RATE_LIMITED)`,
    response: ok(R.EventPage),
  },
  logs: {
    method: "GET",
    path: "/v1/allocations/:id/logs",
    params: allocation,
    auth: "principal",
    query: { offset: after, follow: { kind: "integer", min: 0, max: 1 } },
    summary: "The allocation's redacted console output from a byte offset (follow=1 waits for more; resumable)",
    response: ok(R.LogPage),
  },
  bootstrap: {
    method: "POST",
    path: "/v1/allocations/:id/bootstrap",
    params: allocation,
    auth: "controller",
    body: { schema: BootstrapBody, maxBytes: MAX_REQUEST_BODY_BYTES, tooLarge: "PAYLOAD_TOO_LARGE" },
    summary:
      "Hand a bootstrap payload to the guest (memory only); answers once the guest consumed it, idempotent by deliveryId",
    response: ok(R.DeliveryResult),
  },
  replacementAuthorizations: {
    method: "POST",
    path: "/v1/allocations/:id/replacement-authorizations",
    params: allocation,
    auth: "controller",
    body: api(ReplacementAuthorizationBody),
    summary: "Certify the generation's external authority is revoked so a blocked replacement may proceed",
    response: ok(AllocationView),
  },
  createConnectionGrant: {
    method: "POST",
    path: "/v1/allocations/:id/connection-grants",
    params: allocation,
    auth: "controller",
    body: api(ConnectionGrantBody),
    summary:
      "A signed connection grant for the caller's ready allocation (one generation, one host peer), its relay map, relay tokens and rendezvous endpoint token",
    response: ok(R.ConnectionGrantResponse, 201),
  },
  revokeConnectionGrant: {
    method: "DELETE",
    path: "/v1/allocations/:id/connection-grants/:grantId",
    params: { ...allocation, grantId: PATH_ID.grant },
    auth: "controller",
    summary: "Revoke a connection grant (idempotent)",
    response: { status: 204 },
  },
  connectionPoll: {
    method: "POST",
    path: "/v1/connections/:id/poll",
    params: connection,
    auth: "endpoint",
    body: rendezvous(ConnectionPollBody),
    summary: "Rendezvous: the peer's messages after a cursor (acknowledging those up to it); parks up to 25 s",
    response: ok(R.ConnectionPollResponse),
  },
  connectionConnect: {
    method: "GET",
    path: "/v1/connections/:id/connect",
    params: connection,
    auth: "endpoint",
    query: { after },
    summary:
      "Rendezvous over a WebSocket (101 Switching Protocols): frames are a messages body one way, the peer's messages (as the poll answers them) and acceptances the other; `after` resumes past the peer's messages already processed. 426 UPGRADE_REQUIRED without an upgrade",
    response: { status: 101 },
  },
  connectionRelayTokens: {
    method: "POST",
    path: "/v1/connections/:id/relay-tokens",
    params: connection,
    auth: "endpoint",
    summary:
      "Fresh relay tokens for the caller's role of the Connection's grant (same grant, generation and host peer; never past the grant); at most one per 10 s per role; 401 UNAUTHENTICATED once the grant expired, was revoked or replaced",
    response: ok(R.ConnectionRelayTokensResponse),
  },
  connectionMessages: {
    method: "POST",
    path: "/v1/connections/:id/messages",
    params: connection,
    auth: "endpoint",
    body: rendezvous(ConnectionMessagesBody),
    summary: "Rendezvous: post candidates, path observations and acks (per-role sequence numbers)",
    response: ok(R.ConnectionPollResponse),
  },
  submitRun: {
    method: "POST",
    path: "/v1/runs",
    auth: "controller",
    body: { schema: SubmitRunBody, maxBytes: MAX_REQUEST_BODY_BYTES, tooLarge: "PAYLOAD_TOO_LARGE" },
    refusals: ["UNKNOWN_WORKLOAD_CLASS", "IDEMPOTENCY_CONFLICT", "QUOTA_QUEUED_RUNS"],
    summary:
      "Submit a run: a script run once in a fresh VM of the class, queued fairly between tenants; idempotent by clientRequestId (201 created, 200 replayed); 429 QUOTA_QUEUED_RUNS with Retry-After when the queue is full",
    response: { status: 201, schema: RunView, also: 200 },
  },
  listRuns: {
    method: "GET",
    path: "/v1/runs",
    auth: "principal",
    query: { cursor: after, limit },
    summary: "List the caller's runs, newest first, one page (cursor: the nextCursor of the page before)",
    response: ok(RunPage),
  },
  getRun: {
    method: "GET",
    path: "/v1/runs/:id",
    params: run,
    auth: "principal",
    summary: "One run: state, outcome, exit code, timings, queue position and estimate",
    response: ok(RunView),
  },
  cancelRun: {
    method: "POST",
    path: "/v1/runs/:id/cancel",
    params: run,
    auth: "principal",
    summary: "Cancel a run (idempotent): a queued run ends at once, a started one once its VM is gone",
    response: ok(RunView, 202),
  },
  runEvents: {
    method: "GET",
    path: "/v1/runs/:id/events",
    params: run,
    auth: "principal",
    query: { after, limit, follow: { kind: "integer", min: 0, max: 1 } },
    summary: `The run's events after a sequence number (follow=1 waits up to ${EVENT_FOLLOW_WAIT_MS / 1000} s for the next one)`,
    response: ok(RunEventPage),
  },
  runLogs: {
    method: "GET",
    path: "/v1/runs/:id/logs",
    params: run,
    auth: "principal",
    query: { offset: after, follow: { kind: "integer", min: 0, max: 1 } },
    summary: "The run's output from a byte offset, kept after its VM is gone (follow=1 waits for more)",
    response: ok(R.LogPage),
  },
  usage: {
    method: "GET",
    path: "/v1/usage",
    auth: "principal",
    query: {
      from: { kind: "integer", min: 0, max: MAX_WIRE_INTEGER },
      to: { kind: "integer", min: 1, max: MAX_WIRE_INTEGER },
      by: { kind: "string", pattern: USAGE_GROUP_PATTERN },
    },
    summary:
      "VM, vCPU and MiB time from observed running to observed absence in [from, to) (ms since the epoch; default this month to now), grouped by tenant, controller, class or host: a controller's own, an operator's everyone's",
    response: ok(UsageReport),
  },
  createLease: {
    method: "POST",
    path: "/v1/leases",
    auth: "controller",
    body: api(CreateLeaseBody),
    refusals: ["UNKNOWN_WORKLOAD_CLASS", "IDEMPOTENCY_CONFLICT", "QUOTA_ACTIVE_LEASES", "COST_LIMIT_EXCEEDED"],
    summary:
      "Make a lease: an allocation held until its TTL or an idle timeout after its last activity (a heartbeat, a connection grant for its VM); idempotent by clientRequestId (201 created, 200 replayed)",
    response: { status: 201, schema: LeaseView, also: 200 },
  },
  listLeases: {
    method: "GET",
    path: "/v1/leases",
    auth: "principal",
    summary: "The leases the caller owns or was shared, newest first",
    response: ok(LeasePage),
  },
  getLease: {
    method: "GET",
    path: "/v1/leases/:id",
    params: lease,
    auth: "principal",
    summary: "One lease (its owner and the principals it is shared with; NOT_FOUND for anyone else)",
    response: ok(LeaseView),
  },
  leaseEvents: {
    method: "GET",
    path: "/v1/leases/:id/events",
    params: lease,
    auth: "principal",
    query: { after, limit },
    summary: "The lease's events after a sequence number (lease.created, lease.expiring_soon, lease.expired, …)",
    response: ok(LeaseEventPage),
  },
  heartbeatLease: {
    method: "POST",
    path: "/v1/leases/:id/heartbeat",
    params: lease,
    auth: "principal",
    refusals: ["LEASE_ENDED", "QUOTA_ACTIVE_LEASES", "COST_LIMIT_EXCEEDED"],
    summary: "Activity: the idle deadline moves to now (owner or a use share; 409 LEASE_ENDED once it ended)",
    response: ok(LeaseView),
  },
  extendLease: {
    method: "POST",
    path: "/v1/leases/:id/extend",
    params: lease,
    auth: "principal",
    body: api(ExtendLeaseBody),
    refusals: ["LEASE_ENDED", "QUOTA_ACTIVE_LEASES", "COST_LIMIT_EXCEEDED"],
    summary: "The lease now ends ttlSeconds from now, never past its VM's lifetime (owner or a use share)",
    response: ok(LeaseView),
  },
  releaseLease: {
    method: "POST",
    path: "/v1/leases/:id/release",
    params: lease,
    auth: "principal",
    summary: "End the lease and release its VM (owner; idempotent)",
    response: ok(LeaseView),
  },
  shareLease: {
    method: "POST",
    path: "/v1/leases/:id/shares",
    params: lease,
    auth: "principal",
    body: api(ShareLeaseBody),
    summary: "Share the lease with a principal of the manifest, to read or to use (owner)",
    response: ok(LeaseView),
  },
  unshareLease: {
    method: "POST",
    path: "/v1/leases/:id/unshare",
    params: lease,
    auth: "principal",
    body: api(UnshareLeaseBody),
    summary: "Take a share back (owner; idempotent)",
    response: ok(LeaseView),
  },
  enrollmentTokens: {
    method: "POST",
    path: "/v1/hosts/:id/enrollment-tokens",
    params: host,
    auth: "operator",
    body: api(EnrollmentTokenBody),
    summary: "Mint a one-use enrollment token bound to a host ID",
    response: ok(R.EnrollmentToken, 201),
  },
  hosts: {
    method: "GET",
    path: "/v1/hosts",
    auth: "operator",
    summary: "Every enrolled host with capacity, health and placements",
    response: ok(R.HostList),
  },
  activateHost: {
    method: "POST",
    path: "/v1/hosts/:id/activate",
    params: host,
    auth: "operator",
    summary: "Let a host take new placements",
    response: ok(R.HostView),
  },
  drainHost: {
    method: "POST",
    path: "/v1/hosts/:id/drain",
    params: host,
    auth: "operator",
    summary: "Stop new placements on a host; running ones stay",
    response: ok(R.HostView),
  },
  disableHost: {
    method: "POST",
    path: "/v1/hosts/:id/disable",
    params: host,
    auth: "operator",
    summary: "Fence a host for good (enroll it again to return)",
    response: ok(R.HostView),
  },
  metrics: {
    method: "GET",
    path: "/v1/operations/metrics",
    auth: "operator",
    summary: "Prometheus text exposition",
    response: { status: 200, contentType: "text/plain; version=0.0.4" },
  },
  alerts: {
    method: "GET",
    path: "/v1/operations/alerts",
    auth: "operator",
    query: { after, limit },
    summary: "Operator alerts after a sequence number",
    response: ok(R.AlertList),
  },
  enroll: {
    method: "POST",
    path: "/v1/agents/enroll",
    auth: "enroll",
    body: api(EnrollBody),
    summary: "Agent: enroll a host with a one-use token; answers the host credential once",
    response: ok(R.EnrollResponse, 201),
  },
  poll: {
    method: "POST",
    path: "/v1/agents/poll",
    auth: "host",
    body: envelope,
    summary: "Agent: report and fetch commands; parks up to 25 s when there is nothing to do",
    response: ok(R.PollResponse),
  },
  messages: {
    method: "POST",
    path: "/v1/agents/messages",
    auth: "host",
    body: envelope,
    summary: "Agent: report observations without parking",
    response: ok(R.PollResponse),
  },
  pushLogs: {
    method: "POST",
    path: "/v1/agents/logs",
    auth: "host",
    body: { schema: LogPushBody, maxBytes: MAX_LOG_PUSH_BODY_BYTES, tooLarge: "BODY_TOO_LARGE" },
    summary: "Agent: push redacted console output of its placements",
    response: ok(R.LogPushResponse),
  },
} as const satisfies Record<string, RouteSpec>;

/** A route name. */
export type RouteName = keyof typeof ROUTES;

/**
 * Refuses a path parameter that does not match its route's pattern
 * (PATH_ID) with 400 VALIDATION_FAILED naming the parameter and
 * the pattern (never the value): a malformed ID is the caller's mistake,
 * distinct from a well-formed ID that names nothing (the handler's 404).
 */
export function checkPathParams(spec: RouteSpec, params: Record<string, string>): void {
  for (const [name, value] of Object.entries(params)) {
    const pattern = spec.params?.[name];
    if (pattern && pattern.test(value)) continue;
    const kind = Object.entries(PATH_ID).find(([, p]) => p === pattern)?.[0];
    throw new BeachballError(
      "VALIDATION_FAILED",
      `path parameter ${name}${kind ? ` (${kind} ID)` : ""} must match ${pattern?.source ?? "nothing"}`,
      { parameter: name, pattern: pattern?.source ?? null },
    );
  }
}
