/**
 * The scheduler's HTTP surface as a plain fetch handler, for hosts where
 * Elysia cannot run: workerd forbids code generation (`new Function`),
 * which Elysia's compiled handlers and TypeBox's compiled checks use. Same
 * routes, same TypeBox schemas (interpreted with `Value`), same problem+json
 * errors as ./app.ts (path parameters, media type, body bounds and schema
 * errors checked by the same functions as edge.ts); the embedded host
 * serves ./app.ts.
 * Must never: hold a business rule (each route calls one front method), or
 * echo a request body in an error.
 */
import { Value } from "@sinclair/typebox/value";
import { BeachballError, type ErrorCode } from "../protocol/errors.ts";
import type { BootstrapBody, CreateAllocationBody, EnrollBody } from "../protocol/api.ts";
import { MAX_PAGE_SIZE } from "../protocol/api.ts";
import type { Envelope } from "../protocol/agent.ts";
import type { LogPushBody } from "../protocol/logs.ts";
import type { SchedulerFront } from "./front.ts";
import type { ConnectionGrantBody, ConnectionMessagesBody, ConnectionPollBody } from "../protocol/connection.ts";
import { openApiDocument } from "./openapi.ts";
import { problemResponse } from "../protocol/problem.ts";
import { checkPathParams, ROUTES, type RouteSpec } from "./routes.ts";
import { parseBoundedJson, readBoundedBody, requireJsonMediaType } from "../protocol/boundedBody.ts";
import { declaredKeys, schemaValidationError } from "./schemaErrors.ts";

/** The methods the route table allows on `pathname` (empty: no such path). */
function allowedMethods(pathname: string): string[] {
  const parts = pathname.split("/");
  const out = new Set<string>();
  for (const r of Object.values(ROUTES)) {
    const segs = r.path.split("/");
    if (segs.length === parts.length && segs.every((seg, i) => (seg.startsWith(":") ? parts[i] !== "" : seg === parts[i]))) {
      out.add(r.method);
      if (r.method === "GET") out.add("HEAD");
    }
  }
  return [...out].sort();
}

/** The problem response for a code (problem.ts problemResponse: the same headers as the embedded host's). */
function problem(code: ErrorCode, detail: string, extra?: Record<string, unknown>): Response {
  return problemResponse(new BeachballError(code, detail, extra));
}

function json(v: unknown, status = 200): Response {
  return new Response(JSON.stringify(v), { status, headers: { "content-type": "application/json" } });
}

/** Routes by "METHOD /path/:param" (the form the switch below names them). */
const SPECS = new Map(Object.values(ROUTES).map((r: RouteSpec) => [`${r.method} ${r.path}`, r]));

/**
 * A JSON route's body, checked as edge.ts checks it for the embedded host:
 * the media type (415), read with the route's byte limit (413), parsed with
 * its depth bound (400) and checked against the route's schema (400,
 * described by schemaErrors.ts). Each case calls it after authenticating.
 */
async function jsonBody(req: Request, spec: RouteSpec | undefined): Promise<unknown> {
  if (!spec?.body) throw new BeachballError("INTERNAL", "a route without a body asked for one");
  requireJsonMediaType(req.headers);
  const v = parseBoundedJson(await readBoundedBody(req, spec.body.maxBytes, spec.body.tooLarge));
  if (!Value.Check(spec.body.schema, v)) throw schemaValidationError(Value.Errors(spec.body.schema, v), declaredKeys(spec.body.schema));
  return v;
}

function intParam(url: URL, name: string, def: number, min: number, max: number): number {
  const raw = url.searchParams.getAll(name);
  if (raw.length === 0) return def;
  if (raw.length > 1 || !/^(0|[1-9][0-9]{0,15})$/.test(raw[0]!)) throw new BeachballError("VALIDATION_FAILED", `${name} must be one integer`);
  const n = Number(raw[0]);
  if (n < min || n > max) throw new BeachballError("VALIDATION_FAILED", `${name} must be between ${min} and ${max}`);
  return n;
}

