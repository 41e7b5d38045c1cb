/**
 * Test support: a seeded generator of malformed requests against every
 * route of the scheduler's route table, each with the stable error code
 * the scheduler must answer, plus a runner that sends them (fetch, or a raw
 * socket for chunked and lying-length framing) while it samples the event
 * loop and probes /healthz. Used by test/integration/hostile-input.test.ts
 * and bench/hostile.ts.
 *
 * Every generated request is invalid by construction: a body mutation is
 * kept only if the route's own compiled schema rejects it, so "nothing was
 * created" is a real check, not luck.
 */
import { TypeCompiler, type TypeCheck } from "@sinclair/typebox/compiler";
import type { TSchema } from "@sinclair/typebox";
import { ERROR_STATUS, type ErrorCode } from "../../src/protocol/errors.ts";
import { MAX_IGNORED_BODY_BYTES } from "../../src/protocol/api.ts";
import { MAX_JSON_DEPTH } from "../../src/protocol/boundedBody.ts";
import type { RouteSpec } from "../../src/scheduler/routes.ts";
import type { SeededRandom } from "../sim/rng.ts";
import { filler, rawRequest, type RawBody } from "./rawHttp.ts";

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

/** One malformed request and the code it must get. */
export interface HostileRequest {
  category: string;
  route: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  /** Sent with fetch when `raw` is absent. */
  body?: Uint8Array;
  /** Sent over a raw socket (chunked or a declared length of our choosing). */
  raw?: RawBody;
  expect: ErrorCode;
}

/** What the generator needs to know about the running scheduler. */
export interface HostileContext {
  routes: Record<string, RouteSpec>;
  controllerToken: string;
  operatorToken: string;
  hostId: string;
  hostCredential: string;
  allocationId: string;
  /** A live Connection and one of its endpoint tokens (test/support/scheduler.ts openTestConnection); without them the rendezvous routes get only unauthenticated requests. */
  connection?: { connectionId: string; endpointToken: string; grantId: string };
}

/** A valid body for every route that takes one (mutations start from these). */
export function sampleBodies(hostId: string): Record<string, Json> {
  const capacity = { cpuMillis: 1000, memoryMiB: 1024, ephemeralDiskMiB: 2048, maxPlacements: 2 };
  const envelope = {
    protocolVersion: "1.0",
    messageId: "m-1",
    hostId,
    agentEpoch: "",
    sentAt: "2026-01-01T00:00:00.000Z",
    type: "poll",
    payload: {
      bootId: "boot-1",
      updates: [
        {
          seq: 1,
          placementId: "plc_1",
          allocationId: "alloc_1",
          generation: 1,
          state: "running",
          at: "2026-01-01T00:00:00.000Z",
        },
      ],
      acks: [{ commandId: "plc_1:present:1", result: "accepted" }],
      deliveryAcks: [
        {
          deliveryId: "d-1",
          placementId: "plc_1",
          generation: 1,
          result: "consumed",
          digest: `sha256:${"a".repeat(64)}`,
        },
      ],
      health: {
        isolationHealthy: true,
        quarantineCount: 0,
        vmmDriver: "qemu-microvm",
        inventory: { cpuMillis: 1000, memoryMiB: 1024 },
        cachedImages: [`sha256:${"b".repeat(64)}`],
      },
      waitMs: 0,
    },
  };
  return {
    createAllocation: { clientRequestId: "fuzz-1", workloadClass: "ci-small", labels: { team: "ci" }, ttlSeconds: 600 },
    forkAllocation: { clientRequestId: "fork-1", count: 2, allowConsumedPayload: false, ttlSeconds: 600 },
    bootstrap: { deliveryId: "d-1", generation: 1, contentType: "text/x-shellscript", payloadBase64: "ZWNobw==" },
    replacementAuthorizations: { generation: 1 },
    createLease: {
      clientRequestId: "lease-1",
      workloadClass: "ci-small",
      ttlSeconds: 600,
      idleSeconds: 60,
      labels: { team: "ci" },
    },
    extendLease: { ttlSeconds: 600 },
    shareLease: { principal: "controller:other", access: "read" },
    unshareLease: { principal: "controller:other" },
    submitRun: {
      clientRequestId: "run-1",
      workloadClass: "ci-small",
      scriptBase64: "ZWNobyBoaQo=",
      env: { MODE: "fuzz" },
      budgetSeconds: 60,
      queueDeadlineSeconds: 60,
      labels: { team: "ci" },
    },
    enrollmentTokens: { ttlSeconds: 600 },
    enroll: {
      token: `bbe_${"c".repeat(48)}`,
      capacity,
      reserve: capacity,
      region: "local",
      architecture: "x86_64",
      labels: { zone: "a" },
      agentProtocolVersion: "1.0",
      vmmDriver: "qemu-microvm",
    },
    poll: envelope,
    messages: { ...envelope, type: "messages" },
    createConnectionGrant: {
      clientPublicKey: Buffer.alloc(32, 5).toString("base64"),
      transport: "tcp",
      ports: [22, 8080],
      ttlSeconds: 300,
      generation: 1,
    },
    connectionPoll: { after: 3, waitMs: 0 },
    connectionMessages: {
      messages: [
        { type: "candidates", seq: 1, candidates: [{ address: "192.0.2.1", port: 40000, kind: "stun" }] },
        { type: "path_observation", seq: 2, path: "direct", via: "192.0.2.1:40000" },
        { type: "ack", seq: 3, upTo: 1 },
      ],
    },
    pushLogs: {
      hostId,
      chunks: [{ allocationId: "alloc_1", placementId: "plc_1", generation: 1, offset: 0, text: "line\n" }],
    },
  };
}

