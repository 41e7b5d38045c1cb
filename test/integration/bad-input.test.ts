/**
 * Bad input, one table, every route: a real in-process scheduler (loopback,
 * fresh data directory, a live connection grant) gets, on each route of the
 * route table, the inputs a careless or hostile client sends (a body that
 * is not application/json or is content-encoded, malformed or empty JSON,
 * a JSON value of the wrong kind, unknown fields at the top and nested,
 * a field of the wrong type, a body over the route's bound, a malformed
 * path ID, a well-formed ID that names nothing or another caller's
 * allocation, an unknown query parameter, a wrong method). Each row asserts
 * the status, the stable code and the detail. Afterwards nothing was
 * created and the live grant is still live: a refusal writes nothing.
 * The table is built from ROUTES, so a new route is covered without being
 * listed; the few per-route facts (what an unknown ID answers) are a map the
 * test checks is complete. The whole table runs against both hosts of the
 * scheduler, embedded and on workerd (issue 18 item 16: the workerd host
 * once answered 200 to an unknown or malformed query parameter): the same
 * request guard must give the same answers. ~4 s.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ERROR_STATUS, type ErrorCode } from "../../src/protocol/errors.ts";
import { tokenDigest } from "../../src/scheduler/manifest.ts";
import { PATH_ID, ROUTES, type RouteName, type RouteSpec } from "../../src/scheduler/routes.ts";
import { MAX_ALLOWED_FIELDS_LISTED } from "../../src/scheduler/schemaErrors.ts";
import { sampleBodies } from "../support/hostileRequests.ts";
import { rawRequest, type RawBody } from "../support/rawHttp.ts";
import { enrollTestHost, openTestConnection, type TestConnection } from "../support/scheduler.ts";
import { SCHEDULER_HOSTS, startSchedulerOn, type SchedulerUnderTest } from "../support/schedulerHosts.ts";

/** A second controller: another caller's allocations must read as absent. */
const OTHER_CONTROLLER_TOKEN = `bbt_${"7".repeat(48)}`;
const HOST_ID = "bad-input-host";
const UNKNOWN = {
  allocation: `alloc_${"0".repeat(32)}`,
  grant: `grt_${"0".repeat(32)}`,
  connection: `con_${"0".repeat(32)}`,
  run: `run_${"0".repeat(32)}`,
  lease: `lse_${"0".repeat(32)}`,
  host: "no-such-host",
};

/** Adds the second controller to a development manifest. */
function addOtherController(m: Record<string, unknown>): void {
  (m["principals"] as unknown[]).push({
    id: "controller:other",
    role: "controller",
    tokenSha256: tokenDigest(OTHER_CONTROLLER_TOKEN),
  });
}