/** Builds the fetch handler over one front. */
export function fetchRouter(front: SchedulerFront): (req: Request) => Promise<Response> {
  return async (req) => {
    const url = new URL(req.url);
    const p = url.pathname.split("/").filter(Boolean);
    // HEAD is GET without the body (RFC 9110 §9.3.2); the runtime drops the body.
    const m = req.method === "HEAD" ? "GET" : req.method;
    try {
      const param = (s: string, i: number) => {
        if (p[0] !== "v1") return s;
        if (i === 2 && (p[1] === "allocations" || p[1] === "hosts" || p[1] === "connections")) return ":id";
        if (i === 4 && p[1] === "allocations" && p[3] === "connection-grants") return ":grantId";
        return s;
      };
      const route = `${m} /${p.map(param).join("/")}`;
      const spec = SPECS.get(route);
      // A principal is authenticated first, then the path parameters are checked (400 for a malformed ID), as edge.ts does.
      const auth = (r: Request) => {
        const who = front.authenticate(r.headers.get("authorization"));
        if (spec) checkPathParams(spec, Object.fromEntries(spec.path.split("/").flatMap((seg, i) => (seg.startsWith(":") ? [[seg.slice(1), p[i - 1] ?? ""]] : []))));
        return who;
      };
      switch (route) {
        case "GET /healthz":
          return json({ ok: true });
        case "GET /openapi.json":
          return json(openApiDocument());
        case "GET /v1/.well-known/beachball":
          return json(front.wellKnown());
        case "POST /v1/allocations": {
          const who = auth(req);
          const r = await front.createAllocation(who, (await jsonBody(req, spec)) as CreateAllocationBody);
          return json(r.view, r.created ? 201 : 200);
        }
        case "GET /v1/allocations": {
          const who = auth(req);
          const cursor = url.searchParams.get("cursor");
          return json(await front.listAllocations(who, cursor, intParam(url, "limit", 50, 1, MAX_PAGE_SIZE)));
        }
        case "GET /v1/allocations/:id":
          return json(await front.getAllocation(auth(req), p[2]!));
        case "POST /v1/allocations/:id/release":
          return json(await front.releaseAllocation(auth(req), p[2]!), 202);
        case "GET /v1/allocations/:id/events": {
          const who = auth(req);
          const after = intParam(url, "after", 0, 0, Number.MAX_SAFE_INTEGER);
          const items = await front.events(who, p[2]!, after, intParam(url, "limit", 100, 1, MAX_PAGE_SIZE));
          return json({ items, nextCursor: items.length ? items[items.length - 1]!.seq : after });
        }
        case "GET /v1/allocations/:id/logs": {
          const who = auth(req);
          return json(await front.readLog(who, p[2]!, intParam(url, "offset", 0, 0, Number.MAX_SAFE_INTEGER), intParam(url, "follow", 0, 0, 1) === 1));
        }
        case "POST /v1/allocations/:id/bootstrap": {
          const who = auth(req);
          return json(await front.deliverBootstrap(who, p[2]!, (await jsonBody(req, spec)) as BootstrapBody));
        }
        case "POST /v1/allocations/:id/replacement-authorizations": {
          const who = auth(req);
          const b = (await jsonBody(req, spec)) as { generation: number };
          return json(await front.authorizeReplacement(who, p[2]!, b.generation));
        }
        case "POST /v1/allocations/:id/connection-grants": {
          const who = auth(req);
          return json(await front.createConnectionGrant(who, p[2]!, (await jsonBody(req, spec)) as ConnectionGrantBody), 201);
        }
        case "DELETE /v1/allocations/:id/connection-grants/:grantId":
          await front.revokeConnectionGrant(auth(req), p[2]!, p[4]!);
          return new Response(null, { status: 204 });
        case "GET /v1/connections/:id/connect":
          // This host serves no WebSockets: the long-poll routes carry the same messages.
          await front.authenticateEndpoint(req.headers.get("authorization"), p[2]!);
          throw new BeachballError("UPGRADE_REQUIRED", "rendezvous WebSockets are not served by this host; use POST /v1/connections/{id}/poll and /messages");
        case "POST /v1/connections/:id/relay-tokens":
          return json(await front.connectionRelayTokens(p[2]!, await front.authenticateEndpoint(req.headers.get("authorization"), p[2]!)));
        case "POST /v1/connections/:id/poll":
        case "POST /v1/connections/:id/messages": {
          const role = await front.authenticateEndpoint(req.headers.get("authorization"), p[2]!);
          if (p[3] === "poll") return json(await front.connectionPoll(p[2]!, role, (await jsonBody(req, spec)) as ConnectionPollBody));
          return json(await front.connectionMessages(p[2]!, role, (await jsonBody(req, spec)) as ConnectionMessagesBody));
        }
        case "POST /v1/hosts/:id/enrollment-tokens": {
          const who = auth(req);
          const b = (await jsonBody(req, spec)) as { ttlSeconds?: number };
          return json(await front.createEnrollmentToken(who, p[2]!, b.ttlSeconds ?? 3600), 201);
        }
        case "GET /v1/hosts":
          return json({ items: await front.hosts(auth(req)) });
        case "POST /v1/hosts/:id/activate":
          return json(await front.setHostState(auth(req), p[2]!, "active"));
        case "POST /v1/hosts/:id/drain":
          return json(await front.setHostState(auth(req), p[2]!, "draining"));
        case "POST /v1/hosts/:id/disable":
          return json(await front.setHostState(auth(req), p[2]!, "disabled"));
        case "GET /v1/operations/metrics":
          return new Response(await front.metrics(auth(req)), { headers: { "content-type": "text/plain; version=0.0.4" } });
        case "GET /v1/operations/alerts": {
          const who = auth(req);
          return json({ items: await front.alerts(who, intParam(url, "after", 0, 0, Number.MAX_SAFE_INTEGER), intParam(url, "limit", 100, 1, MAX_PAGE_SIZE)) });
        }
        case "POST /v1/agents/enroll":
          return json(await front.enroll((await jsonBody(req, spec)) as EnrollBody), 201);
        case "POST /v1/agents/poll":
        case "POST /v1/agents/messages": {
          const hostId = await front.authenticateHost(req.headers.get("authorization"));
          const env = (await jsonBody(req, spec)) as Envelope;
          return json(await front.agentEnvelope(hostId, { ...env, type: p[2] === "poll" ? "poll" : "messages" }));
        }
        case "POST /v1/agents/logs": {
          const hostId = await front.authenticateHost(req.headers.get("authorization"));
          return json(await front.pushLogs(hostId, (await jsonBody(req, spec)) as LogPushBody));
        }
        default: {
          // Same answer as the embedded host's guard (edge.ts): a known path with another method is 405 with Allow.
          const allow = allowedMethods(url.pathname).join(", ");
          if (!allow) return problem("NOT_FOUND", "no such route");
          const res = problem("METHOD_NOT_ALLOWED", `this path allows ${allow}`, { allow });
          res.headers.set("allow", allow);
          return res;
        }
      }
    } catch (e) {
      if (e instanceof BeachballError) return problem(e.code, e.message, e.extra);
      console.error("beachball scheduler: unhandled error", e);
      return problem("INTERNAL", "internal error");
    }
  };
}
