/**
 * A minimal client of Firecracker's API socket: HTTP/1.1 over a Unix socket
 * (Bun's fetch with the `unix` option), one bounded timeout per request, and
 * failures as AgentError (VMM_START_FAILED, subsystem `firecracker-api`)
 * whose facts carry the method, path, HTTP status and Firecracker's
 * `fault_message`; asControlFailure turns one into VMM_CONTROL_FAILED for
 * the control requests of issue 21 (pause, resume, snapshots).
 *
 * Implements the transport of spec "Start (ensure_running)" against the
 * reference firecracker.yaml (every error response is `Error` with
 * `fault_message`). Must never: retry a non-idempotent request on its own,
 * read an unbounded response body, or wait without a timeout.
 */

import { AgentError } from "../../errors.ts";

/** Default per-request timeout, ms (SPECIFICATION.md: the API answers within milliseconds). */
export const DEFAULT_API_TIMEOUT_MS = 5_000;
/** Largest response body read, bytes; Firecracker's error bodies are one short JSON object. */
export const MAX_API_RESPONSE_BYTES = 64 * 1024;

/**
 * A failed API call as an AgentError (VMM_START_FAILED). Facts: `method`,
 * `path`, `status` (the HTTP status; 0 when no response came: connect
 * failure or timeout) and `faultMessage` (Firecracker's `fault_message`,
 * when it sent one).
 */
export function firecrackerApiError(
  method: string,
  path: string,
  status: number,
  faultMessage: string | undefined,
  detail: string,
  cause?: unknown,
): AgentError {
  return new AgentError(
    "VMM_START_FAILED",
    `Firecracker API ${method} ${path} failed (${status || "no response"}): ${faultMessage ?? detail}`,
    {
      subsystem: "firecracker-api",
      facts: { method, path, status, faultMessage },
      ...(cause === undefined ? {} : { cause }),
    },
  );
}

/**
 * The same API failure as a control failure (issue 21: a pause, resume or state save that
 * Firecracker did not confirm): code VMM_CONTROL_FAILED, subsystem `firecracker-api`, the
 * original's message and facts kept and the original as `cause`. Anything that is not an
 * AgentError becomes one with `detail` as its message.
 */
export function asControlFailure(e: unknown, detail: string): AgentError {
  const from = e instanceof AgentError ? e : undefined;
  return new AgentError("VMM_CONTROL_FAILED", from?.message ?? `${detail}: ${(e as Error)?.message ?? String(e)}`, {
    subsystem: "firecracker-api",
    facts: from?.facts ?? {},
    cause: e,
  });
}

/** The port the driver talks through; a fake may record calls instead. */
export interface FirecrackerApi {
  /** PUT `path` with the JSON `body`; resolves on 2xx, throws firecrackerApiError otherwise. */
  put(path: string, body: unknown): Promise<void>;
  /** PATCH `path` with the JSON `body` (e.g. `PATCH /vm`); resolves on 2xx, throws firecrackerApiError otherwise. */
  patch(path: string, body: unknown): Promise<void>;
  /** GET `path`; resolves with the parsed JSON body on 2xx, throws firecrackerApiError otherwise. */
  get(path: string): Promise<unknown>;
}

/** A FirecrackerApi over the Unix socket at `socketPath`; each request is aborted after `timeoutMs`. */
export function unixSocketApi(socketPath: string, timeoutMs = DEFAULT_API_TIMEOUT_MS): FirecrackerApi {
  async function call(method: "GET" | "PUT" | "PATCH", path: string, body?: unknown): Promise<unknown> {
    let res: Response;
    try {
      res = await fetch(`http://localhost${path}`, {
        unix: socketPath,
        method,
        headers: { Accept: "application/json", ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(timeoutMs),
        keepalive: false,
      });
    } catch (e) {
      throw firecrackerApiError(
        method,
        path,
        0,
        undefined,
        `${(e as Error).message} (socket ${socketPath}, timeout ${timeoutMs} ms)`,
        e,
      );
    }
    const text = await readBounded(res);
    const json = parseJson(text);
    if (res.status >= 200 && res.status < 300) return json;
    const fault =
      json && typeof json === "object" && typeof (json as { fault_message?: unknown }).fault_message === "string"
        ? (json as { fault_message: string }).fault_message
        : undefined;
    throw firecrackerApiError(method, path, res.status, fault, text.slice(0, 200));
  }
  return {
    put: async (path, body) => void (await call("PUT", path, body)),
    patch: async (path, body) => void (await call("PATCH", path, body)),
    get: (path) => call("GET", path),
  };
}

async function readBounded(res: Response): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const r = await reader.read();
    if (r.done) break;
    total += r.value.length;
    if (total > MAX_API_RESPONSE_BYTES) {
      await reader.cancel();
      break;
    }
    chunks.push(r.value);
  }
  return new TextDecoder().decode(Buffer.concat(chunks));
}

function parseJson(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