for (const hostName of SCHEDULER_HOSTS) {
  let s: SchedulerUnderTest;
  let port: number;
  let hostCredential: string;
  let conn: TestConnection;
  /** A live run of the controller (its routes take its ID). */
  let liveRunId = "";
  /** A live lease of the controller. */
  let liveLeaseId = "";
  const routes = Object.entries(ROUTES) as [RouteName, RouteSpec][];

  /** One row: a request and the answer it must get. */
  interface Row {
    what: string;
    method?: string;
    /** Path parameters to use instead of the live ones. */
    ids?: { id?: string; grantId?: string };
    /** The bearer token to send instead of the route's own ("" sends no Authorization header). */
    token?: string;
    query?: string;
    /** Sent with fetch (plus `contentType`, default application/json), or raw framing (exact headers). */
    body?: string;
    contentType?: string | null;
    headers?: Record<string, string>;
    raw?: RawBody;
    status: number;
    code: ErrorCode;
    detail: string | RegExp;
    /** The problem's machine-readable `extra`, when the row asserts it. */
    extra?: Record<string, unknown>;
    allow?: string;
  }

  /** The live ID for each path parameter of `r`. */
  function liveIds(r: RouteSpec): { id: string; grantId: string } {
    const id = r.path.startsWith("/v1/hosts")
      ? HOST_ID
      : r.path.startsWith("/v1/connections")
        ? conn.connectionId
        : r.path.startsWith("/v1/runs")
          ? liveRunId
          : r.path.startsWith("/v1/leases")
            ? liveLeaseId
            : conn.allocationId;
    return { id, grantId: conn.grantId };
  }

  function pathOf(r: RouteSpec, ids: Row["ids"] = {}): string {
    const live = liveIds(r);
    return r.path.replace(":id", ids.id ?? live.id).replace(":grantId", ids.grantId ?? live.grantId);
  }

  function tokenFor(r: RouteSpec): string | null {
    if (r.auth === "host") return hostCredential;
    if (r.auth === "operator") return s.tokens.operatorToken;
    if (r.auth === "controller" || r.auth === "principal") return s.tokens.token;
    if (r.auth === "endpoint") return conn.endpointToken;
    return null;
  }

  /** Sends `row` on route `r`; answers status, headers and the parsed problem. */
  async function send(
    r: RouteSpec,
    row: Row,
  ): Promise<{
    status: number;
    allow: string | null;
    contentType: string | null;
    challenge: string | null;
    problem: { code?: string; status?: number; detail?: string; extra?: Record<string, unknown> };
  }> {
    const token = row.token === "" ? null : (row.token ?? tokenFor(r));
    const headers: Record<string, string> = { ...(token ? { authorization: `Bearer ${token}` } : {}), ...row.headers };
    const path = `${pathOf(r, row.ids)}${row.query ? `?${row.query}` : ""}`;
    const method = row.method ?? r.method;
    let status: number, allow: string | null, contentType: string | null, challenge: string | null, text: string;
    if (row.raw !== undefined) {
      const a = await rawRequest(port, method, path, headers, row.raw);
      [status, allow, contentType, challenge, text] = [
        a.status,
        a.headers["allow"] ?? null,
        a.headers["content-type"] ?? null,
        a.headers["www-authenticate"] ?? null,
        a.body,
      ];
    } else {
      if (row.contentType !== null) headers["content-type"] = row.contentType ?? "application/json";
      const body =
        row.body ?? (r.body && method === "POST" ? JSON.stringify(sampleBodies(HOST_ID)[nameOf(r)]) : undefined);
      const res = await fetch(`${s.url}${path}`, { method, headers, ...(body !== undefined ? { body } : {}) });
      [status, allow, contentType, challenge, text] = [
        res.status,
        res.headers.get("allow"),
        res.headers.get("content-type"),
        res.headers.get("www-authenticate"),
        await res.text(),
      ];
    }
    let problem = {};
    try {
      problem = JSON.parse(text) as object;
    } catch {
      /* asserted by the caller */
    }
    return { status, allow, contentType, challenge, problem };
  }

  const nameOf = (r: RouteSpec) => routes.find(([, x]) => x === r)![0];

  type Schema = {
    type?: string;
    const?: unknown;
    required?: string[];
    properties?: Record<string, Schema>;
    anyOf?: Schema[];
  };

  /** A value of the wrong JSON type for `s`, and the reason TypeBox gives for it. */
  function wrongTypeFor(s: Schema): [unknown, RegExp] {
    if (s.const !== undefined) return [12345, /^Expected /];
    switch (s.type) {
      case "string":
        return [12345, /^Expected string$/];
      case "integer":
        return ["12", /^Expected integer$/];
      case "number":
        return ["12", /^Expected number$/];
      case "array":
        return ["x", /^Expected array$/];
      case "object":
        return ["x", /^Expected object$/];
      default:
        return [{ not: "this" }, /.+/];
    }
  }

  const allowedList = (keys: string[]) =>
    keys.length > MAX_ALLOWED_FIELDS_LISTED
      ? `${keys.slice(0, MAX_ALLOWED_FIELDS_LISTED).join(", ")} and ${keys.length - MAX_ALLOWED_FIELDS_LISTED} more`
      : keys.join(", ");
  const esc = (t: string) => t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

  /**
   * What a well-formed ID that names nothing answers, per route with path
   * parameters. Endpoint routes authenticate against the Connection in the
   * path, so an unknown one is a token that does not open it (401); minting
   * an enrollment token for a host not enrolled yet is the route's purpose.
   */
  type UnknownIdAnswer = { ids: Row["ids"]; status: number; code: ErrorCode; detail: string };
  const NO_ALLOCATION: UnknownIdAnswer = {
    ids: { id: UNKNOWN.allocation },
    status: 404,
    code: "NOT_FOUND",
    detail: "no such allocation",
  };
  const NO_RUN: UnknownIdAnswer = { ids: { id: UNKNOWN.run }, status: 404, code: "NOT_FOUND", detail: "no such run" };
  const NO_LEASE: UnknownIdAnswer = {
    ids: { id: UNKNOWN.lease },
    status: 404,
    code: "NOT_FOUND",
    detail: "no such lease",
  };
  const NO_CONNECTION: UnknownIdAnswer = {
    ids: { id: UNKNOWN.connection },
    status: 401,
    code: "UNAUTHENTICATED",
    detail: "unknown endpoint token, or the connection has ended",
  };
  const UNKNOWN_ID: Partial<Record<RouteName, UnknownIdAnswer | "not an error">> = {
    getAllocation: NO_ALLOCATION,
    releaseAllocation: NO_ALLOCATION,
    pauseAllocation: NO_ALLOCATION,
    suspendAllocation: NO_ALLOCATION,
    resumeAllocation: NO_ALLOCATION,
    forkAllocation: NO_ALLOCATION,
    events: NO_ALLOCATION,
    logs: NO_ALLOCATION,
    bootstrap: NO_ALLOCATION,
    replacementAuthorizations: NO_ALLOCATION,
    createConnectionGrant: NO_ALLOCATION,
    revokeConnectionGrant: NO_ALLOCATION,
    getRun: NO_RUN,
    cancelRun: NO_RUN,
    runEvents: NO_RUN,
    runLogs: NO_RUN,
    getLease: NO_LEASE,
    leaseEvents: NO_LEASE,
    heartbeatLease: NO_LEASE,
    extendLease: NO_LEASE,
    releaseLease: NO_LEASE,
    shareLease: NO_LEASE,
    unshareLease: NO_LEASE,
    connectionPoll: NO_CONNECTION,
    connectionConnect: NO_CONNECTION,
    connectionMessages: NO_CONNECTION,
    connectionRelayTokens: NO_CONNECTION,
    enrollmentTokens: "not an error",
    activateHost: { ids: { id: UNKNOWN.host }, status: 404, code: "NOT_FOUND", detail: "no such host" },
    drainHost: { ids: { id: UNKNOWN.host }, status: 404, code: "NOT_FOUND", detail: "no such host" },
    disableHost: { ids: { id: UNKNOWN.host }, status: 404, code: "NOT_FOUND", detail: "no such host" },
  };

  /** The kind of ID each pattern names, as the detail says it. */
  const KIND: Record<string, string> = Object.fromEntries(Object.entries(PATH_ID).map(([k, p]) => [p.source, k]));

  /** Malformed values for each kind of path parameter (never a 404: the caller's mistake is 400). */
  const MALFORMED_IDS = [
    "Not_An_Id",
    "-leading-dash",
    `ALLOC_${"0".repeat(32)}`,
    `alloc_${"0".repeat(31)}`,
    `alloc_${"0".repeat(32)}%00`,
    "..%2F..",
    "x".repeat(300),
  ];

  /** Every row for route `name`. */
  function rowsFor(name: RouteName, r: RouteSpec): Row[] {
    const rows: Row[] = [];
    if (r.body) {
      const sample = sampleBodies(HOST_ID)[name] as Record<string, unknown>;
      const schema = r.body.schema as unknown as Schema;
      const keys = Object.keys(schema.properties ?? {});
      const refused = (what: string, contentType: string | null, detail: string, extra: Partial<Row> = {}): Row => ({
        what,
        contentType,
        status: 415,
        code: "UNSUPPORTED_MEDIA_TYPE",
        detail,
        ...extra,
      });
      rows.push(
        refused("text/plain", "text/plain", "this route takes Content-Type: application/json (got text/plain)"),
        refused(
          "a form",
          "application/x-www-form-urlencoded",
          "this route takes Content-Type: application/json (got application/x-www-form-urlencoded)",
          { body: "a=1&b=2" },
        ),
        refused(
          "multipart",
          "multipart/form-data; boundary=xyz",
          "this route takes Content-Type: application/json (got multipart/form-data)",
          { body: "--xyz\r\n\r\n{}\r\n--xyz--" },
        ),
        refused(
          "a look-alike media type",
          "application/jsonx",
          "this route takes Content-Type: application/json (got application/jsonx)",
        ),
        refused(
          "a media type that is not a token",
          'application/"json"',
          "this route takes Content-Type: application/json",
        ),
        refused(
          "JSON in Latin-1",
          "application/json; charset=iso-8859-1",
          "a JSON body must be UTF-8 (charset=utf-8 or none)",
        ),
        refused(
          "a gzip body",
          "application/json",
          "request bodies may not be content-encoded; send plain application/json",
          { headers: { "content-encoding": "gzip" }, body: "\x1f\x8b\x08\x00" },
        ),
        {
          what: "no Content-Type at all",
          raw: { bytes: new TextEncoder().encode(JSON.stringify(sample)) },
          status: 415,
          code: "UNSUPPORTED_MEDIA_TYPE",
          detail: "this route takes a JSON body: send Content-Type: application/json",
        },
        {
          what: "malformed JSON (charset=UTF-8 accepted)",
          contentType: "Application/JSON; charset=UTF-8",
          body: '{"a":',
          status: 400,
          code: "MALFORMED_JSON",
          detail: "request body is not valid JSON",
        },
        {
          what: "JSON with a trailing comma",
          body: JSON.stringify(sample).replace(/}$/, ",}"),
          status: 400,
          code: "MALFORMED_JSON",
          detail: "request body is not valid JSON",
        },
        {
          what: "an empty body",
          body: "",
          status: 400,
          code: "MALFORMED_JSON",
          detail: "request body is empty; a JSON document is required",
        },
        {
          what: "invalid UTF-8",
          headers: { "content-type": "application/json" },
          raw: { bytes: new Uint8Array([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]) },
          status: 400,
          code: "MALFORMED_JSON",
          detail: "request body is not valid UTF-8",
        },
        {
          what: "an array instead of an object",
          body: "[]",
          status: 400,
          code: "VALIDATION_FAILED",
          detail: "/: Expected object",
        },
        { what: "null", body: "null", status: 400, code: "VALIDATION_FAILED", detail: "/: Expected object" },
        {
          what: "an unknown top-level field",
          body: JSON.stringify({ ...sample, bogusField: 1 }),
          status: 400,
          code: "VALIDATION_FAILED",
          detail: `/bogusField: unknown field; allowed fields here: ${allowedList(keys)}`,
          extra: { field: "/bogusField", allowedFields: keys.slice(0, MAX_ALLOWED_FIELDS_LISTED) },
        },
        {
          what: "an unknown field whose name is not an identifier (never echoed)",
          body: JSON.stringify({ ...sample, "<script>": 1 }),
          status: 400,
          code: "VALIDATION_FAILED",
          detail: `/{key}: unknown field; allowed fields here: ${allowedList(keys)}`,
        },
        {
          what: "a body one byte over its bound",
          body: JSON.stringify({ ...sample, pad: "" }).replace('"pad":""', `"pad":"${"x".repeat(r.body.maxBytes)}"`),
          status: ERROR_STATUS[r.body.tooLarge],
          code: r.body.tooLarge,
          detail: `request body is over ${r.body.maxBytes} bytes`,
        },
      );
      const first = keys.find((k) => k in sample)!;
      rows.push({
        what: "a repeated field",
        body: JSON.stringify(sample).replace(/}$/, `,${JSON.stringify(first)}:${JSON.stringify(sample[first])}}`),
        status: 400,
        code: "MALFORMED_JSON",
        detail: `request body repeats the field "${first}" in one object; field names must be unique (RFC 7493 §2.3)`,
      });
      const [wrong, reason] = wrongTypeFor(schema.properties![first]!);
      rows.push({
        what: `a wrong type at /${first}`,
        body: JSON.stringify({ ...sample, [first]: wrong }),
        status: 400,
        code: "VALIDATION_FAILED",
        detail: new RegExp(`^/${first}: ${reason.source.replace(/^\^/, "")}`),
      });
      const missing = keys.find((k) => k in sample && schema.required?.includes(k));
      if (missing) {
        const { [missing]: _, ...rest } = sample;
        rows.push({
          what: `a missing /${missing}`,
          body: JSON.stringify(rest),
          status: 400,
          code: "VALIDATION_FAILED",
          detail: `/${missing}: required field is missing`,
        });
      }
      const nested = keys.find(
        (k) =>
          schema.properties![k]!.type === "object" &&
          schema.properties![k]!.properties &&
          typeof sample[k] === "object",
      );
      if (nested) {
        const inner = Object.keys(schema.properties![nested]!.properties!);
        rows.push({
          what: `an unknown field under /${nested}`,
          body: JSON.stringify({ ...sample, [nested]: { ...(sample[nested] as object), zz: 1 } }),
          status: 400,
          code: "VALIDATION_FAILED",
          detail: `/${nested}/zz: unknown field; allowed fields here: ${allowedList(inner)}`,
        });
      }
    }
    if (r.params) {
      for (const param of Object.keys(r.params)) {
        for (const bad of MALFORMED_IDS) {
          // An endpoint route authenticates against the Connection in its path first: a malformed one opens nothing.
          const row: Row =
            r.auth === "endpoint"
              ? {
                  what: `malformed ${param} ${bad.slice(0, 40)}`,
                  ids: { [param]: bad },
                  status: 401,
                  code: "UNAUTHENTICATED",
                  detail: "missing or malformed endpoint token",
                }
              : {
                  what: `malformed ${param} ${bad.slice(0, 40)}`,
                  ids: { [param]: bad },
                  status: 400,
                  code: "VALIDATION_FAILED",
                  detail: `path parameter ${param} (${KIND[r.params[param]!.source]} ID) must match ${r.params[param]!.source}`,
                  extra: { parameter: param, pattern: r.params[param]!.source },
                };
          rows.push(row);
        }
      }
      const unknown = UNKNOWN_ID[name];
      if (unknown === undefined)
        throw new Error(`UNKNOWN_ID has no row for route ${name}: say what a well-formed unknown ID answers`);
      if (unknown !== "not an error") rows.push({ what: "a well-formed ID that names nothing", ...unknown });
      if (r.path.startsWith("/v1/allocations/")) {
        rows.push({
          what: "another controller's allocation",
          token: OTHER_CONTROLLER_TOKEN,
          status: 404,
          code: "NOT_FOUND",
          detail: "no such allocation",
        });
      }
    }
    if (name === "revokeConnectionGrant") {
      rows.push(
        {
          what: "an unknown grant of the caller's own allocation",
          ids: { grantId: UNKNOWN.grant },
          status: 404,
          code: "NOT_FOUND",
          detail: "no such grant for this allocation",
        },
        {
          what: "an unknown allocation with a malformed grant ID",
          ids: { id: UNKNOWN.allocation, grantId: "grt_xyz" },
          status: 400,
          code: "VALIDATION_FAILED",
          detail: "path parameter grantId (grant ID) must match ^grt_[0-9a-f]{32}$",
        },
        {
          what: "another controller's allocation with an unknown grant",
          token: OTHER_CONTROLLER_TOKEN,
          ids: { grantId: UNKNOWN.grant },
          status: 404,
          code: "NOT_FOUND",
          detail: "no such allocation",
        },
      );
    }
    const NO_CREDENTIALS: Partial<Record<RouteSpec["auth"], string>> = {
      controller: "missing or unknown bearer token",
      operator: "missing or unknown bearer token",
      principal: "missing or unknown bearer token",
      host: "missing or malformed host credential",
      endpoint: "missing or malformed endpoint token",
    };
    const anonymous = NO_CREDENTIALS[r.auth];
    if (anonymous)
      rows.push({
        what: "no Authorization header",
        token: "",
        status: 401,
        code: "UNAUTHENTICATED",
        detail: anonymous,
      });
    rows.push({
      what: "an unknown query parameter",
      query: "bogus=1",
      status: 400,
      code: "VALIDATION_FAILED",
      detail: r.query
        ? `unknown query parameter; this route takes ${Object.keys(r.query).join(", ")}`
        : "this route takes no query parameters",
      extra: { allowedParameters: Object.keys(r.query ?? {}) },
    });
    const methods = routes.filter(([, x]) => x.path === r.path).map(([, x]) => x.method);
    const allow = [...methods, ...(methods.includes("GET") ? ["HEAD"] : [])].sort().join(", ");
    for (const m of ["PUT", "PATCH"])
      rows.push({
        what: `method ${m}`,
        method: m,
        status: 405,
        code: "METHOD_NOT_ALLOWED",
        detail: `this path allows ${allow}`,
        allow,
      });
    return rows;
  }

  async function objectCounts(): Promise<Record<string, number>> {
    const out: Record<string, number> = s.objectInstances() ?? {};
    out["allocations"] = (await s.controller.list(undefined, 200)).items.length;
    out["hosts"] = (await s.operator.hosts()).length;
    return out;
  }

  let before: Record<string, number>;

  beforeAll(async () => {
    s = await startSchedulerOn(hostName, addOtherController);
    port = s.port;
    hostCredential = (await enrollTestHost(s, HOST_ID)).credential;
    conn = await openTestConnection(s, HOST_ID, hostCredential, "bad-input-conn");
    liveRunId = (
      await s.controller.submitRun({
        clientRequestId: "bad-input-run",
        workloadClass: "ci-small",
        scriptBase64: "ZXhpdCAwCg==",
        budgetSeconds: 60,
      })
    ).view.runId;
    liveLeaseId = (
      await s.controller.createLease({ clientRequestId: "bad-input-lease", workloadClass: "ci-small", ttlSeconds: 600 })
    ).view.leaseId;
    before = await objectCounts();
  });

  afterAll(async () => {
    await s?.stop();
  });

  describe(`${hostName}: every route answers bad input with a fitting status, a stable code and a detail that says what is wrong`, () => {
    for (const [name, r] of routes) {
      test(name, async () => {
        const wrong: unknown[] = [];
        for (const row of rowsFor(name, r)) {
          const a = await send(r, row);
          // A 401 names the scheme to authenticate with (RFC 9110 §15.5.2, RFC 6750 §3).
          const got = {
            what: row.what,
            status: a.status,
            bodyStatus: a.problem.status,
            contentType: a.contentType,
            code: a.problem.code,
            detail: a.problem.detail,
            ...(row.allow ? { allow: a.allow } : {}),
            ...(row.extra ? { extra: a.problem.extra } : {}),
            ...(row.status === 401 ? { challenge: a.challenge } : {}),
          };
          const detailOk =
            typeof row.detail === "string" ? a.problem.detail === row.detail : row.detail.test(a.problem.detail ?? "");
          const want = {
            what: row.what,
            status: row.status,
            bodyStatus: row.status,
            contentType: "application/problem+json",
            code: row.code,
            detail: detailOk ? a.problem.detail : String(row.detail),
            ...(row.allow ? { allow: row.allow } : {}),
            ...(row.extra ? { extra: row.extra } : {}),
            ...(row.status === 401 ? { challenge: 'Bearer realm="beachball"' } : {}),
          };
          if (JSON.stringify(got) !== JSON.stringify(want)) wrong.push({ got, want });
          expect(ERROR_STATUS[row.code] as number).toBe(row.status);
        }
        expect(wrong).toEqual([]);
      });
    }

    test("HEAD on every GET route answers what GET answers (status, content type), without a body", async () => {
      for (const [name, r] of routes.filter(([, x]) => x.method === "GET")) {
        const token = tokenFor(r);
        const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
        const get = await fetch(`${s.url}${pathOf(r)}`, { headers });
        const head = await fetch(`${s.url}${pathOf(r)}`, { method: "HEAD", headers });
        await get.text();
        expect({
          name,
          status: head.status,
          contentType: head.headers.get("content-type"),
          body: await head.text(),
        }).toEqual({ name, status: get.status, contentType: get.headers.get("content-type"), body: "" });
      }
    });

    test("the per-route map of unknown-ID answers covers exactly the routes with path parameters", () => {
      expect(Object.keys(UNKNOWN_ID).sort()).toEqual(
        routes
          .filter(([, r]) => r.path.includes("/:"))
          .map(([n]) => n)
          .sort(),
      );
    });

    test("nothing was written by any refusal, and the live grant is still live", async () => {
      expect(await objectCounts()).toEqual(before);
      const res = await fetch(`${s.url}/v1/connections/${conn.connectionId}/poll`, {
        method: "POST",
        headers: { authorization: `Bearer ${conn.endpointToken}`, "content-type": "application/json" },
        body: JSON.stringify({ after: 0, waitMs: 0 }),
      });
      expect(res.status).toBe(200);
      const a = await s.controller.get(conn.allocationId);
      expect(a.state).toBe("ready");
    });
  });
}
