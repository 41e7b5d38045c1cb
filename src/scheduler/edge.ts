/**
 * The request guard: everything the scheduler checks before a handler runs,
 * cheapest first, so a hostile request is refused after a bounded amount of
 * work (issue: schema work before authentication).
 *
 *   1. route, from the request target only (requestTarget.ts: never the
 *      Host header): unknown path 404; known path, other method 405 with `Allow`
 *      (HEAD is allowed wherever GET is, RFC 9110 §9.3.2);
 *   2. framing: a Content-Length that is not a decimal count is 400;
 *   3. authentication from the Authorization header (401), then the role (403);
 *   4. path parameters: each matches its route's ID pattern (400
 *      VALIDATION_FAILED; a well-formed ID that names nothing is the
 *      handler's 404, so "malformed" and "unknown" never read alike);
 *   5. query: only the route's parameters, each once, integers in decimal
 *      digits only (400 VALIDATION_FAILED);
 *   6. media type, from the headers: a JSON route takes Content-Type
 *      application/json and no Content-Encoding (415 UNSUPPORTED_MEDIA_TYPE,
 *      nothing read);
 *   7. body: read with the route's byte limit however it is framed (413),
 *      nesting depth checked before parsing (400), parsed (400 MALFORMED_JSON),
 *      validated against the route's TypeBox schema (400 VALIDATION_FAILED;
 *      only the first error is computed and described by schemaErrors.ts:
 *      its field path, and for an unknown field the allowed ones).
 *
 * Spec: "Authentication and identity", "Admission and limits"; RFC 9110
 * §15.5.6 (405 and Allow), §15.5.16 (415), RFC 9457 (problem details).
 * Must never: parse or validate a body before authenticating, echo a body
 * (or a key from it that is not a plain identifier), or let a rejected
 * request cost more than one bounded read and parse.
 */
import { TypeCompiler } from "@sinclair/typebox/compiler";
import { Value, type ValueErrorIterator } from "@sinclair/typebox/value";
import type { TSchema } from "@sinclair/typebox";
import { BeachballError } from "../protocol/errors.ts";
import { problem, problemResponse } from "../protocol/problem.ts";
import { declaredLength, parseBoundedJson, RequestBody, requireJsonMediaType } from "../protocol/boundedBody.ts";
import { declaredKeys, schemaValidationError } from "./schemaErrors.ts";
import { MAX_IGNORED_BODY_BYTES } from "../protocol/api.ts";
import { checkPathParams, type QueryParam, type RouteSpec } from "./routes.ts";
import type { Identity } from "./manifest.ts";
import type { RelayRole } from "../protocol/connection.ts";
import { requestTarget } from "../protocol/requestTarget.ts";

/** How the guard resolves credentials (the Worker implements it). */
export interface Authenticator {
  /** A principal from `Authorization: Bearer …`; throws UNAUTHENTICATED. */
  principal(authorization: string | null): Identity;
  /** An enrolled host's ID from `Authorization: Bearer bbh_…`; throws UNAUTHENTICATED. */
  host(authorization: string | null): Promise<string>;
  /** The role an endpoint token (`Authorization: Bearer bbx_…`) has in Connection `connectionId`; throws UNAUTHENTICATED. */
  endpoint(authorization: string | null, connectionId: string): Promise<RelayRole>;
}

/** Who is calling, as established by the guard. */
export type Caller =
  | { kind: "anonymous" }
  | { kind: "principal"; identity: Identity }
  | { kind: "host"; hostId: string }
  | { kind: "endpoint"; connectionId: string; role: RelayRole };

/** A request that passed the guard: its route, caller, path parameters, query and validated body. */
export interface Prepared<N extends string = string> {
  route: N;
  caller: Caller;
  params: Record<string, string>;
  query: Record<string, number | string>;
  /** The validated JSON body (undefined for routes without one). */
  body: unknown;
}

/** Longest decimal integer a query parameter may spell, in digits (2^53 has 16). */
const MAX_QUERY_INTEGER_DIGITS = 16;

/**
 * The principal a guarded request carries (routes whose auth is a principal
 * role). Throws UNAUTHENTICATED (401) for any other caller. Used by the
 * route handlers (routeHandlers.ts).
 */
export function principalOf(p: Prepared): Identity {
  if (p.caller.kind !== "principal")
    throw new BeachballError("UNAUTHENTICATED", "this call needs a principal's bearer token");
  return p.caller.identity;
}

/** The host ID a guarded agent request carries; UNAUTHENTICATED (401) for any other caller. */
export function hostOf(p: Prepared): string {
  if (p.caller.kind !== "host") throw new BeachballError("UNAUTHENTICATED", "this call needs a host credential");
  return p.caller.hostId;
}