const enc = new TextEncoder();
/** JSON text of a value, as bytes. */
const json = (v: unknown) => enc.encode(JSON.stringify(v));
/** Raw text as bytes. */
const text = (t: string) => enc.encode(t);
const OTHER_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

interface Node {
  path: (string | number)[];
  value: Json;
  schema: Record<string, unknown>;
}

/** Every (value, schema) pair of `value` walked along `schema`. */
function nodes(value: Json, schema: Record<string, unknown>, path: (string | number)[] = []): Node[] {
  const out: Node[] = [{ path, value, schema }];
  if (Array.isArray(value) && schema["items"])
    value.forEach((v, i) => out.push(...nodes(v, schema["items"] as Record<string, unknown>, [...path, i])));
  else if (value && typeof value === "object" && !Array.isArray(value)) {
    const props = (schema["properties"] ?? {}) as Record<string, Record<string, unknown>>;
    const rec = Object.values((schema["patternProperties"] ?? {}) as Record<string, Record<string, unknown>>)[0];
    for (const [k, v] of Object.entries(value)) {
      const sub = props[k] ?? rec;
      if (sub) out.push(...nodes(v, sub, [...path, k]));
    }
  }
  return out;
}

function setAt(root: Json, path: (string | number)[], v: Json | undefined): Json {
  if (path.length === 0) return v ?? null;
  const copy = structuredClone(root) as Record<string | number, Json>;
  let cur = copy as Record<string | number, Json>;
  for (const p of path.slice(0, -1)) cur = cur[p] as Record<string | number, Json>;
  const last = path[path.length - 1]!;
  if (v === undefined) delete cur[last];
  else cur[last] = v;
  return copy as Json;
}

