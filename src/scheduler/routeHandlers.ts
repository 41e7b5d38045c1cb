/**
 * One handler per route of the route table (routes.ts), for both hosts of
 * the scheduler: the embedded host (serve.ts) and workerd
 * (deploy/workerd/entry.ts) serve the same app (app.ts), and the app
 * answers every admitted request from this map. A handler only
 * translates: it reads the guard's prepared request (edge.ts), calls one
 * front method (front.ts) and maps the result to a JSON body and status;
 * errors are thrown as BeachballError and answered as problem+json by the
 * app. The map is typed `Record<RouteName, …>`, so a route without a
 * handler (or a handler without a route) does not compile: this is a
 * binding of the one table, not a second one (docs/adr/0161-one-front-door.md).
 * Must never: hold a business rule, a path, a method or a query rule (those
 * are routes.ts's and the guard's), or echo a request body in an error.
 */
import { BeachballError } from "../protocol/errors.ts";
import type {
  BootstrapBody,
  CreateAllocationBody,
  ForkAllocationBody,
  EnrollBody,
  EnrollmentTokenBody,
  ReplacementAuthorizationBody,
} from "../protocol/api.ts";
import type { Envelope } from "../protocol/agent.ts";
import type { ConnectionGrantBody, ConnectionMessagesBody, ConnectionPollBody } from "../protocol/connection.ts";
import type { LogPushBody } from "../protocol/logs.ts";
import type { SubmitRunBody } from "../protocol/runs.ts";
import type { UsageGroup } from "../protocol/usage.ts";
import type { CreateLeaseBody, ExtendLeaseBody, ShareLeaseBody, UnshareLeaseBody } from "../protocol/leases.ts";
import type { SchedulerFront } from "./front.ts";
import { endpointOf as endpoint, hostOf as host, principalOf as who, type Prepared } from "./edge.ts";
import type { RouteName } from "./routes.ts";
import { openApiDocument } from "./openapi.ts";
import type { RendezvousSocketData, RendezvousSockets } from "./rendezvousSocket.ts";

/** What a handler answers: a JSON body with its status (default 200), or a ready Response. */
export type Reply = { status?: number; json: unknown } | Response;

/** One route's handler: the guard's prepared request (and the raw request, for an upgrade) to its answer. */
export type Handler = (p: Prepared, request: Request) => Promise<Reply> | Reply;

/** Storage health as /healthz reports it: ok, or why not (`code`: the SQLite code of a recorded fault). */
export interface StorageHealth {
  ok: boolean;
  detail: string;
  code?: string;
}

/**
 * The WebSocket side of `GET /v1/connections/{id}/connect`: the sockets'
 * gate and the server's upgrade (Bun.serve's `server.upgrade`; serve.ts).
 * Absent (workerd, tests on `app.handle`): the route answers
 * UPGRADE_REQUIRED and names the long-poll routes instead.
 */
export interface RendezvousUpgrade {
  sockets: RendezvousSockets;
  upgrade(request: Request, data: RendezvousSocketData): boolean;
}

/** What the handlers call: the front, the host's storage health and its WebSocket upgrade (or none). */
export interface HandlerPorts {
  front: SchedulerFront;
  /** The embedded host reports its store (worker.ts); a host without one (workerd) answers ok. */
  health: () => StorageHealth;
  rendezvous: RendezvousUpgrade | null;
}

const id = (p: Prepared) => p.params["id"]!;
const num = (p: Prepared, name: string, fallback: number) => (p.query[name] as number | undefined) ?? fallback;

/** The routes anyone may call: health, the API document, discovery. */
function publicHandlers(ports: HandlerPorts) {
  const document = openApiDocument();
  return {
    openapi: () => ({ json: document }),
    healthz: () => {
      // Health reflects storage: a store that cannot be written is not a healthy scheduler.
      const h = ports.health();
      // Real writes, not the probe alone: a recorded fault of a real call or commit stands until a full-size probe commits (runtime/embedded/storageHealth.ts).
      if (!h.ok)
        throw new BeachballError("STORAGE_UNAVAILABLE", h.detail, {
          retryAfterSeconds: 5,
          ...(h.code ? { sqliteCode: h.code } : {}),
        });
      return { json: { ok: true } };
    },
    wellKnown: () => ({ json: ports.front.wellKnown() }),
  } satisfies Partial<Record<RouteName, Handler>>;
}

