/** The per-caller concurrency bounds (issue 18 item 21) as a unit: counts, refusals, releases. */
import { describe, expect, test } from "bun:test";
import { BeachballError } from "../protocol/errors.ts";
import { CallerLimiter, MAX_FOLLOWS_PER_CALLER, MAX_IN_FLIGHT_PER_CALLER } from "./callerLimits.ts";
import type { Caller } from "./edge.ts";

const alice: Caller = { kind: "principal", identity: { id: "controller:alice", role: "controller" } as never };
const bob: Caller = { kind: "principal", identity: { id: "controller:bob", role: "controller" } as never };

function refusal(f: () => unknown): unknown {
  try {
    f();
    return "admitted";
  } catch (e) {
    return e instanceof BeachballError ? [e.code, e.status, e.extra?.["retryAfterSeconds"]] : e;
  }
}

describe("per-caller concurrency bounds", () => {
  test("one past the in-flight bound is 429 CONCURRENCY_LIMITED with Retry-After; other callers and anonymous ones are not affected; a release frees one place", () => {
    const l = new CallerLimiter();
    const releases = Array.from({ length: MAX_IN_FLIGHT_PER_CALLER }, () => l.enter(alice, false));
    expect(refusal(() => l.enter(alice, false))).toEqual(["CONCURRENCY_LIMITED", 429, 1]);
    expect(refusal(() => l.enter(bob, false))).toBe("admitted");
    expect(refusal(() => l.enter({ kind: "anonymous" }, false))).toBe("admitted");
    releases[0]!();
    releases[0]!();
    expect(refusal(() => l.enter(alice, false))).toBe("admitted");
    expect(refusal(() => l.enter(alice, false))).toEqual(["CONCURRENCY_LIMITED", 429, 1]);
  });

  test("follows have their own, smaller bound; a refused request counts nothing", () => {
    const l = new CallerLimiter();
    for (let i = 0; i < MAX_FOLLOWS_PER_CALLER; i++) l.enter(alice, true);
    expect(refusal(() => l.enter(alice, true))).toEqual(["CONCURRENCY_LIMITED", 429, 1]);
    expect(l.counts()).toEqual({ inFlight: MAX_FOLLOWS_PER_CALLER, follows: MAX_FOLLOWS_PER_CALLER });
    expect(refusal(() => l.enter(alice, false))).toBe("admitted");
  });
});
