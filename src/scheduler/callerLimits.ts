/**
 * Per-caller concurrency bounds of the scheduler's HTTP API (issue 18 item
 * 21: 2,000 simultaneous `GET …/logs?follow=1` with one controller token
 * stalled the event loop, so a concurrent /healthz took 707 ms). Every
 * authenticated caller (a principal, an enrolled host, a Connection's
 * endpoint role) may have at most MAX_IN_FLIGHT_PER_CALLER requests in
 * flight, and at most MAX_FOLLOWS_PER_CALLER of them may be parked follows
 * (of logs or events); one past either is refused at once with 429 CONCURRENCY_LIMITED
 * and `Retry-After`, after authentication and before any object is called,
 * so shedding costs no more than the guard did. The refusal is answered,
 * not thrown: its body is serialised once (problemFactory), so a shed
 * request makes no Error, stack or JSON of its own. Anonymous routes (health,
 * discovery, enroll) are not counted: they park nothing and call one object
 * at most. One limiter is shared by both hosts' routers (app.ts,
 * fetchRouter.ts); on workerd it counts per isolate.
 *
 * Spec: "Admission and limits" (every count a peer controls has a bound).
 * Must never: count a request twice, or keep a count after its request
 * ended (the release runs however the handler ends).
 */
import { BeachballError } from "../protocol/errors.ts";
import { problemFactory } from "../protocol/problem.ts";
import type { Caller } from "./edge.ts";

/** Requests one caller may have in flight at once (above bench/api.ts's 200 concurrent readers: a busy controller is not shed, a burst is). */
export const MAX_IN_FLIGHT_PER_CALLER = 256;
/** Parked follows (`GET /v1/allocations/{id}/logs?follow=1` and `…/events?follow=1` together) one caller may hold at once. */
export const MAX_FOLLOWS_PER_CALLER = 16;
/** The `Retry-After` a refused caller is given, seconds. */
export const CONCURRENCY_RETRY_AFTER_SECONDS = 1;

/** The bounds (tests and the benchmark's baseline raise them). */
export interface CallerBounds {
  maxInFlight: number;
  maxFollows: number;
}

/** The key a caller is counted under, or null for anonymous callers (not counted). */
function keyOf(c: Caller): string | null {
  switch (c.kind) {
    case "principal":
      return `principal:${c.identity.id}`;
    case "host":
      return `host:${c.hostId}`;
    case "endpoint":
      return `endpoint:${c.connectionId}:${c.role}`;
    default:
      return null;
  }
}

/** See the module header. */
export class CallerLimiter {
  private readonly inFlight = new Map<string, number>();
  private readonly follows = new Map<string, number>();
  private readonly tooMany: () => Response;
  private readonly tooManyFollows: () => Response;

  constructor(
    private readonly bounds: CallerBounds = {
      maxInFlight: MAX_IN_FLIGHT_PER_CALLER,
      maxFollows: MAX_FOLLOWS_PER_CALLER,
    },
  ) {
    this.tooMany = problemFactory(
      new BeachballError(
        "CONCURRENCY_LIMITED",
        `this caller already has ${bounds.maxInFlight} requests in flight; retry when one has ended`,
        { retryAfterSeconds: CONCURRENCY_RETRY_AFTER_SECONDS, limit: bounds.maxInFlight },
      ),
    );
    this.tooManyFollows = problemFactory(
      new BeachballError(
        "CONCURRENCY_LIMITED",
        `this caller already follows ${bounds.maxFollows} logs; retry when one has ended`,
        { retryAfterSeconds: CONCURRENCY_RETRY_AFTER_SECONDS, limit: bounds.maxFollows },
      ),
    );
  }

  /**
   * Counts one request of `caller` (a follow when `follow`) and answers the
   * release to call exactly once when it ends; or, when the caller is at a
   * bound, answers the refusal itself: a fresh 429 CONCURRENCY_LIMITED
   * problem response with `Retry-After` (nothing is counted then).
   */
  admit(caller: Caller, follow: boolean): (() => void) | Response {
    const key = keyOf(caller);
    if (key === null) return () => undefined;
    const n = this.inFlight.get(key) ?? 0;
    const f = this.follows.get(key) ?? 0;
    if (n >= this.bounds.maxInFlight) return this.tooMany();
    if (follow && f >= this.bounds.maxFollows) return this.tooManyFollows();
    this.inFlight.set(key, n + 1);
    if (follow) this.follows.set(key, f + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.drop(this.inFlight, key);
      if (follow) this.drop(this.follows, key);
    };
  }

  /** Requests in flight for every counted caller (for tests). */
  counts(): { inFlight: number; follows: number } {
    let inFlight = 0;
    let follows = 0;
    for (const v of this.inFlight.values()) inFlight += v;
    for (const v of this.follows.values()) follows += v;
    return { inFlight, follows };
  }

  private drop(m: Map<string, number>, key: string): void {
    const v = (m.get(key) ?? 1) - 1;
    if (v <= 0) m.delete(key);
    else m.set(key, v);
  }
}

/** True if an admitted request may park: a log follow or an event follow (`follow=1`). */
export function isFollow(route: string, query: Record<string, number | string>): boolean {
  return (route === "logs" || route === "events") && query["follow"] === 1;
}