/** The routes of runs (issue 22), for their owner. */
function runHandlers(front: SchedulerFront) {
  return {
    submitRun: async (p) => {
      const r = await front.submitRun(who(p), p.body as SubmitRunBody);
      return { status: r.created ? 201 : 200, json: r.view };
    },
    listRuns: async (p) => ({
      json: await front.listRuns(who(p), (p.query["cursor"] as number | undefined) ?? null, num(p, "limit", 50)),
    }),
    getRun: async (p) => ({ json: await front.getRun(who(p), id(p)) }),
    cancelRun: async (p) => ({ status: 202, json: await front.cancelRun(who(p), id(p)) }),
    runEvents: async (p) => ({
      json: {
        items: await front.runEvents(
          who(p),
          id(p),
          num(p, "after", 0),
          num(p, "limit", 100),
          num(p, "follow", 0) === 1,
        ),
      },
    }),
    usage: async (p) => ({
      json: await front.usage(
        who(p),
        p.query["from"] as number | undefined,
        p.query["to"] as number | undefined,
        ((p.query["by"] as string | undefined) ?? "tenant") as UsageGroup,
      ),
    }),
    runLogs: async (p) => ({
      json: await front.readRunLog(who(p), id(p), num(p, "offset", 0), num(p, "follow", 0) === 1),
    }),
  } satisfies Partial<Record<RouteName, Handler>>;
}

/** The routes of leases (issue 22), for their owner and the principals they are shared with. */
function leaseHandlers(front: SchedulerFront) {
  const me = (p: Prepared) => who(p).id;
  return {
    createLease: async (p) => {
      const r = await front.createLease(who(p), p.body as CreateLeaseBody);
      return { status: r.created ? 201 : 200, json: r.view };
    },
    listLeases: async (p) => ({ json: { items: await front.leases.list(me(p)) } }),
    getLease: async (p) => ({ json: await front.leases.get(me(p), id(p)) }),
    leaseEvents: async (p) => ({
      json: { items: await front.leases.events(me(p), id(p), num(p, "after", 0), num(p, "limit", 100)) },
    }),
    heartbeatLease: async (p) => ({ json: await front.leases.heartbeat(me(p), id(p)) }),
    extendLease: async (p) => ({
      json: await front.leases.extend(me(p), id(p), (p.body as ExtendLeaseBody).ttlSeconds),
    }),
    releaseLease: async (p) => ({ json: await front.leases.release(me(p), id(p)) }),
    shareLease: async (p) => {
      const b = p.body as ShareLeaseBody;
      return { json: await front.leases.share(me(p), id(p), b.principal, b.access) };
    },
    unshareLease: async (p) => ({
      json: await front.leases.share(me(p), id(p), (p.body as UnshareLeaseBody).principal, null),
    }),
  } satisfies Partial<Record<RouteName, Handler>>;
}

/** The routes on one allocation (and its list), for its owner. */
function allocationHandlers(front: SchedulerFront) {
  return {
    createAllocation: async (p) => {
      const r = await front.createAllocation(who(p), p.body as CreateAllocationBody);
      return { status: r.created ? 201 : 200, json: r.view };
    },
    listAllocations: async (p) => ({
      json: await front.listAllocations(who(p), (p.query["cursor"] as string | undefined) ?? null, num(p, "limit", 50)),
    }),
    getAllocation: async (p) => ({ json: await front.getAllocation(who(p), id(p)) }),
    releaseAllocation: async (p) => ({ status: 202, json: await front.releaseAllocation(who(p), id(p)) }),
    pauseAllocation: async (p) => ({ status: 202, json: await front.pauseAllocation(who(p), id(p)) }),
    suspendAllocation: async (p) => ({ status: 202, json: await front.suspendAllocation(who(p), id(p)) }),
    resumeAllocation: async (p) => ({ status: 202, json: await front.resumeAllocation(who(p), id(p)) }),
    forkAllocation: async (p) => {
      const r = await front.forkAllocation(who(p), id(p), p.body as ForkAllocationBody);
      return { status: r.created ? 201 : 200, json: { items: r.items } };
    },
    events: async (p) => {
      const after = num(p, "after", 0);
      const items = await front.events(who(p), id(p), after, num(p, "limit", 100), num(p, "follow", 0) === 1);
      return { json: { items, nextCursor: items.length ? items[items.length - 1]!.seq : after } };
    },
    logs: async (p) => ({ json: await front.readLog(who(p), id(p), num(p, "offset", 0), num(p, "follow", 0) === 1) }),
    bootstrap: async (p) => ({ json: await front.deliverBootstrap(who(p), id(p), p.body as BootstrapBody) }),
    replacementAuthorizations: async (p) => ({
      json: await front.authorizeReplacement(who(p), id(p), (p.body as ReplacementAuthorizationBody).generation),
    }),
    createConnectionGrant: async (p) => ({
      status: 201,
      json: await front.createConnectionGrant(who(p), id(p), p.body as ConnectionGrantBody),
    }),
    revokeConnectionGrant: async (p) => {
      await front.revokeConnectionGrant(who(p), id(p), p.params["grantId"]!);
      return new Response(null, { status: 204 });
    },
  } satisfies Partial<Record<RouteName, Handler>>;
}

