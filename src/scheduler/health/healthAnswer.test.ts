/**
 * healthAnswer.ts without threads or sockets: healthy, stalled past the
 * bound, storage faults, and each kind of bad input with its stable code.
 */
import { describe, expect, test } from "bun:test";
import { healthAnswer, type HealthState } from "./healthAnswer.ts";

const ok: HealthState = { mainLoopAgeMs: 10, maxStallMs: 2000, storage: { ok: true, detail: "" } };
const get = (path: string, init: RequestInit = {}) => new Request(`http://h${path}`, init);
const code = async (r: Response) => ((await r.json()) as { code: string }).code;

describe("healthAnswer", () => {
  test("healthy: 200 with the main loop's age", async () => {
    const r = healthAnswer(get("/healthz"), ok);
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ ok: true, mainLoopAgeMs: 10 });
    expect(healthAnswer(get("/healthz", { method: "HEAD" }), ok).status).toBe(200);
  });

  test("a main loop silent past the bound: 503 SCHEDULER_STALLED with Retry-After, the age and the bound; at the bound still healthy", async () => {
    expect(healthAnswer(get("/healthz"), { ...ok, mainLoopAgeMs: 2000 }).status).toBe(200);
    const r = healthAnswer(get("/healthz"), { ...ok, mainLoopAgeMs: 2501.4 });
    expect(r.status).toBe(503);
    expect(r.headers.get("retry-after")).toBe("1");
    const body = (await r.json()) as { code: string; extra: Record<string, number> };
    expect(body.code).toBe("SCHEDULER_STALLED");
    expect(body.extra).toMatchObject({ mainLoopAgeMs: 2501, maxStallMs: 2000 });
  });

  test("a storage fault the main loop published: 503 STORAGE_UNAVAILABLE with the SQLite code, as the main /healthz", async () => {
    const r = healthAnswer(get("/healthz"), {
      ...ok,
      storage: { ok: false, detail: "disk full", code: "SQLITE_FULL" },
    });
    expect(r.status).toBe(503);
    expect(r.headers.get("retry-after")).toBe("5");
    const body = (await r.json()) as { code: string; detail: string; extra: Record<string, unknown> };
    expect(body).toMatchObject({
      code: "STORAGE_UNAVAILABLE",
      detail: "disk full",
      extra: { sqliteCode: "SQLITE_FULL" },
    });
  });

  test("bad input: unknown or overlong path 404, other method 405, a query 400, a body 413", async () => {
    expect(await code(healthAnswer(get("/readyz"), ok))).toBe("NOT_FOUND");
    expect(await code(healthAnswer(get(`/healthz/${"x".repeat(600)}`), ok))).toBe("NOT_FOUND");
    const post = healthAnswer(get("/healthz", { method: "POST" }), ok);
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
    expect(await code(healthAnswer(get("/healthz?verbose=1"), ok))).toBe("VALIDATION_FAILED");
    const body = healthAnswer(get("/healthz", { headers: { "content-length": "5" } }), ok);
    expect(body.status).toBe(413);
    expect(await code(body)).toBe("BODY_TOO_LARGE");
  });
});
