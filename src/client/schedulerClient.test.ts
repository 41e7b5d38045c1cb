import { describe, expect, test } from "bun:test";
import { MAX_RETRY_AFTER_MS, parseRetryAfter, RETRY_BACKOFF_MS, SchedulerClient } from "./schedulerClient.ts";
import { BeachballError } from "../protocol/errors.ts";

const view = { allocationId: "alloc_" + "0".repeat(32), state: "pending" };

/** A fake fetch answering from a script; records each request's method, path and body. */
function fakeFetch(answers: (Response | Error)[]) {
  const seen: { method: string; path: string; body: unknown }[] = [];
  const fetch = async (url: string, init: RequestInit) => {
    seen.push({
      method: String(init.method),
      path: new URL(url).pathname,
      body: init.body ? JSON.parse(String(init.body)) : undefined,
    });
    const a = answers.shift();
    if (!a) throw new Error("no more answers");
    if (a instanceof Error) throw a;
    return a;
  };
  return { fetch, seen };
}
const problem = (status: number, code: string, headers: Record<string, string> = {}, extra?: Record<string, unknown>) =>
  new Response(JSON.stringify({ type: "x", title: code, status, code, detail: "d", ...(extra ? { extra } : {}) }), {
    status,
    headers: { "content-type": "application/problem+json", ...headers },
  });
const ok = (body: unknown, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });

function client(answers: (Response | Error)[], maxAttempts?: number) {
  const f = fakeFetch(answers);
  const sleeps: number[] = [];
  let n = 0;
  const c = new SchedulerClient("http://sched.test/", "tok", {
    fetch: f.fetch,
    sleep: async (ms) => void sleeps.push(ms),
    newRequestId: () => `key-${++n}`,
    ...(maxAttempts ? { maxAttempts } : {}),
  });
  return { c, seen: f.seen, sleeps };
}

describe("the public client's retries", () => {
  test("a 429 is retried after its Retry-After, and create keeps one idempotency key across the retries", async () => {
    const { c, seen, sleeps } = client([
      problem(429, "RATE_LIMITED", { "retry-after": "2" }, { retryAfterSeconds: 2 }),
      ok(view, 201),
    ]);
    const r = await c.create({ workloadClass: "ci-small" });
    expect(r.created).toBe(true);
    expect(sleeps).toEqual([2000]);
    expect(seen.map((s) => (s.body as { clientRequestId: string }).clientRequestId)).toEqual(["key-1", "key-1"]);
    expect(seen[0]!.path).toBe("/v1/allocations");
  });

  test("a Retry-After header alone (no problem extra) is honoured; a huge one is capped", async () => {
    const { c, sleeps } = client([
      problem(503, "STORAGE_UNAVAILABLE", { "retry-after": "7" }),
      problem(503, "STORAGE_UNAVAILABLE", { "retry-after": "99999" }),
      ok(view),
    ]);
    await c.get(view.allocationId);
    expect(sleeps).toEqual([7000, MAX_RETRY_AFTER_MS]);
  });

  test("a transport failure is retried with backoff; a caller's own key is kept; replay answers created=false", async () => {
    const { c, seen, sleeps } = client([new TypeError("connection refused"), new TypeError("reset"), ok(view, 200)]);
    const r = await c.create({ clientRequestId: "mine", workloadClass: "ci-small" });
    expect(r.created).toBe(false);
    expect(sleeps).toEqual([RETRY_BACKOFF_MS, RETRY_BACKOFF_MS * 2]);
    expect(seen.every((s) => (s.body as { clientRequestId: string }).clientRequestId === "mine")).toBe(true);
  });

  test("other errors are thrown at once with the stable code and status; attempts are bounded", async () => {
    const a = client([problem(422, "UNKNOWN_WORKLOAD_CLASS"), ok(view)]);
    const e = await a.c.create({ workloadClass: "nope" }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(BeachballError);
    expect([(e as BeachballError).code, (e as BeachballError).extra?.["status"]]).toEqual([
      "UNKNOWN_WORKLOAD_CLASS",
      422,
    ]);
    expect(a.seen).toHaveLength(1);
    const b = client([problem(429, "RATE_LIMITED"), problem(429, "RATE_LIMITED"), problem(429, "RATE_LIMITED")], 3);
    expect(((await b.c.list().catch((x: unknown) => x)) as BeachballError).code).toBe("RATE_LIMITED");
    expect(b.seen).toHaveLength(3);
  });

  test("minting an enrollment token and delivering a payload are never repeated by the client", async () => {
    const a = client([problem(503, "SHUTTING_DOWN", { "retry-after": "1" }), ok({})]);
    expect(((await a.c.enrollmentToken("h1").catch((x: unknown) => x)) as BeachballError).code).toBe("SHUTTING_DOWN");
    expect(a.seen).toHaveLength(1);
    const b = client([problem(503, "GUEST_NOT_CONNECTED", { "retry-after": "2" }), ok({})]);
    expect(
      (
        (await b.c
          .deliver(view.allocationId, {
            deliveryId: "d",
            generation: 1,
            contentType: "text/x-shellscript",
            payloadBase64: "",
          })
          .catch((x: unknown) => x)) as BeachballError
      ).code,
    ).toBe("GUEST_NOT_CONNECTED");
    expect(b.seen).toHaveLength(1);
  });

  test("Retry-After parses delay-seconds and HTTP-dates (RFC 9110 §10.2.3)", () => {
    const now = Date.parse("2026-01-01T00:00:00Z");
    expect(parseRetryAfter("5", now)).toBe(5);
    expect(parseRetryAfter("Thu, 01 Jan 2026 00:00:09 GMT", now)).toBe(9);
    expect(parseRetryAfter("Wed, 31 Dec 2025 00:00:00 GMT", now)).toBe(0);
    expect(parseRetryAfter("soon", now)).toBeNull();
    expect(parseRetryAfter(null, now)).toBeNull();
  });
});
