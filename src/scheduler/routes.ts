/**
 * Every route of the scheduler's HTTP API as data: method, path, who may
 * call it, its body schema and byte limit, and its query parameters. The
 * request guard (edge.ts) enforces these before any handler runs; the app
 * (app.ts) binds one handler to each name; the hostile-input test walks
 * this table, so a new route is fuzzed without being listed twice.
 *
 * Spec: "Authentication and identity", "Admission and limits", "The agent
 * protocol", "Enrollment", "Data path" and "Coordination and path
 * selection" (connection grants and their rendezvous; long-poll only, the
 * WebSocket route `GET /v1/connections/{id}/connect` is not served).
 * Must never: hold a handler or a business rule.
 */
import type { TSchema } from "@sinclair/typebox";
import type { ErrorCode } from "../protocol/errors.ts";
import {
  BootstrapBody,
  CreateAllocationBody,
  EnrollBody,
  EnrollmentTokenBody,
  MAX_API_BODY_BYTES,
  MAX_PAGE_SIZE,
  MAX_REQUEST_BODY_BYTES,
  MAX_WIRE_INTEGER,
  ReplacementAuthorizationBody,
} from "../protocol/api.ts";
import { Envelope, MAX_ENVELOPE_BYTES } from "../protocol/agent.ts";
import { ConnectionGrantBody, ConnectionMessagesBody, ConnectionPollBody, MAX_CONNECTION_BODY_BYTES } from "../protocol/connection.ts";
import { LogPushBody, MAX_LOG_PUSH_BODY_BYTES } from "../protocol/logs.ts";

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

/** A route's JSON body: its schema, its byte limit and the 413 code past it. */
export interface RouteBody {
  schema: TSchema;
  maxBytes: number;
  tooLarge: ErrorCode;
}

/** One route as data (see the module header). */
export interface RouteSpec {
  method: "GET" | "POST" | "DELETE";
  /** Path with `:name` segments, as Elysia writes them. */
  path: string;
  auth: RouteAuth;
  body?: RouteBody;
  query?: Record<string, QueryParam>;
}

const api = (schema: TSchema): RouteBody => ({ schema, maxBytes: MAX_API_BODY_BYTES, tooLarge: "BODY_TOO_LARGE" });
const envelope: RouteBody = { schema: Envelope, maxBytes: MAX_ENVELOPE_BYTES, tooLarge: "ENVELOPE_TOO_LARGE" };
const rendezvous = (schema: TSchema): RouteBody => ({ schema, maxBytes: MAX_CONNECTION_BODY_BYTES, tooLarge: "BODY_TOO_LARGE" });
const limit: QueryParam = { kind: "integer", min: 1, max: MAX_PAGE_SIZE };
const after: QueryParam = { kind: "integer", min: 0, max: MAX_WIRE_INTEGER };

/** The scheduler's routes by name. */
export const ROUTES = {
  healthz: { method: "GET", path: "/healthz", auth: "none" },
  wellKnown: { method: "GET", path: "/v1/.well-known/beachball", auth: "none" },
  createAllocation: { method: "POST", path: "/v1/allocations", auth: "controller", body: api(CreateAllocationBody) },
  listAllocations: { method: "GET", path: "/v1/allocations", auth: "principal", query: { cursor: { kind: "string", pattern: /^alloc_[0-9a-f]{32}$/ }, limit } },
  getAllocation: { method: "GET", path: "/v1/allocations/:id", auth: "principal" },
  releaseAllocation: { method: "POST", path: "/v1/allocations/:id/release", auth: "principal" },
  events: { method: "GET", path: "/v1/allocations/:id/events", auth: "principal", query: { after, limit } },
  logs: { method: "GET", path: "/v1/allocations/:id/logs", auth: "principal", query: { offset: after, follow: { kind: "integer", min: 0, max: 1 } } },
  bootstrap: { method: "POST", path: "/v1/allocations/:id/bootstrap", auth: "controller", body: { schema: BootstrapBody, maxBytes: MAX_REQUEST_BODY_BYTES, tooLarge: "PAYLOAD_TOO_LARGE" } },
  replacementAuthorizations: { method: "POST", path: "/v1/allocations/:id/replacement-authorizations", auth: "controller", body: api(ReplacementAuthorizationBody) },
  createConnectionGrant: { method: "POST", path: "/v1/allocations/:id/connection-grants", auth: "controller", body: api(ConnectionGrantBody) },
  revokeConnectionGrant: { method: "DELETE", path: "/v1/allocations/:id/connection-grants/:grantId", auth: "controller" },
  connectionPoll: { method: "POST", path: "/v1/connections/:id/poll", auth: "endpoint", body: rendezvous(ConnectionPollBody) },
  connectionMessages: { method: "POST", path: "/v1/connections/:id/messages", auth: "endpoint", body: rendezvous(ConnectionMessagesBody) },
  enrollmentTokens: { method: "POST", path: "/v1/hosts/:id/enrollment-tokens", auth: "operator", body: api(EnrollmentTokenBody) },
  hosts: { method: "GET", path: "/v1/hosts", auth: "operator" },
  activateHost: { method: "POST", path: "/v1/hosts/:id/activate", auth: "operator" },
  drainHost: { method: "POST", path: "/v1/hosts/:id/drain", auth: "operator" },
  disableHost: { method: "POST", path: "/v1/hosts/:id/disable", auth: "operator" },
  metrics: { method: "GET", path: "/v1/operations/metrics", auth: "operator" },
  alerts: { method: "GET", path: "/v1/operations/alerts", auth: "operator", query: { after, limit } },
  enroll: { method: "POST", path: "/v1/agents/enroll", auth: "enroll", body: api(EnrollBody) },
  poll: { method: "POST", path: "/v1/agents/poll", auth: "host", body: envelope },
  messages: { method: "POST", path: "/v1/agents/messages", auth: "host", body: envelope },
  pushLogs: { method: "POST", path: "/v1/agents/logs", auth: "host", body: { schema: LogPushBody, maxBytes: MAX_LOG_PUSH_BODY_BYTES, tooLarge: "BODY_TOO_LARGE" } },
} as const satisfies Record<string, RouteSpec>;

/** A route name. */
export type RouteName = keyof typeof ROUTES;