/** One candidate mutation of the node (may turn out valid; the caller checks). */
function mutateNode(rng: SeededRandom, n: Node): Json | undefined {
  const s = n.schema;
  const wrongType = (): Json => rng.pick<Json>([null, 5, 1.5, "text", [], {}, true]);
  switch (s["type"]) {
    case "object": {
      const required = (s["required"] ?? []) as string[];
      const pick = rng.int(4);
      const obj = n.value as Record<string, Json>;
      if (pick === 0 && required.length) {
        const copy = { ...obj };
        delete copy[rng.pick(required)];
        return copy;
      }
      if (pick === 1)
        return {
          ...obj,
          [s["patternProperties"]
            ? rng.pick(["Bad Key", "UPPER", "a/../x", "k".repeat(64), "__proto__", ""])
            : `unknown_${rng.int(1000)}`]: rng.pick<Json>(["v", 5, { nested: [1] }]),
        };
      if (pick === 2 && s["maxProperties"])
        return {
          ...obj,
          ...Object.fromEntries(Array.from({ length: (s["maxProperties"] as number) + 1 }, (_, i) => [`k${i}`, "v"])),
        };
      return wrongType();
    }
    case "string": {
      if (s["const"] !== undefined) return rng.pick<Json>([`${String(s["const"])}x`, "", 1, null]);
      const max = s["maxLength"] as number | undefined;
      if (max !== undefined && rng.chance(0.4)) return "a".repeat(max + 1 + rng.int(3));
      if (s["pattern"] && rng.chance(0.5)) return rng.pick(["", " ", "\u0000", "../../etc/passwd", "UPPER space", "é"]);
      return wrongType();
    }
    case "integer":
    case "number": {
      const max = (s["maximum"] as number | undefined) ?? Number.MAX_SAFE_INTEGER;
      const min = (s["minimum"] as number | undefined) ?? 0;
      return rng.pick<Json>([1.5, "7", true, null, max + 1, min - 1, -1e308, 1e300, Number.MAX_SAFE_INTEGER + 2]);
    }
    case "array": {
      const max = s["maxItems"] as number | undefined;
      if (max !== undefined && rng.chance(0.3))
        return Array.from({ length: max + 1 }, () => (n.value as Json[])[0] ?? null);
      return rng.chance(0.5) ? [null, "x", 3] : wrongType();
    }
    case "boolean":
      return rng.pick<Json>(["true", 1, null]);
    default:
      if (s["anyOf"]) return rng.pick<Json>(["not-a-member", 7, null, ""]);
      return wrongType();
  }
}

/** See the module header. */
export class HostileGenerator {
  private readonly checks = new Map<string, TypeCheck<TSchema>>();
  private readonly samples: Record<string, Json>;
  private readonly byPath = new Map<string, string[]>();

  constructor(
    private readonly rng: SeededRandom,
    private readonly ctx: HostileContext,
  ) {
    this.samples = sampleBodies(ctx.hostId);
    for (const [name, r] of Object.entries(ctx.routes)) {
      if (r.body) {
        const check = TypeCompiler.Compile(r.body.schema);
        if (!check.Check(this.samples[name]))
          throw new Error(
            `sample body of ${name} does not match its schema: ${check.Errors(this.samples[name]).First()?.message}`,
          );
        this.checks.set(name, check);
      }
      this.byPath.set(r.path, [...(this.byPath.get(r.path) ?? []), r.method]);
    }
  }

  private path(r: RouteSpec): string {
    const rng = this.rng;
    // A rendezvous route authenticates against the Connection in its path: only the one the token belongs to gets past it.
    if (r.auth === "endpoint")
      return r.path.replace(":id", this.ctx.connection?.connectionId ?? `con_${"0".repeat(32)}`);
    const grant = rng.pick([
      this.ctx.connection?.grantId ?? `grt_${"1".repeat(32)}`,
      `grt_${Buffer.from(rng.bytes(16)).toString("hex")}`,
      "grt_xyz",
      "x".repeat(300),
    ]);
    const id = r.path.startsWith("/v1/hosts")
      ? rng.pick([this.ctx.hostId, "no-such-host", "Bad_Host", "x".repeat(80), "a%2Fb"])
      : rng.pick([
          this.ctx.allocationId,
          `alloc_${"0".repeat(32)}`,
          `alloc_${Buffer.from(rng.bytes(16)).toString("hex")}`,
          "alloc_xyz",
          "..%2F..",
          "x".repeat(300),
        ]);
    return r.path.replace(":id", id).replace(":grantId", grant);
  }

  /** The Authorization header that passes `r`'s authentication and role. */
  private auth(r: RouteSpec): Record<string, string> {
    if (r.auth === "host") return { authorization: `Bearer ${this.ctx.hostCredential}` };
    if (r.auth === "operator") return { authorization: `Bearer ${this.ctx.operatorToken}` };
    if (r.auth === "controller" || r.auth === "principal")
      return { authorization: `Bearer ${this.ctx.controllerToken}` };
    if (r.auth === "endpoint" && this.ctx.connection)
      return { authorization: `Bearer ${this.ctx.connection.endpointToken}` };
    return {};
  }

