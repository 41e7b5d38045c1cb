/**
 * The scheduler's HTTP surface as a plain fetch handler, for hosts where
 * Elysia cannot run: workerd forbids code generation (`new Function`),
 * which Elysia's compiled handlers and TypeBox's compiled checks use. Every
 * request is admitted by the same request guard as ./app.ts's (edge.ts:
 * route from the request target, framing, authentication, path parameters,
 * query, media type, bounded body, schema, with the schemas interpreted by
 * TypeBox's `Value`), so both hosts give the same answers to the same bad
 * input; the embedded host serves ./app.ts.
 * Must never: hold a business rule (each route calls one front method), or
 * echo a request body in an error.
 */
import { BeachballError } from "../protocol/errors.ts";
import type {
  BootstrapBody,
  CreateAllocationBody,
  EnrollBody,
  EnrollmentTokenBody,
  ReplacementAuthorizationBody,
} from "../protocol/api.ts";
import type { Envelope } from "../protocol/agent.ts";
import type { LogPushBody } from "../protocol/logs.ts";
import type { SchedulerFront } from "./front.ts";
import type { ConnectionGrantBody, ConnectionMessagesBody, ConnectionPollBody } from "../protocol/connection.ts";
import { openApiDocument } from "./openapi.ts";
import { problem, problemResponse } from "../protocol/problem.ts";
import { ROUTES, type RouteName } from "./routes.ts";
import { endpointOf as endpoint, hostOf as host, principalOf as who, RequestGuard, type Prepared } from "./edge.ts";
import { CallerLimiter, isFollow } from "./callerLimits.ts";

function json(v: unknown, status = 200): Response {
  return new Response(JSON.stringify(v), { status, headers: { "content-type": "application/json" } });
}

const num = (p: Prepared, name: string, fallback: number) => (p.query[name] as number | undefined) ?? fallback;

/** Answers one admitted request: one front method per route. */
async function answer(front: SchedulerFront, p: Prepared<RouteName>): Promise<Response> {
  const id = p.params["id"]!;
  switch (p.route) {
    case "healthz":
      return json({ ok: true });
    case "openapi":
      return json(openApiDocument());
    case "wellKnown":
      return json(front.wellKnown());
    case "createAllocation": {
      const r = await front.createAllocation(who(p), p.body as CreateAllocationBody);
      return json(r.view, r.created ? 201 : 200);
    }
    case "listAllocations":
      return json(
        await front.listAllocations(who(p), (p.query["cursor"] as string | undefined) ?? null, num(p, "limit", 50)),
      );
    case "getAllocation":
      return json(await front.getAllocation(who(p), id));
    case "releaseAllocation":
      return json(await front.releaseAllocation(who(p), id), 202);
    case "events": {
      const after = num(p, "after", 0);
      const items = await front.events(who(p), id, after, num(p, "limit", 100));
      return json({ items, nextCursor: items.length ? items[items.length - 1]!.seq : after });
    }
    case "logs":
      return json(await front.readLog(who(p), id, num(p, "offset", 0), num(p, "follow", 0) === 1));
    case "bootstrap":
      return json(await front.deliverBootstrap(who(p), id, p.body as BootstrapBody));
    case "replacementAuthorizations":
      return json(await front.authorizeReplacement(who(p), id, (p.body as ReplacementAuthorizationBody).generation));
    case "createConnectionGrant":
      return json(await front.createConnectionGrant(who(p), id, p.body as ConnectionGrantBody), 201);
    case "revokeConnectionGrant":
      await front.revokeConnectionGrant(who(p), id, p.params["grantId"]!);
      return new Response(null, { status: 204 });
    case "connectionConnect":
      // This host serves no WebSockets: the long-poll routes carry the same messages.
      endpoint(p);
      throw new BeachballError(
        "UPGRADE_REQUIRED",
        "rendezvous WebSockets are not served by this host; use POST /v1/connections/{id}/poll and /messages",
      );
    case "connectionRelayTokens": {
      const e = endpoint(p);
      return json(await front.connectionRelayTokens(e.connectionId, e.role));
    }
    case "connectionPoll": {
      const e = endpoint(p);
      return json(await front.connectionPoll(e.connectionId, e.role, p.body as ConnectionPollBody));
    }
    case "connectionMessages": {
      const e = endpoint(p);
      return json(await front.connectionMessages(e.connectionId, e.role, p.body as ConnectionMessagesBody));
    }
    case "enrollmentTokens":
      return json(
        await front.createEnrollmentToken(who(p), id, (p.body as EnrollmentTokenBody).ttlSeconds ?? 3600),
        201,
      );
    case "hosts":
      return json({ items: await front.hosts(who(p)) });
    case "activateHost":
      return json(await front.setHostState(who(p), id, "active"));
    case "drainHost":
      return json(await front.setHostState(who(p), id, "draining"));
    case "disableHost":
      return json(await front.setHostState(who(p), id, "disabled"));
    case "metrics":
      return new Response(await front.metrics(who(p)), { headers: { "content-type": "text/plain; version=0.0.4" } });
    case "alerts":
      return json({ items: await front.alerts(who(p), num(p, "after", 0), num(p, "limit", 100)) });
    case "enroll":
      return json(await front.enroll(p.body as EnrollBody), 201);
    case "poll":
      return json(await front.agentEnvelope(host(p), { ...(p.body as Envelope), type: "poll" }));
    case "messages":
      return json(await front.agentEnvelope(host(p), { ...(p.body as Envelope), type: "messages" }));
    case "pushLogs":
      return json(await front.pushLogs(host(p), p.body as LogPushBody));
  }
}

/** Builds the fetch handler over one front. */
export function fetchRouter(front: SchedulerFront, limiter = new CallerLimiter()): (req: Request) => Promise<Response> {
  // Interpreted schema checks: workerd forbids the code generation TypeCompiler uses.
  const guard = new RequestGuard<RouteName>(
    ROUTES,
    {
      principal: (h) => front.authenticate(h),
      host: (h) => front.authenticateHost(h),
      endpoint: (h, c) => front.authenticateEndpoint(h, c),
    },
    "interpreted",
  );
  return async (req) => {
    try {
      const p = await guard.admit(req);
      if (p instanceof Response) return p;
      const release = limiter.admit(p.caller, isFollow(p.route, p.query));
      if (release instanceof Response) return release;
      try {
        return await answer(front, p);
      } finally {
        release();
      }
    } catch (e) {
      if (e instanceof BeachballError) return problemResponse(e);
      console.error("beachball scheduler: unhandled error", e);
      return problem("INTERNAL", "internal error");
    }
  };
}
