/**
 * The scheduler's HTTP surface as a plain fetch handler, for hosts where
 * Elysia cannot run: workerd forbids code generation (`new Function`),
 * which Elysia's compiled handlers and TypeBox's compiled checks use. Same
 * routes, same TypeBox schemas (interpreted with `Value`), same problem+json
 * errors as ./app.ts; the embedded host serves ./app.ts.
 * Must never: hold a business rule (each route calls one front method), or
 * echo a request body in an error.
 */
import type { TSchema } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { Type } from "@sinclair/typebox";
import { BeachballError, type ErrorCode } from "../protocol/errors.ts";
import { BootstrapBody, CreateAllocationBody, EnrollBody, EnrollmentTokenBody, MAX_PAGE_SIZE, MAX_REQUEST_BODY_BYTES } from "../protocol/api.ts";
import { Envelope, MAX_ENVELOPE_BYTES } from "../protocol/agent.ts";
import { LogPushBody, MAX_LOG_PUSH_BODY_BYTES } from "../protocol/logs.ts";
import type { SchedulerFront } from "./front.ts";
import { ConnectionGrantBody, ConnectionMessagesBody, ConnectionPollBody, MAX_CONNECTION_BODY_BYTES } from "../protocol/connection.ts";
import { openApiDocument } from "./openapi.ts";
import { ROUTES } from "./routes.ts";

/** The methods the route table allows on `pathname` (empty: no such path). */
function allowedMethods(pathname: string): string[] {
  const parts = pathname.split("/");
  const out = new Set<string>();
  for (const r of Object.values(ROUTES)) {
    const segs = r.path.split("/");
    if (segs.length === parts.length && segs.every((seg, i) => (seg.startsWith(":") ? parts[i] !== "" : seg === parts[i]))) out.add(r.method);
  }
  return [...out].sort();
}

function problem(code: ErrorCode, detail: string, extra?: Record<string, unknown>): Response {
  const err = new BeachballError(code, detail, extra);
  const headers: Record<string, string> = { "content-type": "application/problem+json" };
  const retry = extra?.["retryAfterSeconds"];
  if (typeof retry === "number") headers["retry-after"] = String(retry);
  return new Response(JSON.stringify(err.toProblem()), { status: err.status, headers });
}

function json(v: unknown, status = 200): Response {
  return new Response(JSON.stringify(v), { status, headers: { "content-type": "application/json" } });
}

async function body<S extends TSchema>(req: Request, schema: S, limit: number): Promise<unknown> {
  const text = await req.text();
  if (text.length > limit) throw new BeachballError(limit === MAX_ENVELOPE_BYTES ? "ENVELOPE_TOO_LARGE" : "BODY_TOO_LARGE", `request body over ${limit} bytes`);
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new BeachballError("MALFORMED_JSON", "request body is not valid JSON");
  }
  if (!Value.Check(schema, v)) {
    const first = [...Value.Errors(schema, v)][0];
    throw new BeachballError("VALIDATION_FAILED", first ? `${first.path || "/"}: ${first.message}` : "request does not match the schema");
  }
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

const Generation = Type.Object({ generation: Type.Integer({ minimum: 1 }) }, { additionalProperties: false });

/** Builds the fetch handler over one front. */
export function fetchRouter(front: SchedulerFront): (req: Request) => Promise<Response> {
  const auth = (req: Request) => front.authenticate(req.headers.get("authorization"));
  return async (req) => {
    const url = new URL(req.url);
    const p = url.pathname.split("/").filter(Boolean);
    const m = req.method;
    try {
      const param = (s: string, i: number) => {
        if (p[0] !== "v1") return s;
        if (i === 2 && (p[1] === "allocations" || p[1] === "hosts" || p[1] === "connections")) return ":id";
        if (i === 4 && p[1] === "allocations" && p[3] === "connection-grants") return ":grantId";
        return s;
      };
      const route = `${m} /${p.map(param).join("/")}`;
      switch (route) {
        case "GET /healthz":
          return json({ ok: true });
        case "GET /openapi.json":
          return json(openApiDocument());
        case "GET /v1/.well-known/beachball":
          return json(front.wellKnown());
        case "POST /v1/allocations": {
          const who = auth(req);
          const r = await front.createAllocation(who, (await body(req, CreateAllocationBody, MAX_REQUEST_BODY_BYTES)) as CreateAllocationBody);
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
          return json(await front.deliverBootstrap(who, p[2]!, (await body(req, BootstrapBody, MAX_REQUEST_BODY_BYTES)) as BootstrapBody));
        }
        case "POST /v1/allocations/:id/replacement-authorizations": {
          const who = auth(req);
          const b = (await body(req, Generation, MAX_REQUEST_BODY_BYTES)) as { generation: number };
          return json(await front.authorizeReplacement(who, p[2]!, b.generation));
        }
        case "POST /v1/allocations/:id/connection-grants": {
          const who = auth(req);
          return json(await front.createConnectionGrant(who, p[2]!, (await body(req, ConnectionGrantBody, MAX_REQUEST_BODY_BYTES)) as ConnectionGrantBody), 201);
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
          if (p[3] === "poll") return json(await front.connectionPoll(p[2]!, role, (await body(req, ConnectionPollBody, MAX_CONNECTION_BODY_BYTES)) as ConnectionPollBody));
          return json(await front.connectionMessages(p[2]!, role, (await body(req, ConnectionMessagesBody, MAX_CONNECTION_BODY_BYTES)) as ConnectionMessagesBody));
        }
        case "POST /v1/hosts/:id/enrollment-tokens": {
          const who = auth(req);
          const b = (await body(req, EnrollmentTokenBody, MAX_REQUEST_BODY_BYTES)) as { ttlSeconds?: number };
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
          return json(await front.enroll((await body(req, EnrollBody, MAX_REQUEST_BODY_BYTES)) as EnrollBody), 201);
        case "POST /v1/agents/poll":
        case "POST /v1/agents/messages": {
          const hostId = await front.authenticateHost(req.headers.get("authorization"));
          const env = (await body(req, Envelope, MAX_ENVELOPE_BYTES)) as Envelope;
          return json(await front.agentEnvelope(hostId, { ...env, type: p[2] === "poll" ? "poll" : "messages" }));
        }
        case "POST /v1/agents/logs": {
          const hostId = await front.authenticateHost(req.headers.get("authorization"));
          return json(await front.pushLogs(hostId, (await body(req, LogPushBody, MAX_LOG_PUSH_BODY_BYTES)) as LogPushBody));
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