/** The Connection and role a guarded rendezvous request carries; UNAUTHENTICATED (401) for any other caller. */
export function endpointOf(p: Prepared): { connectionId: string; role: RelayRole } {
  if (p.caller.kind !== "endpoint") throw new BeachballError("UNAUTHENTICATED", "this call needs an endpoint token");
  return p.caller;
}

/**
 * How the guard checks bodies against their schemas: `compiled` (TypeBox's
 * TypeCompiler, which generates code: the embedded host) or `interpreted`
 * (TypeBox's Value, for hosts that forbid code generation: workerd). Both
 * accept and refuse the same bodies with the same errors.
 */
export type SchemaChecking = "compiled" | "interpreted";

/** A body check: does a value pass, and why not. */
interface BodyCheck {
  Check(value: unknown): boolean;
  Errors(value: unknown): ValueErrorIterator;
}

/**
 * When the guard drains (bounded, MAX_DRAIN_BYTES) the unread body of a
 * refused request: only when the client asked to close (`on-close`: Bun
 * discards the rest of a kept-alive request itself), or always (workerd
 * closes a kept-alive connection whose request body was left unread, so the
 * client, still sending, got a reset instead of its 413: measured by
 * test/integration/http-edge.test.ts).
 */
export type RefusedBodyDrain = "on-close" | "always";

function bodyCheck(schema: TSchema, checking: SchemaChecking): BodyCheck {
  if (checking === "compiled") return TypeCompiler.Compile(schema);
  return { Check: (v) => Value.Check(schema, v), Errors: (v) => Value.Errors(schema, v) };
}

interface CompiledRoute<N extends string> {
  name: N;
  spec: RouteSpec;
  segments: string[];
  check: BodyCheck | null;
  /** Property names the schema declares: the only keys an error path may name. */
  knownKeys: Set<string>;
}

/** Parses one query value by its declared kind. Throws VALIDATION_FAILED. */
function queryValue(name: string, raw: string, spec: QueryParam): number | string {
  if (spec.kind === "string") {
    if (!spec.pattern.test(raw))
      throw new BeachballError("VALIDATION_FAILED", `query parameter ${name} does not match ${spec.pattern.source}`, {
        parameter: name,
      });
    return raw;
  }
  const digits = new RegExp(`^(?:0|[1-9][0-9]{0,${MAX_QUERY_INTEGER_DIGITS - 1}})$`);
  const n = digits.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n) || n < spec.min || n > spec.max)
    throw new BeachballError(
      "VALIDATION_FAILED",
      `query parameter ${name} must be a decimal integer from ${spec.min} to ${spec.max}`,
      { parameter: name },
    );
  return n;
}

/**
 * See the module header. One guard for both hosts of the scheduler: the
 * one app (app.ts), embedded and on workerd, admits every request through
 * it, so a route, a query or a body is refused alike on both (issue 18
 * item 16: the workerd host once had its own, laxer, query rules; issue 19
 * item 2: one app, docs/adr/0161-one-front-door.md).
 */
export class RequestGuard<N extends string> {
  private readonly routes: CompiledRoute<N>[];

  constructor(
    routes: Record<N, RouteSpec>,
    private readonly auth: Authenticator,
    checking: SchemaChecking = "compiled",
    private readonly drain: RefusedBodyDrain = "on-close",
    /** Told how many request body bytes each admission read (read and drained; ./httpBytes.ts counts them). */
    private readonly onBodyBytes: (bytes: number) => void = () => {},
  ) {
    this.routes = (Object.keys(routes) as N[]).map((name) => {
      const spec = routes[name];
      for (const seg of spec.path.split("/"))
        if (seg.startsWith(":") && !spec.params?.[seg.slice(1)])
          throw new Error(`route ${name}: path parameter ${seg} has no pattern`);
      return {
        name,
        spec,
        segments: spec.path.split("/"),
        check: spec.body ? bodyCheck(spec.body.schema, checking) : null,
        knownKeys: spec.body ? declaredKeys(spec.body.schema) : new Set<string>(),
      };
    });
  }

  /**
   * Runs every check of the module header; returns the prepared request or
   * the problem response that refuses it. Before refusing a client that
   * asked to close the connection (or any client, with `drain: "always"`:
   * workerd), drains (bounded) what it is still sending, so the refusal
   * reaches it instead of a reset (see MAX_DRAIN_BYTES); otherwise the
   * unread rest is left to Bun to discard.
   * Bun gives a GET or HEAD no body stream (it discards such a body
   * itself), so that one case cannot be drained here.
   */
  async admit(request: Request): Promise<Prepared<N> | Response> {
    const body = new RequestBody(request);
    try {
      return await this.admitWith(request, body);
    } finally {
      if (body.bytesRead) this.onBodyBytes(body.bytesRead);
    }
  }

