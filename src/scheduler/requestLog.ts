/**
 * Request IDs and the request log of the scheduler's HTTP server: every
 * answer carries `X-Request-Id` (the caller's, when it sent a well-formed
 * one, else a fresh random one) and one log line per request names the ID,
 * method, path, status, stable error code and duration. Agent polls and
 * messages log at debug (an agent sends several a minute).
 *
 * Spec: "Observability and retention" (correlate a caller's report with the
 * scheduler's log). Must never: log a header, a query value, a request or
 * response body (tokens, payloads and credentials travel there).
 */
import type { Logger } from "../command/log.ts";
import type { Clock } from "../protocol/clock.ts";
import type { Randomness } from "./runtime/ports.ts";
import { requestTarget } from "../protocol/requestTarget.ts";
import { problemCodeOf } from "../protocol/problem.ts";

/** The header that carries the request ID both ways. */
export const REQUEST_ID_HEADER = "x-request-id";
/** A caller-chosen request ID is kept only when it matches this (else a fresh one is made). */
export const REQUEST_ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;
/** Longest path written to the log, characters. */
export const MAX_LOGGED_PATH_CHARS = 200;
/** Most bytes of a problem body read to log its stable code. */
const MAX_PROBLEM_PEEK_BYTES = 4096;

/** The two hex digits of each byte value, built once. */
const HEX_BYTES = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, "0"));

/** Lower-case hex of `bytes` (no Buffer: the workerd host uses this module too); a table, not an array and 12 strings per request (bench/shedPath.ts). */
function hex(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += HEX_BYTES[b]!;
  return s;
}

/** What the wrapper needs: the log and the ports it takes IDs and times from. */
export interface RequestLogDeps {
  log: Logger;
  clock: Clock;
  random: Randomness;
}

/** `handle` with request IDs and the request log (see the module header). */
export function withRequestLog(
  handle: (req: Request) => Response | Promise<Response>,
  deps: RequestLogDeps,
): (req: Request) => Promise<Response> {
  return async (req) => {
    const started = deps.clock.wallMs();
    const given = req.headers.get(REQUEST_ID_HEADER);
    const requestId = given && REQUEST_ID_PATTERN.test(given) ? given : hex(deps.random.bytes(12));
    let res = await handle(req);
    const ownCode = problemCodeOf(res);
    try {
      res.headers.set(REQUEST_ID_HEADER, requestId);
    } catch {
      // Immutable headers (a Response from fetch): answer a copy.
      const headers = new Headers(res.headers);
      headers.set(REQUEST_ID_HEADER, requestId);
      res = new Response(res.body, { status: res.status, statusText: res.statusText, headers });
    }
    // The code of our own problem responses is known without reading the body; only another answer is peeked at.
    let code: string | undefined = ownCode;
    if (
      code === undefined &&
      res.status >= 400 &&
      (res.headers.get("content-type") ?? "").startsWith("application/problem+json")
    ) {
      const text = await res
        .clone()
        .text()
        .catch(() => "");
      const m = /"code":"([A-Z_]{1,64})"/.exec(text.slice(0, MAX_PROBLEM_PEEK_BYTES));
      code = m?.[1];
    }
    const path = requestTarget(req).pathname.slice(0, MAX_LOGGED_PATH_CHARS);
    const fields = {
      requestId,
      method: req.method.slice(0, 16),
      path,
      status: res.status,
      code,
      durationMs: deps.clock.wallMs() - started,
    };
    if (res.status >= 500) deps.log.warn("http request", fields);
    else if (path.startsWith("/v1/agents/poll") || path.startsWith("/v1/agents/messages"))
      deps.log.debug("http request", fields);
    else deps.log.info("http request", fields);
    return res;
  };
}
