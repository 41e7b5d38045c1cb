/** The per-caller concurrency bounds (issue 18 item 21) as a unit: counts, refusals, releases. */
import { describe, expect, test } from "bun:test";
import { CallerLimiter, MAX_FOLLOWS_PER_CALLER, MAX_IN_FLIGHT_PER_CALLER } from "./callerLimits.ts";
import type { Caller } from "./edge.ts";

const alice: Caller = { kind: "principal", identity: { id: "controller:alice", role: "controller" } as never };
const bob: Caller = { kind: "principal", identity: { id: "controller:bob", role: "controller" } as never };

/** "admitted", or the refusal's [code, status, Retry-After] as answered (a ready response, never a throw). */
async function refusal(f: () => (() => void) | Response): Promise<unknown> {
  const r = f();
  if (!(r instanceof Response)) return "admitted";
  const body = (await r.json()) as { code: string };
  return [body.code, r.status, Number(r.headers.get("retry-after"))];
}

describe("per-caller concurrency bounds", async () => {
  test("one past the in-flight bound is 429 CONCURRENCY_LIMITED with Retry-After; other callers and anonymous ones are not affected; a release frees one place", async () => {
    const l = new CallerLimiter();
    const releases = Array.from({ length: MAX_IN_FLIGHT_PER_CALLER }, () => l.admit(alice, false) as () => void);
    expect(await refusal(() => l.admit(alice, false))).toEqual(["CONCURRENCY_LIMITED", 429, 1]);
    expect(await refusal(() => l.admit(bob, false))).toBe("admitted");
    expect(await refusal(() => l.admit({ kind: "anonymous" }, false))).toBe("admitted");
    releases[0]!();
    releases[0]!();
    expect(await refusal(() => l.admit(alice, false))).toBe("admitted");
    expect(await refusal(() => l.admit(alice, false))).toEqual(["CONCURRENCY_LIMITED", 429, 1]);
  });

  test("follows have their own, smaller bound; a refused request counts nothing", async () => {
    const l = new CallerLimiter();
    for (let i = 0; i < MAX_FOLLOWS_PER_CALLER; i++) l.admit(alice, true);
    expect(await refusal(() => l.admit(alice, true))).toEqual(["CONCURRENCY_LIMITED", 429, 1]);
    expect(l.counts()).toEqual({ inFlight: MAX_FOLLOWS_PER_CALLER, follows: MAX_FOLLOWS_PER_CALLER });
    expect(await refusal(() => l.admit(alice, false))).toBe("admitted");
  });
});

describe("a shed answer is made fresh each time (kind: a refusal shared between requests)", () => {
  test("two refusals are two Responses, each with its own readable body and headers", async () => {
    const l = new CallerLimiter({ maxInFlight: 0, maxFollows: 0 });
    const a = l.admit(alice, false) as Response;
    const b = l.admit(alice, false) as Response;
    expect(a).not.toBe(b);
    a.headers.set("x-request-id", "one");
    expect(b.headers.get("x-request-id")).toBeNull();
    expect(((await a.json()) as { code: string }).code).toBe("CONCURRENCY_LIMITED");
    expect(((await b.json()) as { code: string }).code).toBe("CONCURRENCY_LIMITED");
  });
});