  /** A hostile body of any kind (for requests refused before the body matters). */
  private anyHostileBody(r: RouteSpec): Pick<HostileRequest, "body" | "raw"> {
    const rng = this.rng;
    switch (rng.int(5)) {
      case 0: {
        const d = 20 + rng.int(60_000);
        return { body: text("[".repeat(d) + "]".repeat(d)) };
      }
      case 1:
        return { body: this.rng.bytes(1 + rng.int(4096)) };
      case 2:
        return { raw: { bytes: new Uint8Array(8).fill(0x20), contentLength: String(1 + rng.int(2 ** 40)) } };
      case 3:
        return { raw: { chunked: filler((r.body?.maxBytes ?? MAX_IGNORED_BODY_BYTES) + 1 + rng.int(64 * 1024)) } };
      default:
        return { body: json(this.samples[Object.keys(this.samples)[rng.int(Object.keys(this.samples).length)]!]) };
    }
  }

  /** The next malformed request. */
  next(): HostileRequest {
    const rng = this.rng;
    const names = Object.keys(this.ctx.routes);
    for (;;) {
      const name = rng.pick(names);
      const r = this.ctx.routes[name]!;
      const req = this.forRoute(name, r, rng.int(100));
      if (req) return req;
    }
  }

  private forRoute(name: string, r: RouteSpec, roll: number): HostileRequest | null {
    const rng = this.rng;
    const base = {
      route: name,
      method: r.method,
      path: this.path(r),
      headers: { "content-type": "application/json" } as Record<string, string>,
    };
    const authed = { ...base, headers: { ...base.headers, ...this.auth(r) } };
    const needsAuth = r.auth !== "none" && r.auth !== "enroll";
    // Past authentication the guard checks the path's IDs first: a malformed one is VALIDATION_FAILED whatever else is wrong.
    const pathParts = base.path.split("/");
    const malformedId = r.path
      .split("/")
      .some((seg, i) => seg.startsWith(":") && !(r.params?.[seg.slice(1)]?.test(pathParts[i]!) ?? false));
    const past = (code: ErrorCode): ErrorCode => (malformedId ? "VALIDATION_FAILED" : code);
    // Bun hides a GET's body from the application (request.body is null) and discards it itself, so no
    // hostile GET carries one here: the server could not drain it for a client that asked to close.
    const sendable = (req: HostileRequest): HostileRequest =>
      req.method === "GET" ? { ...req, body: undefined as never, raw: undefined as never } : req;

    if (roll < 14) {
      if (!needsAuth) return null;
      const bad = rng.pick<Record<string, string>>([
        {},
        { authorization: "Bearer nope" },
        { authorization: "Basic dXNlcjpwYXNz" },
        { authorization: `Bearer ${"t".repeat(600)}` },
        { authorization: `Bearer bbh_${this.ctx.hostId}.${"0".repeat(64)}` },
        { authorization: `Bearer ${r.auth === "host" ? this.ctx.controllerToken : this.ctx.hostCredential}` },
        { authorization: "bearer" },
      ]);
      return sendable({
        ...base,
        category: "unauthenticated",
        headers: { ...base.headers, ...bad },
        ...this.anyHostileBody(r),
        expect: "UNAUTHENTICATED",
      });
    }
    if (r.auth === "endpoint" && !this.ctx.connection) return null;
    if (roll < 22) {
      if (r.auth !== "controller" && r.auth !== "operator") return null;
      const other = r.auth === "controller" ? this.ctx.operatorToken : this.ctx.controllerToken;
      return sendable({
        ...base,
        category: "wrong role",
        headers: { ...base.headers, authorization: `Bearer ${other}` },
        ...this.anyHostileBody(r),
        expect: "FORBIDDEN",
      });
    }
    if (roll < 30) {
      const allowed = this.byPath.get(r.path)!;
      const m = rng.pick(OTHER_METHODS.filter((x) => !allowed.includes(x)));
      return {
        ...authed,
        category: "wrong method",
        method: m,
        ...(m === "GET" ? {} : { raw: { bytes: rng.bytes(rng.int(64)) } }),
        expect: "METHOD_NOT_ALLOWED",
      };
    }
    if (roll < 35) {
      const p = rng.pick([
        `${r.path.replace(":id", "x")}/extra`,
        `${r.path.replace(":id", "x")}/`,
        r.path.replace(":id", "").replace(/\/$/, "//"),
        r.path.toUpperCase(),
        `/v2${r.path}`,
        `/${Buffer.from(rng.bytes(6)).toString("hex")}`,
      ]);
      if (this.matchesSomeRoute(p)) return null;
      return { ...authed, category: "unknown path", path: p, expect: "NOT_FOUND" };
    }
    if (roll < 45) {
      const q = r.query ? Object.keys(r.query) : [];
      const param =
        q.length && rng.chance(0.8)
          ? rng.pick(q)
          : rng.pick(["bogus", "limit", "after", "cursor", "__proto__", "constructor"]);
      const spec = r.query && Object.hasOwn(r.query, param) ? r.query[param]! : null;
      let query: string;
      if (spec && spec.kind === "integer")
        query = rng.chance(0.2)
          ? `${param}=1&${param}=1`
          : `${param}=${encodeURIComponent(rng.pick(["1.5", "+5", " 5", "0x10", "1e2", "-1", "", "05", "NaN", "٥", String(spec.max + 1), "99999999999999999999"]))}`;
      else if (spec)
        query = `${param}=${encodeURIComponent(rng.pick(["x", "alloc_", "' OR 1=1", "a".repeat(200), ""]))}`;
      else query = `${param}=1`;
      // The query is checked before the body: a POST carries its valid sample body, which must not be acted on.
      return {
        ...authed,
        category: "bad query",
        path: `${authed.path}?${query}`,
        ...(r.body ? { body: json(this.samples[name]) } : {}),
        expect: past("VALIDATION_FAILED"),
      };
    }
    if (!r.body) {
      if (r.method !== "POST") return null;
      // A body where none is taken: over the tolerated size, refused before the handler.
      return rng.chance(0.5)
        ? {
            ...authed,
            category: "body on a bodyless route",
            body: rng.bytes(MAX_IGNORED_BODY_BYTES + 1 + rng.int(8192)),
            expect: past("BODY_TOO_LARGE"),
          }
        : {
            ...authed,
            category: "body on a bodyless route",
            raw: { chunked: filler(MAX_IGNORED_BODY_BYTES + 1 + rng.int(200_000)) },
            expect: past("BODY_TOO_LARGE"),
          };
    }
    const limit = r.body.maxBytes;
    const sized = (b: Uint8Array, code: ErrorCode): ErrorCode => past(b.byteLength > limit ? r.body!.tooLarge : code);
    if (roll < 52) {
      const d = MAX_JSON_DEPTH + 1 + rng.int(rng.chance(0.5) ? 10 : 60_000);
      const b = text(`{"a":${"[".repeat(d)}${"]".repeat(d)}}`);
      return { ...authed, category: "deep nesting", body: b, expect: sized(b, "JSON_TOO_DEEP") };
    }
    if (roll < 60) {
      const t = JSON.stringify(this.samples[name]);
      const b = rng.pick([
        text(t.slice(0, rng.int(t.length))),
        new Uint8Array([0xff, 0xfe, ...text(t)]),
        text(`\u0000${t}`),
        text(t.replace(":", "")),
        new Uint8Array(0),
      ]);
      return { ...authed, category: "malformed JSON", body: b, expect: sized(b, "MALFORMED_JSON") };
    }
    if (roll < 65) {
      const huge = limit + 1 + rng.int(rng.chance(0.2) ? 2 * 1024 * 1024 : 1024);
      return rng.chance(0.5)
        ? { ...authed, category: "oversized (chunked)", raw: { chunked: filler(huge) }, expect: past(r.body.tooLarge) }
        : {
            ...authed,
            category: "oversized (declared)",
            raw: { bytes: json(this.samples[name]), contentLength: String(huge) },
            expect: past(r.body.tooLarge),
          };
    }
    if (roll < 70) {
      if (r.auth !== "enroll" && r.auth !== "host") return null;
      // Well formed, refused by the authority: an unknown enrollment token, an envelope for another host.
      if (r.auth === "enroll")
        return {
          ...authed,
          category: "unknown enrollment token",
          body: json({ ...(this.samples[name] as object), token: `bbe_${Buffer.from(rng.bytes(24)).toString("hex")}` }),
          expect: "ENROLLMENT_TOKEN_INVALID",
        };
      return {
        ...authed,
        category: "envelope for another host",
        body: json({ ...(this.samples[name] as object), hostId: "another-host" }),
        expect: "FORBIDDEN",
      };
    }
    if (roll < 75) {
      // A valid body under the wrong media type (or none): refused from the headers, before it is read.
      const { "content-type": _json, ...rest } = authed.headers;
      const type = rng.pick([
        null,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=iso-8859-1",
        "application/jsonx",
      ]);
      const b = json(this.samples[name]);
      return {
        ...authed,
        category: "wrong media type",
        headers: type ? { ...rest, "content-type": type } : rest,
        raw: { bytes: b },
        expect: past("UNSUPPORTED_MEDIA_TYPE"),
      };
    }
    const check = this.checks.get(name)!;
    for (let attempt = 0; attempt < 20; attempt++) {
      const all = nodes(this.samples[name]!, r.body.schema as unknown as Record<string, unknown>);
      const n = rng.pick(all);
      const mutated = setAt(this.samples[name]!, n.path, mutateNode(rng, n));
      if (check.Check(mutated)) continue;
      const b = json(mutated);
      return { ...authed, category: "schema violation", body: b, expect: sized(b, "VALIDATION_FAILED") };
    }
    return null;
  }

