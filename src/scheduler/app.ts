/**
 * The scheduler's HTTP surface (Elysia). Routes only translate: validate with
 * TypeBox (unknown fields rejected), call one Worker method, map the result
 * or the stable error code to HTTP with an RFC 9457 problem+json body.
 * Must never: hold a business rule, or echo a request body in an error.
 */
import { Elysia, t } from "elysia";
import { BeachballError, type ErrorCode } from "../protocol/errors.ts";
import { BootstrapBody, CreateAllocationBody, EnrollBody, EnrollmentTokenBody, MAX_PAGE_SIZE, MAX_REQUEST_BODY_BYTES } from "../protocol/api.ts";
import { Envelope, MAX_ENVELOPE_BYTES } from "../protocol/agent.ts";
import type { SchedulerWorker } from "./worker.ts";

function problem(code: ErrorCode, detail: string, extra?: Record<string, unknown>): Response {
  const err = new BeachballError(code, detail, extra);
  const headers: Record<string, string> = { "content-type": "application/problem+json" };
  const retry = extra?.["retryAfterSeconds"];
  if (typeof retry === "number") headers["retry-after"] = String(retry);
  return new Response(JSON.stringify(err.toProblem()), { status: err.status, headers });
}

const Page = t.Object(
  { cursor: t.Optional(t.String({ maxLength: 64 })), limit: t.Optional(t.Numeric({ minimum: 1, maximum: MAX_PAGE_SIZE })) },
  { additionalProperties: false },
);
const EventsQuery = t.Object(
  { after: t.Optional(t.Numeric({ minimum: 0 })), limit: t.Optional(t.Numeric({ minimum: 1, maximum: MAX_PAGE_SIZE })) },
  { additionalProperties: false },
);

/** Builds the Elysia app for one Worker. */
export function buildApp(worker: SchedulerWorker) {
  return new Elysia({ normalize: false })
    .onRequest(({ request }) => {
      const len = Number(request.headers.get("content-length") ?? "0");
      const limit = new URL(request.url).pathname.startsWith("/v1/agents/") ? MAX_ENVELOPE_BYTES : MAX_REQUEST_BODY_BYTES;
      if (len > limit) return problem(limit === MAX_ENVELOPE_BYTES ? "ENVELOPE_TOO_LARGE" : "BODY_TOO_LARGE", `request body over ${limit} bytes`);
    })
    .onError(({ code, error }) => {
      if (error instanceof BeachballError) return problem(error.code, error.message, error.extra);
      if (code === "VALIDATION") {
        const v = error as { all?: { path?: string; message?: string }[] };
        const first = v.all?.[0];
        return problem("VALIDATION_FAILED", first ? `${first.path || "/"}: ${first.message}` : "request does not match the schema");
      }
      if (code === "PARSE") return problem("MALFORMED_JSON", "request body is not valid JSON");
      if (code === "NOT_FOUND") return problem("NOT_FOUND", "no such route");
      console.error("beachball scheduler: unhandled error", error);
      return problem("INTERNAL", "internal error");
    })
    .get("/healthz", () => {
      // Health reflects storage: a store that cannot be written is not a healthy scheduler.
      const h = worker.health();
      return h.ok ? { ok: true } : problem("STORAGE_UNAVAILABLE", h.detail, { retryAfterSeconds: 5 });
    })
    .get("/v1/.well-known/beachball", () => worker.wellKnown())
    .post(
      "/v1/allocations",
      async ({ body, headers, set }) => {
        const who = worker.authenticate(headers["authorization"]);
        const r = await worker.createAllocation(who, body);
        set.status = r.created ? 201 : 200;
        return r.view;
      },
      { body: CreateAllocationBody },
    )
    .get(
      "/v1/allocations",
      async ({ query, headers }) => worker.listAllocations(worker.authenticate(headers["authorization"]), query.cursor ?? null, query.limit ?? 50),
      { query: Page },
    )
    .get("/v1/allocations/:id", ({ params, headers }) => worker.getAllocation(worker.authenticate(headers["authorization"]), params.id))
    .post("/v1/allocations/:id/release", async ({ params, headers, set }) => {
      const v = await worker.releaseAllocation(worker.authenticate(headers["authorization"]), params.id);
      set.status = 202;
      return v;
    })
    .get(
      "/v1/allocations/:id/events",
      async ({ params, query, headers }) => {
        const items = await worker.events(worker.authenticate(headers["authorization"]), params.id, query.after ?? 0, query.limit ?? 100);
        return { items, nextCursor: items.length ? items[items.length - 1]!.seq : (query.after ?? 0) };
      },
      { query: EventsQuery },
    )
    .post(
      "/v1/allocations/:id/bootstrap",
      ({ params, body, headers }) => worker.deliverBootstrap(worker.authenticate(headers["authorization"]), params.id, body),
      { body: BootstrapBody },
    )
    .post(
      "/v1/hosts/:id/enrollment-tokens",
      async ({ params, body, headers, set }) => {
        set.status = 201;
        return worker.createEnrollmentToken(worker.authenticate(headers["authorization"]), params.id, body.ttlSeconds ?? 3600);
      },
      { body: EnrollmentTokenBody },
    )
    .get("/v1/hosts", async ({ headers }) => ({ items: await worker.hosts(worker.authenticate(headers["authorization"])) }))
    .post("/v1/hosts/:id/activate", ({ params, headers }) => worker.setHostState(worker.authenticate(headers["authorization"]), params.id, "active"))
    .post("/v1/hosts/:id/drain", ({ params, headers }) => worker.setHostState(worker.authenticate(headers["authorization"]), params.id, "draining"))
    .post("/v1/hosts/:id/disable", ({ params, headers }) => worker.setHostState(worker.authenticate(headers["authorization"]), params.id, "disabled"))
    .post(
      "/v1/allocations/:id/replacement-authorizations",
      ({ params, body, headers }) => worker.authorizeReplacement(worker.authenticate(headers["authorization"]), params.id, body.generation),
      { body: t.Object({ generation: t.Integer({ minimum: 1 }) }, { additionalProperties: false }) },
    )
    .get(
      "/v1/operations/metrics",
      async ({ headers }) => new Response(await worker.metrics(worker.authenticate(headers["authorization"])), { headers: { "content-type": "text/plain; version=0.0.4" } }),
    )
    .get(
      "/v1/operations/alerts",
      async ({ query, headers }) => ({ items: await worker.alerts(worker.authenticate(headers["authorization"]), query.after ?? 0, query.limit ?? 100) }),
      { query: EventsQuery },
    )
    .post(
      "/v1/agents/enroll",
      async ({ body, set }) => {
        set.status = 201;
        return worker.enroll(body);
      },
      { body: EnrollBody },
    )
    .post(
      "/v1/agents/poll",
      async ({ body, headers }) => worker.agentEnvelope(await worker.authenticateHost(headers["authorization"]), { ...body, type: "poll" }),
      { body: Envelope },
    )
    .post(
      "/v1/agents/messages",
      async ({ body, headers }) => worker.agentEnvelope(await worker.authenticateHost(headers["authorization"]), { ...body, type: "messages" }),
      { body: Envelope },
    );
}

/** The app's type, for typed clients and tests. */
export type SchedulerApp = ReturnType<typeof buildApp>;
