/**
 * One front door, the same answers (issue 19 item 2, docs/adr/0161-one-front-door.md):
 * the query rules of the route table (routes.ts: only the route's
 * parameters, each once, integers in decimal digits within their bounds,
 * strings matching their pattern) give the same problem (status, code,
 * detail, extra) on the embedded host and on workerd, for every route and
 * every kind of bad query parameter. Issue 18 item 16 saw the workerd host
 * answer 200 to them when it had its own router. Both hosts on loopback;
 * workerd is ended by its PID.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ROUTES, type RouteName, type RouteSpec } from "../../src/scheduler/routes.ts";
import { enrollTestHost, openTestConnection, type TestConnection } from "../support/scheduler.ts";
import { SCHEDULER_HOSTS, startSchedulerOn, type SchedulerUnderTest } from "../support/schedulerHosts.ts";

const HOST_ID = "parity-host";
/** Values no integer query parameter takes (decimal digits only, no sign, no padding, within 2^53). */
const NOT_DECIMAL = ["1.5", "+5", " 5", "0x10", "1e2", "-1", "", "05", "5abc", "NaN", "٥", "99999999999999999999"];

/** One scheduler with an enrolled host and a live Connection (so every route's authentication passes). */
interface Live {
  s: SchedulerUnderTest;
  hostCredential: string;
  conn: TestConnection;
}

async function startLive(host: (typeof SCHEDULER_HOSTS)[number]): Promise<Live> {
  const s = await startSchedulerOn(host);
  const hostCredential = (await enrollTestHost(s, HOST_ID)).credential;
  return { s, hostCredential, conn: await openTestConnection(s, HOST_ID, hostCredential, "parity-conn") };
}

/** Every bad query string for route `r`, labelled. */
function badQueries(r: RouteSpec): [string, string][] {
  const out: [string, string][] = [["unknown parameter", "bogus=1"]];
  for (const [name, spec] of Object.entries(r.query ?? {})) {
    out.push([`${name} twice`, `${name}=1&${name}=1`]);
    if (spec.kind === "string") {
      out.push([`${name} off its pattern`, `${name}=${encodeURIComponent("x' OR 1")}`]);
      continue;
    }
    for (const v of NOT_DECIMAL) out.push([`${name}=${JSON.stringify(v)}`, `${name}=${encodeURIComponent(v)}`]);
    out.push([`${name} over max`, `${name}=${spec.max + 1}`]);
    if (spec.min > 0) out.push([`${name} under min`, `${name}=${spec.min - 1}`]);
  }
  return out;
}

/** The answer to every bad query on every route of `live`'s scheduler, by label. */
async function answers(live: Live): Promise<Record<string, unknown>> {
  const { s, conn } = live;
  const out: Record<string, unknown> = {};
  for (const [name, r] of Object.entries(ROUTES) as [RouteName, RouteSpec][]) {
    const id = r.path.startsWith("/v1/hosts")
      ? HOST_ID
      : r.path.startsWith("/v1/connections")
        ? conn.connectionId
        : r.path.startsWith("/v1/runs")
          ? `run_${"0".repeat(32)}`
          : r.path.startsWith("/v1/leases")
            ? `lse_${"0".repeat(32)}`
            : conn.allocationId;
    const path = r.path.replace(":id", id).replace(":grantId", conn.grantId);
    const token =
      r.auth === "host"
        ? live.hostCredential
        : r.auth === "operator"
          ? s.tokens.operatorToken
          : r.auth === "endpoint"
            ? conn.endpointToken
            : r.auth === "none" || r.auth === "enroll"
              ? null
              : s.tokens.token;
    for (const [what, query] of badQueries(r)) {
      const res = await fetch(`${s.url}${path}?${query}`, {
        method: r.method,
        headers: token ? { authorization: `Bearer ${token}` } : {},
      });
      const p = (await res.json().catch(() => ({}))) as Record<string, unknown>;
      out[`${name} ${what}`] = {
        status: res.status,
        contentType: res.headers.get("content-type"),
        code: p["code"],
        detail: p["detail"],
        extra: p["extra"] ?? null,
      };
    }
  }
  return out;
}

describe("query rules on both hosts", () => {
  const got: Record<string, Record<string, unknown>> = {};
  const lives: Live[] = [];

  beforeAll(async () => {
    for (const host of SCHEDULER_HOSTS) {
      const live = await startLive(host);
      lives.push(live);
      got[host] = await answers(live);
    }
  });
  afterAll(async () => {
    for (const l of lives) await l.s.stop();
  });

  test("every bad query parameter on every route is 400 VALIDATION_FAILED problem+json", () => {
    for (const host of SCHEDULER_HOSTS) {
      const wrong = Object.entries(got[host]!).filter(([, a]) => {
        const x = a as { status: number; code: string; contentType: string };
        return x.status !== 400 || x.code !== "VALIDATION_FAILED" || x.contentType !== "application/problem+json";
      });
      expect({ host, wrong }).toEqual({ host, wrong: [] });
    }
    expect(Object.keys(got["embedded"]!).length).toBeGreaterThan(100);
  });

  test("workerd answers every one exactly as the embedded host does (status, code, detail, extra)", () => {
    expect(got["workerd"]).toEqual(got["embedded"]!);
  });
});
