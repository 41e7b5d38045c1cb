/**
 * The scheduler's HTTP surface (Elysia). Every request first passes the
 * request guard (edge.ts: route, framing, authentication, query, bounded
 * body, schema, in that order); a route handler then only translates: it
 * calls one Worker method and maps the result, or the stable error code, to
 * HTTP with an RFC 9457 problem+json body.
 *
 * The routes themselves are data (routes.ts); this file binds one handler
 * to each. The guard runs in Elysia's onRequest hook, before Elysia would
 * parse anything, and its match picks the handler (never Elysia's router,
 * never the Host header); handlers never ask Elysia for a body.
 * Must never: hold a business rule, or echo a request body in an error.
 */
import { Elysia } from "elysia";
import { BeachballError } from "../protocol/errors.ts";
import { problem, problemResponse } from "../protocol/problem.ts";
import type {
  BootstrapBody,
  CreateAllocationBody,
  EnrollBody,
  EnrollmentTokenBody,
  ReplacementAuthorizationBody,
} from "../protocol/api.ts";
import type { Envelope } from "../protocol/agent.ts";
import type { ConnectionGrantBody, ConnectionMessagesBody, ConnectionPollBody } from "../protocol/connection.ts";
import type { LogPushBody } from "../protocol/logs.ts";
import type { SchedulerWorker } from "./worker.ts";
import { endpointOf as endpoint, hostOf as host, principalOf as who, RequestGuard, type Prepared } from "./edge.ts";
import { ROUTES, type RouteName } from "./routes.ts";
import { openApiDocument } from "./openapi.ts";
import { CallerLimiter, isFollow } from "./callerLimits.ts";
import type { RendezvousSocketData, RendezvousSockets } from "./rendezvousSocket.ts";

/** What a handler answers: a JSON body with its status, or a ready Response. */
type Reply = { status?: number; json: unknown } | Response;

const id = (p: Prepared) => p.params["id"]!;
const num = (p: Prepared, name: string, fallback: number) => (p.query[name] as number | undefined) ?? fallback;

/**
 * The WebSocket side of `GET /v1/connections/{id}/connect`: the sockets'
 * gate and the server's upgrade (Bun.serve's `server.upgrade`; serve.ts).
 * Absent (tests on `app.handle`, other hosts): the route answers
 * UPGRADE_REQUIRED.
 */
export interface RendezvousUpgrade {
  sockets: RendezvousSockets;
  upgrade(request: Request, data: RendezvousSocketData): boolean;
}

