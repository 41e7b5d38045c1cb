/**
 * The scheduler's HTTP surface (Elysia), the one front door of both hosts:
 * the embedded host (serve.ts, under Bun.serve) and workerd
 * (deploy/workerd/entry.ts) build this same app over their front
 * (docs/adr/0161-one-front-door.md). Every request first passes the
 * request guard (edge.ts: route, framing, authentication, path parameters,
 * query, bounded body, schema, in that order), then the per-caller bounds
 * (callerLimits.ts); its route's handler (routeHandlers.ts) then only
 * translates: it calls one front method and maps the result, or the
 * stable error code, to HTTP with an RFC 9457 problem+json body. Every
 * request's body bytes read and every answer's body bytes are counted here
 * (httpBytes.ts), so both hosts count alike.
 *
 * The routes themselves are data (routes.ts): the one route table. The
 * guard runs in Elysia's onRequest hook, before Elysia would parse
 * anything, and its match picks the handler (never Elysia's router, never
 * the Host header); handlers never ask Elysia for a body. A host that
 * forbids code generation (workerd: "EvalError: Code generation from
 * strings disallowed for this context") builds the app with
 * `codeGeneration: false`: Elysia's `aot: false` (no compiled handler) and
 * TypeBox's interpreted schema checks; both accept and refuse alike.
 * Must never: hold a business rule, or echo a request body in an error.
 */
import { Elysia } from "elysia";
import { BeachballError } from "../protocol/errors.ts";
import { problem, problemResponse } from "../protocol/problem.ts";
import type { SchedulerFront } from "./front.ts";
import { RequestGuard, type RefusedBodyDrain } from "./edge.ts";
import { ROUTES, type RouteName } from "./routes.ts";
import { CallerLimiter, isFollow } from "./callerLimits.ts";
import { HttpByteCounters } from "./httpBytes.ts";
import { routeHandlers, type RendezvousUpgrade, type Reply, type StorageHealth } from "./routeHandlers.ts";

export type { RendezvousUpgrade, StorageHealth } from "./routeHandlers.ts";

/** How a host builds the front door (every field has the default a host without the feature wants). */
export interface FrontDoorOptions {
  /** Serves the WebSocket route (see RendezvousUpgrade); default none: UPGRADE_REQUIRED. */
  rendezvous?: RendezvousUpgrade | null;
  /** Bounds each caller's requests in flight (callerLimits.ts); default the shipped bounds. */
  limiter?: CallerLimiter;
  /** Storage health for /healthz (the embedded host's store, worker.ts); default always ok. */
  health?: () => StorageHealth;
  /** Whether the host allows code generation (`new Function`): true on Bun (default), false on workerd. */
  codeGeneration?: boolean;
  /** When the guard drains a refused request's unread body (edge.ts RefusedBodyDrain): `on-close` on Bun (default), `always` on workerd. */
  drainRefusedBodies?: RefusedBodyDrain;
}

const HEALTHY: StorageHealth = { ok: true, detail: "" };

/**
 * Builds the Elysia app over one front (see FrontDoorOptions). Routing is the guard's match on the
 * request target (edge.ts, requestTarget.ts), and the handler answers from
 * the onRequest hook: Elysia's own router is not used, because it cuts
 * `request.url` at a fixed offset (Elysia 1.4: `url.indexOf("/", 11)`), so
 * a short Host header (`Host: x`) sent every request to 404 (issue 18 item 20).
 */
export function buildApp(front: SchedulerFront, opts: FrontDoorOptions = {}) {
  const codeGeneration = opts.codeGeneration ?? true;
  const limiter = opts.limiter ?? new CallerLimiter();
  const bytes = new HttpByteCounters(front.env.metrics);
  const guard = new RequestGuard<RouteName>(
    ROUTES,
    {
      principal: (h) => front.authenticate(h),
      host: (h) => front.authenticateHost(h),
      endpoint: (h, c) => front.authenticateEndpoint(h, c),
    },
    codeGeneration ? "compiled" : "interpreted",
    opts.drainRefusedBodies ?? "on-close",
    (n) => bytes.request(n),
  );
  const handle = routeHandlers({
    front,
    health: opts.health ?? (() => HEALTHY),
    rendezvous: opts.rendezvous ?? null,
  });
  // aot: false only where code generation is forbidden; the embedded host keeps Elysia's default.
  return new Elysia({ normalize: false, ...(codeGeneration ? {} : { aot: false }) })
    .onRequest(async ({ request }) => bytes.response(await answer(request), request.method))
    .onError(({ code, error, request }) => bytes.response(failure(code, error), request.method));

  async function answer(request: Request): Promise<Response> {
    const p = await guard.admit(request);
    if (p instanceof Response) return p;
    // Per-caller bounds (callerLimits.ts): a caller past them is shed with 429 before any object is called.
    const release = limiter.admit(p.caller, isFollow(p.route, p.query));
    if (release instanceof Response) return release;
    let r: Reply;
    try {
      // HEAD runs the GET handler; the server (Bun, workerd) sends its status and headers without the body.
      r = await handle[p.route](p, request);
    } finally {
      release();
    }
    if (r instanceof Response) return r;
    return bytes.json(JSON.stringify(r.json), r.status ?? 200, request.method);
  }

  function failure(code: unknown, error: unknown): Response {
    if (error instanceof BeachballError) return problemResponse(error);
    if (code === "NOT_FOUND") return problem("NOT_FOUND", "no such route");
    front.env.log.error("unhandled error", {
      error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
    });
    return problem("INTERNAL", "internal error");
  }
}

/** The app's type, for typed clients and tests. */
export type SchedulerApp = ReturnType<typeof buildApp>;