/** The rendezvous routes of one Connection, for the holders of its endpoint tokens. */
function connectionHandlers(front: SchedulerFront, rendezvous: RendezvousUpgrade | null) {
  return {
    connectionPoll: async (p) => {
      const e = endpoint(p);
      return { json: await front.connectionPoll(e.connectionId, e.role, p.body as ConnectionPollBody) };
    },
    connectionConnect: (p, request) => {
      const e = endpoint(p);
      if (!rendezvous)
        throw new BeachballError(
          "UPGRADE_REQUIRED",
          "rendezvous WebSockets are not served by this host; use POST /v1/connections/{id}/poll and /messages",
        );
      if (request.headers.get("upgrade")?.toLowerCase() !== "websocket")
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
      return { json: await front.connectionRelayTokens(e.connectionId, e.role) };
    },
    connectionMessages: async (p) => {
      const e = endpoint(p);
      return { json: await front.connectionMessages(e.connectionId, e.role, p.body as ConnectionMessagesBody) };
    },
  } satisfies Partial<Record<RouteName, Handler>>;
}

/** The operators' routes: hosts, enrollment tokens, metrics, alerts. */
function operatorHandlers(front: SchedulerFront) {
  return {
    enrollmentTokens: async (p) => ({
      status: 201,
      json: await front.createEnrollmentToken(who(p), id(p), (p.body as EnrollmentTokenBody).ttlSeconds ?? 3600),
    }),
    hosts: async (p) => ({ json: { items: await front.hosts(who(p)) } }),
    activateHost: async (p) => ({ json: await front.setHostState(who(p), id(p), "active") }),
    drainHost: async (p) => ({ json: await front.setHostState(who(p), id(p), "draining") }),
    disableHost: async (p) => ({ json: await front.setHostState(who(p), id(p), "disabled") }),
    metrics: async (p) =>
      new Response(await front.metrics(who(p)), { headers: { "content-type": "text/plain; version=0.0.4" } }),
    alerts: async (p) => ({ json: { items: await front.alerts(who(p), num(p, "after", 0), num(p, "limit", 100)) } }),
  } satisfies Partial<Record<RouteName, Handler>>;
}

/** The host agents' routes: enroll, poll, messages, log pushes. */
function agentHandlers(front: SchedulerFront) {
  return {
    enroll: async (p) => ({ status: 201, json: await front.enroll(p.body as EnrollBody) }),
    poll: async (p) => ({ json: await front.agentEnvelope(host(p), { ...(p.body as Envelope), type: "poll" }) }),
    messages: async (p) => ({
      json: await front.agentEnvelope(host(p), { ...(p.body as Envelope), type: "messages" }),
    }),
    pushLogs: async (p) => ({ json: await front.pushLogs(host(p), p.body as LogPushBody) }),
  } satisfies Partial<Record<RouteName, Handler>>;
}

/** The handler of every route (see the module header); a missing or extra route is a type error. */
export function routeHandlers(ports: HandlerPorts): Record<RouteName, Handler> {
  const all = {
    ...publicHandlers(ports),
    ...allocationHandlers(ports.front),
    ...runHandlers(ports.front),
    ...leaseHandlers(ports.front),
    ...connectionHandlers(ports.front, ports.rendezvous),
    ...operatorHandlers(ports.front),
    ...agentHandlers(ports.front),
  };
  return all satisfies Record<RouteName, Handler>;
}