  private matchesSomeRoute(p: string): boolean {
    const parts = p.split("?")[0]!.split("/");
    return [...this.byPath.keys()].some((route) => {
      const segs = route.split("/");
      return (
        segs.length === parts.length && segs.every((s, i) => (s.startsWith(":") ? parts[i] !== "" : s === parts[i]))
      );
    });
  }
}

/** The outcome of one hostile request. */
export interface HostileOutcome {
  req: HostileRequest;
  status: number;
  contentType: string | null;
  code: string | null;
  transportError: string | null;
}

/** Sends one request and reads the answer's status, content type and problem code. */
export async function sendHostile(baseUrl: string, req: HostileRequest): Promise<HostileOutcome> {
  if (req.raw !== undefined) {
    const a = await rawRequest(Number(new URL(baseUrl).port), req.method, req.path, req.headers, req.raw);
    let code: string | null = null;
    try {
      code = (JSON.parse(a.body) as { code?: string }).code ?? null;
    } catch {
      /* reported below */
    }
    return {
      req,
      status: a.status,
      contentType: a.headers["content-type"] ?? null,
      code,
      transportError: a.status ? null : a.error,
    };
  }
  try {
    const res = await fetch(`${baseUrl}${req.path}`, {
      method: req.method,
      headers: req.headers,
      ...(req.body ? { body: req.body } : {}),
    });
    const text = await res.text();
    let code: string | null = null;
    try {
      code = (JSON.parse(text) as { code?: string }).code ?? null;
    } catch {
      /* reported below */
    }
    return { req, status: res.status, contentType: res.headers.get("content-type"), code, transportError: null };
  } catch (e) {
    return { req, status: 0, contentType: null, code: null, transportError: (e as Error).message };
  }
}

