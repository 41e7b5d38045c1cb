/**
 * The OpenAPI 3.1 document of the scheduler's HTTP API, generated from the
 * route table (routes.ts) and the TypeBox schemas it names: request bodies
 * with their byte limits, query parameters with their bounds, who may call
 * each route, the success answer's schema and the problem+json errors the
 * request guard (edge.ts) can give. A route added to the table appears here
 * with no other change. Served at `GET /openapi.json`; snapshot in
 * docs/openapi.json, rendered to docs/http-api.md (scripts/api-docs.ts).
 *
 * Why not @elysiajs/openapi: it documents the schemas Elysia itself
 * validates, and this app deliberately gives Elysia none (the guard checks
 * every body before Elysia would parse one, on both hosts: app.ts); the
 * route table is the one source the app and this document share.
 *
 * Spec: "Authentication and identity", "Admission and limits"; OpenAPI
 * 3.1.0 (JSON Schema 2020-12 dialect); RFC 9457 problem details.
 * Must never: publish a token, a manifest value or anything beyond shapes.
 */
import type { TSchema } from "@sinclair/typebox";
import * as api from "../protocol/api.ts";
import * as agent from "../protocol/agent.ts";
import * as responses from "../protocol/responses.ts";
import * as connection from "../protocol/connection.ts";
import { ROUTES, type RouteSpec } from "./routes.ts";
import { ERROR_STATUS } from "../protocol/errors.ts";
import { MAX_FOLLOWS_PER_CALLER, MAX_IN_FLIGHT_PER_CALLER } from "./callerLimits.ts";

/** The API's version as the document names it (the path prefix and `apiVersion` of discovery). */
export const API_VERSION = "v1";

/** A JSON value (the document is plain JSON). */
type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

/** Named schemas, by export name, from the protocol modules (first name wins for identical shapes). */
function namedSchemas(): Map<string, { name: string; schema: TSchema }> {
  const byShape = new Map<string, { name: string; schema: TSchema }>();
  for (const mod of [responses, api, agent, connection] as Record<string, unknown>[]) {
    for (const [name, v] of Object.entries(mod).sort(([a], [b]) => a.localeCompare(b))) {
      if (!isObjectSchema(v) || !/^[A-Z]/.test(name)) continue;
      const key = JSON.stringify(v);
      if (!byShape.has(key)) byShape.set(key, { name, schema: v });
    }
  }
  return byShape;
}

function isObjectSchema(v: unknown): v is TSchema {
  return typeof v === "object" && v !== null && (v as { type?: unknown }).type === "object" && "properties" in v;
}

/** `schema` as plain JSON with every named object schema below the top replaced by a $ref (and collected). */
function toJson(
  schema: unknown,
  names: Map<string, { name: string; schema: TSchema }>,
  used: Set<string>,
  top = true,
): Json {
  if (typeof schema !== "object" || schema === null) return schema as Json;
  if (Array.isArray(schema)) return schema.map((x) => toJson(x, names, used, false));
  if (!top && isObjectSchema(schema)) {
    const named = names.get(JSON.stringify(schema));
    if (named) {
      used.add(named.name);
      return { $ref: `#/components/schemas/${named.name}` };
    }
  }
  const out: Record<string, Json> = {};
  for (const [k, v] of Object.entries(schema)) out[k] = toJson(v, names, used, false);
  return out;
}

/** A reference to the named component for `schema`, or the schema inline. */
function ref(schema: TSchema, names: Map<string, { name: string; schema: TSchema }>, used: Set<string>): Json {
  return toJson(schema, names, used, false);
}

const problemContent = { "application/problem+json": { schema: { $ref: "#/components/schemas/Problem" } } };
const problemAnswer = (description: string): Json => ({ description, content: problemContent });