  private async admitWith(request: Request, body: RequestBody): Promise<Prepared<N> | Response> {
    let refusal: Response;
    try {
      const url = requestTarget(request);
      const match = this.match(url.pathname, request.method);
      if (!(match instanceof Response)) return await this.prepare(request, url, match.route, match.params, body);
      refusal = match;
    } catch (e) {
      if (!(e instanceof BeachballError)) {
        body.release();
        throw e;
      }
      refusal = problemResponse(e);
    }
    if (body.unread) {
      if (this.drain === "always" || /(^|,)\s*close\s*(,|$)/i.test(request.headers.get("connection") ?? ""))
        await body.drain();
      else body.release();
    }
    return refusal;
  }

  private match(
    pathname: string,
    method: string,
  ): { route: CompiledRoute<N>; params: Record<string, string> } | Response {
    const parts = pathname.split("/");
    const allowed: string[] = [];
    for (const r of this.routes) {
      if (r.segments.length !== parts.length) continue;
      const params: Record<string, string> = {};
      let ok = true;
      for (let i = 0; i < parts.length && ok; i++) {
        const seg = r.segments[i]!;
        if (seg.startsWith(":")) {
          if (parts[i] === "") ok = false;
          else params[seg.slice(1)] = parts[i]!;
        } else ok = seg === parts[i];
      }
      if (!ok) continue;
      // HEAD is GET without the body (RFC 9110 §9.3.2): every GET route answers it; Bun drops the body.
      if (r.spec.method === method || (method === "HEAD" && r.spec.method === "GET")) return { route: r, params };
      allowed.push(r.spec.method, ...(r.spec.method === "GET" ? ["HEAD"] : []));
    }
    if (allowed.length === 0) return problem("NOT_FOUND", "no such route");
    const allow = [...new Set(allowed)].sort().join(", ");
    return problem("METHOD_NOT_ALLOWED", `this path allows ${allow}`, { allow }, { allow });
  }

  private async prepare(
    request: Request,
    url: URL,
    route: CompiledRoute<N>,
    params: Record<string, string>,
    raw: RequestBody,
  ): Promise<Prepared<N>> {
    declaredLength(request.headers);
    const caller = await this.authenticate(route.spec, request.headers.get("authorization"), params);
    checkPathParams(route.spec, params);
    const query = this.query(url.searchParams, route.spec);
    const spec = route.spec.body;
    if (!spec || !route.check) {
      await raw.read(MAX_IGNORED_BODY_BYTES, "BODY_TOO_LARGE");
      return { route: route.name, caller, params, query, body: undefined };
    }
    requireJsonMediaType(request.headers);
    const body = parseBoundedJson(await raw.read(spec.maxBytes, spec.tooLarge));
    if (!route.check.Check(body)) {
      throw schemaValidationError(route.check.Errors(body), route.knownKeys);
    }
    return { route: route.name, caller, params, query, body };
  }

  private async authenticate(
    spec: RouteSpec,
    authorization: string | null,
    params: Record<string, string>,
  ): Promise<Caller> {
    switch (spec.auth) {
      case "none":
      case "enroll":
        return { kind: "anonymous" };
      case "host":
        return { kind: "host", hostId: await this.auth.host(authorization) };
      case "endpoint": {
        const connectionId = params["id"] ?? "";
        return { kind: "endpoint", connectionId, role: await this.auth.endpoint(authorization, connectionId) };
      }
      default: {
        const identity = this.auth.principal(authorization);
        if (spec.auth !== "principal" && identity.role !== spec.auth)
          throw new BeachballError("FORBIDDEN", `this call needs the ${spec.auth} role`);
        return { kind: "principal", identity };
      }
    }
  }

  private query(search: URLSearchParams, spec: RouteSpec): Record<string, number | string> {
    const out: Record<string, number | string> = {};
    for (const [name, raw] of search) {
      const p = spec.query && Object.hasOwn(spec.query, name) ? spec.query[name] : undefined;
      if (!p)
        throw new BeachballError(
          "VALIDATION_FAILED",
          spec.query
            ? `unknown query parameter; this route takes ${Object.keys(spec.query).join(", ")}`
            : "this route takes no query parameters",
          { allowedParameters: Object.keys(spec.query ?? {}) },
        );
      if (Object.hasOwn(out, name))
        throw new BeachballError("VALIDATION_FAILED", `query parameter ${name} is given more than once`, {
          parameter: name,
        });
      out[name] = queryValue(name, raw, p);
    }
    return out;
  }
}