/** One handler per route name. */
function handlers(
  worker: SchedulerWorker,
  rendezvous: RendezvousUpgrade | null,
): Record<RouteName, (p: Prepared, request: Request) => Promise<Reply> | Reply> {
  const document = openApiDocument();
  return {
    openapi: () => ({ json: document }),
    healthz: () => {
      // Health reflects storage: a store that cannot be written is not a healthy scheduler.
      const h = worker.health();
      // Real writes, not the probe alone: a recorded fault of a real call or commit stands until a full-size probe commits (runtime/embedded/storageHealth.ts).
      if (!h.ok)
        throw new BeachballError("STORAGE_UNAVAILABLE", h.detail, {
          retryAfterSeconds: 5,
          ...(h.code ? { sqliteCode: h.code } : {}),
        });
      return { json: { ok: true } };
    },
    wellKnown: () => ({ json: worker.wellKnown() }),
    createAllocation: async (p) => {
      const r = await worker.createAllocation(who(p), p.body as CreateAllocationBody);
      return { status: r.created ? 201 : 200, json: r.view };
    },
    listAllocations: async (p) => ({
      json: await worker.listAllocations(
        who(p),
        (p.query["cursor"] as string | undefined) ?? null,
        num(p, "limit", 50),
      ),
    }),
    getAllocation: async (p) => ({ json: await worker.getAllocation(who(p), id(p)) }),
    releaseAllocation: async (p) => ({ status: 202, json: await worker.releaseAllocation(who(p), id(p)) }),
    events: async (p) => {
      const after = num(p, "after", 0);
      const items = await worker.events(who(p), id(p), after, num(p, "limit", 100));
      return { json: { items, nextCursor: items.length ? items[items.length - 1]!.seq : after } };
    },
    logs: async (p) => ({ json: await worker.readLog(who(p), id(p), num(p, "offset", 0), num(p, "follow", 0) === 1) }),
    bootstrap: async (p) => ({ json: await worker.deliverBootstrap(who(p), id(p), p.body as BootstrapBody) }),
    createConnectionGrant: async (p) => ({
      status: 201,
      json: await worker.createConnectionGrant(who(p), id(p), p.body as ConnectionGrantBody),
    }),
    revokeConnectionGrant: async (p) => {
      await worker.revokeConnectionGrant(who(p), id(p), p.params["grantId"]!);
      return new Response(null, { status: 204 });
    },
    connectionPoll: async (p) => {
      const e = endpoint(p);
      return { json: await worker.connectionPoll(e.connectionId, e.role, p.body as ConnectionPollBody) };
    },
    connectionConnect: (p, request) => {
      const e = endpoint(p);
      if (request.headers.get("upgrade")?.toLowerCase() !== "websocket" || !rendezvous)
        throw new BeachballError(
          "UPGRADE_REQUIRED",
          "this route speaks WebSocket only: send an Upgrade: websocket request",
        );
      rendezvous.sockets.admit(e.connectionId, e.role);
      if (!rendezvous.upgrade(request, { connectionId: e.connectionId, role: e.role, after: num(p, "after", 0) }))
        throw new BeachballError("UPGRADE_REQUIRED", "the WebSocket upgrade failed (a malformed handshake)");
      // Bun ignores this answer once the upgrade succeeded: the socket is rendezvousSocket.ts's.
      return new Response(null, { status: 200 });
    },
    connectionRelayTokens: async (p) => {
      const e = endpoint(p);
      return { json: await worker.connectionRelayTokens(e.connectionId, e.role) };
    },
    connectionMessages: async (p) => {
      const e = endpoint(p);
      return { json: await worker.connectionMessages(e.connectionId, e.role, p.body as ConnectionMessagesBody) };
    },
    replacementAuthorizations: async (p) => ({
      json: await worker.authorizeReplacement(who(p), id(p), (p.body as ReplacementAuthorizationBody).generation),
    }),
    enrollmentTokens: async (p) => ({
      status: 201,
      json: await worker.createEnrollmentToken(who(p), id(p), (p.body as EnrollmentTokenBody).ttlSeconds ?? 3600),
    }),
    hosts: async (p) => ({ json: { items: await worker.hosts(who(p)) } }),
    activateHost: async (p) => ({ json: await worker.setHostState(who(p), id(p), "active") }),
    drainHost: async (p) => ({ json: await worker.setHostState(who(p), id(p), "draining") }),
    disableHost: async (p) => ({ json: await worker.setHostState(who(p), id(p), "disabled") }),
    metrics: async (p) =>
      new Response(await worker.metrics(who(p)), { headers: { "content-type": "text/plain; version=0.0.4" } }),
    alerts: async (p) => ({ json: { items: await worker.alerts(who(p), num(p, "after", 0), num(p, "limit", 100)) } }),
    enroll: async (p) => ({ status: 201, json: await worker.enroll(p.body as EnrollBody) }),
    poll: async (p) => ({ json: await worker.agentEnvelope(host(p), { ...(p.body as Envelope), type: "poll" }) }),
    messages: async (p) => ({
      json: await worker.agentEnvelope(host(p), { ...(p.body as Envelope), type: "messages" }),
    }),
    pushLogs: async (p) => ({ json: await worker.pushLogs(host(p), p.body as LogPushBody) }),
  };
}

/**
 * Builds the Elysia app for one Worker; `rendezvous` serves the WebSocket
 * route (see RendezvousUpgrade); `limiter` bounds each caller's requests in
 * flight (callerLimits.ts). Routing is the guard's match on the
 * request target (edge.ts, requestTarget.ts), and the handler answers from
 * the onRequest hook: Elysia's own router is not used, because it cuts
 * `request.url` at a fixed offset (Elysia 1.4: `url.indexOf("/", 11)`), so
 * a short Host header (`Host: x`) sent every request to 404 (issue 18 item 20).
 */
export function buildApp(
  worker: SchedulerWorker,
  rendezvous: RendezvousUpgrade | null = null,
  limiter = new CallerLimiter(),
) {
  const guard = new RequestGuard<RouteName>(ROUTES, {
    principal: (h) => worker.authenticate(h),
    host: (h) => worker.authenticateHost(h),
    endpoint: (h, c) => worker.authenticateEndpoint(h, c),
  });
  const handle = handlers(worker, rendezvous);
  return new Elysia({ normalize: false })
    .onRequest(async ({ request }) => {
      const p = await guard.admit(request);
      if (p instanceof Response) return p;
      // Per-caller bounds (callerLimits.ts): a caller past them is shed with 429 before any object is called.
      const release = limiter.admit(p.caller, isFollow(p.route, p.query));
      if (release instanceof Response) return release;
      let r: Reply;
      try {
        // HEAD runs the GET handler; Bun sends its status and headers without the body.
        r = await handle[p.route](p, request);
      } finally {
        release();
      }
      if (r instanceof Response) return r;
      return new Response(JSON.stringify(r.json), {
        status: r.status ?? 200,
        headers: { "content-type": "application/json" },
      });
    })
    .onError(({ code, error }) => {
      if (error instanceof BeachballError) return problemResponse(error);
      if (code === "NOT_FOUND") return problem("NOT_FOUND", "no such route");
      worker.env.log.error("unhandled error", {
        error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
      });
      return problem("INTERNAL", "internal error");
    });
}

/** The app's type, for typed clients and tests. */
export type SchedulerApp = ReturnType<typeof buildApp>;