/** Why an outcome is wrong (not the expected problem), or null. */
export function outcomeProblem(o: HostileOutcome): string | null {
  if (o.status === 0) return `no response (${o.transportError})`;
  if (o.status >= 500) return `server error ${o.status}`;
  if (o.contentType !== "application/problem+json") return `status ${o.status} with content type ${o.contentType}`;
  if (o.code !== o.req.expect) return `code ${o.code} (status ${o.status}), expected ${o.req.expect}`;
  if (ERROR_STATUS[o.req.expect] !== o.status) return `status ${o.status} for ${o.code}`;
  return null;
}

/** Percentile `p` (0–100) of `xs` (sorted copy), or 0 for none. */
export function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

/** Event-loop delay sampler: a timer every `intervalMs` records how late it fired, ms. */
export function sampleEventLoop(intervalMs = 5): { stop: () => number[] } {
  const delays: number[] = [];
  let expected = performance.now() + intervalMs;
  const t = setInterval(() => {
    const now = performance.now();
    delays.push(Math.max(0, now - expected));
    expected = now + intervalMs;
  }, intervalMs);
  return {
    stop: () => {
      clearInterval(t);
      return delays;
    },
  };
}

/** Probes GET /healthz every `intervalMs` until stopped; returns each probe's status and latency (ms). */
export function probeHealth(
  baseUrl: string,
  intervalMs = 10,
): { stop: () => Promise<{ status: number; ms: number }[]> } {
  const out: { status: number; ms: number }[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const t0 = performance.now();
      const status = await fetch(`${baseUrl}/healthz`).then(
        (r) => r.arrayBuffer().then(() => r.status),
        () => 0,
      );
      out.push({ status, ms: performance.now() - t0 });
      await Bun.sleep(intervalMs);
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return out;
    },
  };
}