/** The error answers the guard and handlers can give for one route (beyond `default`). */
function errorAnswers(spec: RouteSpec): Record<string, Json> {
  const out: Record<string, Json> = {};
  const bad: string[] = [];
  if (spec.path.includes("/:")) bad.push("VALIDATION_FAILED for a path parameter that does not match its pattern");
  if (spec.query) bad.push("VALIDATION_FAILED for an unknown, repeated or out-of-range query parameter");
  if (spec.body)
    bad.push(
      "MALFORMED_JSON, JSON_TOO_DEEP or INVALID_CONTENT_LENGTH for an unreadable body; VALIDATION_FAILED for the first schema error, naming the field path (an unknown field lists the allowed ones)",
    );
  if (bad.length) out["400"] = problemAnswer(bad.join("; "));
  if (spec.auth !== "none" && spec.auth !== "enroll")
    out["401"] = {
      description: "UNAUTHENTICATED: missing or unknown bearer token",
      content: problemContent,
      headers: {
        "WWW-Authenticate": {
          description: 'the challenge, always `Bearer realm="beachball"` (RFC 6750 §3)',
          schema: { type: "string" },
        },
      },
    };
  if (spec.auth === "controller" || spec.auth === "operator")
    out["403"] = problemAnswer(`FORBIDDEN: the token's role is not ${spec.auth}`);
  if (spec.auth === "host") out["403"] = problemAnswer("FORBIDDEN: the envelope names another host");
  if (spec.path.includes("/:"))
    out["404"] = problemAnswer(
      "NOT_FOUND: a well-formed ID that names nothing this caller may see (the detail says which: no such allocation, no such grant for this allocation, no such host)",
    );
  if (spec.body)
    out["413"] = problemAnswer(
      `${spec.body.tooLarge}: body over ${spec.body.maxBytes} bytes (a declared Content-Length over it is refused before the body is read)`,
    );
  if (spec.body)
    out["415"] = problemAnswer(
      "UNSUPPORTED_MEDIA_TYPE: Content-Type is not application/json (or the body is content-encoded); refused before the body is read",
    );
  const semantic = (spec.refusals ?? []).filter((c) => ERROR_STATUS[c] === 422);
  if (semantic.length)
    out["422"] = problemAnswer(`${semantic.join(" or ")}: a well-formed request the scheduler cannot act on`);
  if (spec.auth !== "none" && spec.auth !== "enroll")
    out["429"] = {
      description: `CONCURRENCY_LIMITED: this caller already has ${MAX_IN_FLIGHT_PER_CALLER} requests in flight (or ${MAX_FOLLOWS_PER_CALLER} follows of logs or events); shed before any work`,
      content: problemContent,
      headers: { "Retry-After": { description: "seconds to wait before retrying", schema: { type: "integer" } } },
    };
  if (spec.response.status === 101)
    out["426"] = problemAnswer("UPGRADE_REQUIRED: the request asked for no WebSocket upgrade");
  return out;
}

function operation(
  name: string,
  spec: RouteSpec,
  names: Map<string, { name: string; schema: TSchema }>,
  used: Set<string>,
): Json {
  const op: Record<string, Json> = { operationId: name, summary: spec.summary, tags: [tagOf(spec)] };
  const params: Json[] = [];
  for (const seg of spec.path.split("/")) {
    if (seg.startsWith(":"))
      params.push({
        name: seg.slice(1),
        in: "path",
        required: true,
        schema: { type: "string", pattern: spec.params?.[seg.slice(1)]?.source ?? "^$" },
      });
  }
  for (const [q, p] of Object.entries(spec.query ?? {})) {
    params.push({
      name: q,
      in: "query",
      required: false,
      schema:
        p.kind === "integer"
          ? { type: "integer", minimum: p.min, maximum: p.max }
          : { type: "string", pattern: p.pattern.source },
    });
  }
  if (params.length) op["parameters"] = params;
  if (spec.body) {
    op["requestBody"] = {
      required: true,
      description: `Content-Type: application/json only (415 otherwise), at most ${spec.body.maxBytes} bytes (413 ${spec.body.tooLarge} past it)`,
      content: { "application/json": { schema: ref(spec.body.schema, names, used) } },
    };
  }
  const success: Json =
    "schema" in spec.response
      ? {
          description: spec.summary,
          content: { "application/json": { schema: ref(spec.response.schema, names, used) } },
        }
      : "contentType" in spec.response
        ? {
            description: spec.summary,
            content: { [spec.response.contentType.split(";")[0]!]: { schema: { type: "string" } } },
          }
        : { description: spec.summary };
  const also = "also" in spec.response && spec.response.also ? { [String(spec.response.also)]: success } : {};
  op["responses"] = {
    ...also,
    [String(spec.response.status)]: success,
    ...errorAnswers(spec),
    default: problemAnswer("Any other error, with its stable code (429 and 503 carry Retry-After)"),
  };
  const scheme = schemeOf(spec.auth);
  op["security"] = scheme ? [{ [scheme]: [] }] : [];
  op["x-beachball-auth"] = spec.auth;
  return op;
}

/**
 * The security scheme of each kind of caller (none for `none` and `enroll`,
 * whose one-use token is in the body). Keyed by string so a caller kind
 * added to RouteAuth without a scheme here falls back to the principal's
 * bearer token rather than failing.
 */
