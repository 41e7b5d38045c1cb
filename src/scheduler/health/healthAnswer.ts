/**
 * What the health listener answers (docs/operate.md, "Health listener"):
 * a pure function of the request and of what the health thread knows (the
 * main loop's age, the storage health the main loop last published), so it
 * is tested without threads or sockets. The listener itself is
 * health.worker.ts.
 *
 *   GET|HEAD /healthz  200 {"ok":true,"mainLoopAgeMs":N}
 *                      503 SCHEDULER_STALLED (main loop silent > maxStallMs, Retry-After 1)
 *                      503 STORAGE_UNAVAILABLE (as the main port's /healthz, Retry-After 5)
 *   other path         404 NOT_FOUND;  other method 405 METHOD_NOT_ALLOWED (Allow: GET, HEAD)
 *   a query            400 VALIDATION_FAILED;  a body  413 BODY_TOO_LARGE (limitBytes 0)
 *
 * Spec: "Observability and retention"; RFC 9457 problem bodies with stable
 * codes. Must never: read a body, echo any part of a request, or name a
 * token, an ID or a file other than the store's (as the main /healthz does).
 */
import { problem } from "../../protocol/problem.ts";
import { requestTarget } from "../../protocol/requestTarget.ts";

/** The only path the health listener serves. */
export const HEALTH_PATH = "/healthz";
/** Longest request URL the listener parses, characters (Bun itself caps the request head: HEALTH_MAX_HEAD_BYTES). */
export const MAX_HEALTH_URL_CHARS = 512;
/** Body bytes the listener accepts: none (it is GET only). */
export const HEALTH_MAX_BODY_BYTES = 0;
/** Bun's cap on a request's head (request line and headers), bytes: over it Bun answers 431 itself (Bun 1.4 default `--max-http-header-size`). */
export const HEALTH_MAX_HEAD_BYTES = 16 * 1024;
/** The `Retry-After` of a SCHEDULER_STALLED answer, seconds. */
export const STALLED_RETRY_AFTER_SECONDS = 1;
/** The `Retry-After` of a STORAGE_UNAVAILABLE answer, seconds (as app.ts's /healthz). */
export const STORAGE_RETRY_AFTER_SECONDS = 5;

/** Storage health as the main loop last published it (SchedulerWorker.health()). */
export interface StorageState {
  ok: boolean;
  detail: string;
  code?: string;
}

/** What the health thread knows when a request comes in. */
export interface HealthState {
  /** Ms since the main loop's heartbeat last moved (loopHeartbeat.ts). */
  mainLoopAgeMs: number;
  /** The bound over which the main loop counts as stalled, ms. */
  maxStallMs: number;
  storage: StorageState;
}

/** The answer to `req` (see the module header). Never throws. */
export function healthAnswer(req: Request, state: HealthState): Response {
  if (req.method !== "GET" && req.method !== "HEAD")
    return problem(
      "METHOD_NOT_ALLOWED",
      "the health listener allows GET, HEAD",
      { allow: "GET, HEAD" },
      { allow: "GET, HEAD" },
    );
  if (req.url.length > MAX_HEALTH_URL_CHARS)
    return problem("NOT_FOUND", `no such route on the health listener; it serves GET ${HEALTH_PATH}`);
  const target = requestTarget(req);
  if (target.pathname !== HEALTH_PATH)
    return problem("NOT_FOUND", `no such route on the health listener; it serves GET ${HEALTH_PATH}`);
  if (target.search !== "")
    return problem("VALIDATION_FAILED", "this route takes no query parameters", { allowedParameters: [] });
  const length = req.headers.get("content-length");
  if ((length !== null && length.trim() !== "0") || req.headers.has("transfer-encoding"))
    return problem("BODY_TOO_LARGE", `request body is over ${HEALTH_MAX_BODY_BYTES} bytes`, {
      limitBytes: HEALTH_MAX_BODY_BYTES,
    });
  const age = Math.round(state.mainLoopAgeMs);
  if (age > state.maxStallMs)
    return problem(
      "SCHEDULER_STALLED",
      `the scheduler's main event loop has not run for ${age} ms (bound ${state.maxStallMs} ms): requests on its port wait`,
      { retryAfterSeconds: STALLED_RETRY_AFTER_SECONDS, mainLoopAgeMs: age, maxStallMs: state.maxStallMs },
    );
  if (!state.storage.ok)
    return problem("STORAGE_UNAVAILABLE", state.storage.detail, {
      retryAfterSeconds: STORAGE_RETRY_AFTER_SECONDS,
      ...(state.storage.code ? { sqliteCode: state.storage.code } : {}),
    });
  return Response.json({ ok: true, mainLoopAgeMs: age });
}