const SCHEMES: Record<string, { name: string; description: string } | null> = {
  none: null,
  enroll: null,
  host: { name: "hostCredential", description: "An enrolled host's credential bbh_<hostId>.<secret>" },
  endpoint: {
    name: "connectionEndpointToken",
    description: "The endpoint token of one role of the connection named in the path",
  },
};
const PRINCIPAL_SCHEME = {
  name: "bearerToken",
  description: "A principal's token from the deployment manifest (role controller or operator)",
};

function schemeOf(auth: string): string | null {
  const s = auth in SCHEMES ? SCHEMES[auth]! : PRINCIPAL_SCHEME;
  return s ? s.name : null;
}

function tagOf(spec: RouteSpec): string {
  if (spec.path.startsWith("/v1/allocations")) return "allocations";
  if (spec.path.startsWith("/v1/hosts")) return "hosts";
  if (spec.path.startsWith("/v1/agents")) return "agents";
  if (spec.path.startsWith("/v1/operations")) return "operations";
  if (spec.path.startsWith("/v1/connections")) return "connections";
  return "service";
}

/** The path as OpenAPI writes it: `/v1/allocations/{id}`. */
export function openApiPath(path: string): string {
  return path.replace(/:([A-Za-z0-9_]+)/g, "{$1}");
}

/**
 * The OpenAPI 3.1 document for `routes` (default: the scheduler's). Pure
 * and deterministic: the same table gives byte-identical JSON, so the
 * snapshot in docs/openapi.json can be compared as text.
 */
export function openApiDocument(routes: Record<string, RouteSpec> = ROUTES): Record<string, Json> {
  const names = namedSchemas();
  const used = new Set<string>(["Problem"]);
  const paths: Record<string, Record<string, Json>> = {};
  for (const [name, spec] of Object.entries(routes)) {
    const p = (paths[openApiPath(spec.path)] ??= {});
    p[spec.method.toLowerCase()] = operation(name, spec, names, used);
  }
  const usedSchemes = new Set(
    Object.values(routes)
      .map((r) => schemeOf(r.auth))
      .filter((x): x is string => x !== null),
  );
  // Components, including those named only inside other components.
  const schemas: Record<string, Json> = {};
  const byName = new Map([...names.values()].map((n) => [n.name, n.schema]));
  for (let pending = [...used]; pending.length; ) {
    const next: string[] = [];
    for (const n of pending) {
      if (schemas[n]) continue;
      const before = new Set(used);
      schemas[n] = toJson(byName.get(n), names, used, true);
      for (const u of used) if (!before.has(u)) next.push(u);
    }
    pending = next;
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "Beachball scheduler API",
      version: API_VERSION,
      description:
        "The control plane of Beachball, a scheduler for disposable microVMs. Every error answer is application/problem+json (RFC 9457) with a stable `code`; " +
        "Every GET route also answers HEAD; a known path called with another method answers 405 METHOD_NOT_ALLOWED with `Allow`; an unknown path 404 NOT_FOUND. " +
        "Bad input is refused before anything is written: a malformed ID, query parameter or body field 400 VALIDATION_FAILED (the detail names the field path), " +
        "unparseable JSON 400 MALFORMED_JSON, a body that is not application/json 415 UNSUPPORTED_MEDIA_TYPE, a body over the route's bound 413. " +
        "429 (RATE_LIMITED, CONCURRENCY_LIMITED) and 503 answers carry Retry-After (seconds); each authenticated caller may have " +
        MAX_IN_FLIGHT_PER_CALLER +
        " requests in flight, " +
        MAX_FOLLOWS_PER_CALLER +
        ' of them follows (logs or events), and one past either is shed with 429 CONCURRENCY_LIMITED before any work; every 401 carries WWW-Authenticate: Bearer realm="beachball". Creating an allocation is idempotent by `clientRequestId`.',
    },
    paths: Object.fromEntries(Object.entries(paths).sort(([a], [b]) => a.localeCompare(b))),
    "x-beachball-error-codes": Object.fromEntries(Object.entries(ERROR_STATUS).sort(([a], [b]) => a.localeCompare(b))),
    components: {
      securitySchemes: Object.fromEntries(
        [PRINCIPAL_SCHEME, ...Object.values(SCHEMES)]
          .filter((x): x is { name: string; description: string } => x !== null && usedSchemes.has(x.name))
          .map((x) => [x.name, { type: "http", scheme: "bearer", description: x.description }]),
      ),
      schemas: Object.fromEntries(Object.entries(schemas).sort(([a], [b]) => a.localeCompare(b))),
    },
  };
}
