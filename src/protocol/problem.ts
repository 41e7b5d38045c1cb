/**
 * RFC 9457 problem details on the wire, both directions: the one place that
 * turns a BeachballError into an `application/problem+json` response, and
 * the one parser every HTTP client (agent, CLI, relay, proxy) uses to turn
 * an error answer back into a BeachballError.
 *
 * Lower layer: imports only src/protocol. Must never: put a request body, a
 * token or a payload into a problem; trust an answer's text beyond the
 * bounded fields read here (a peer controls it).
 */
import { BeachballError, isErrorCode, type ErrorCode } from "./errors.ts";

/** Longest `detail` kept from a peer's problem body, in characters. */
export const MAX_PROBLEM_DETAIL_CHARS = 1000;
/** Most bytes of a non-problem answer quoted in an error message. */
export const MAX_QUOTED_ANSWER_CHARS = 200;

/**
 * The challenge a 401 answer carries: every Beachball credential (principal
 * token, host credential, endpoint token, relay token) is a bearer token
 * (RFC 6750 §3; RFC 9110 §15.5.2 requires a challenge on every 401).
 */
export const BEARER_CHALLENGE = 'Bearer realm="beachball"';

/**
 * The `application/problem+json` response for `err` (RFC 9457), with
 * `Retry-After` when `extra.retryAfterSeconds` is set, `WWW-Authenticate`
 * (BEARER_CHALLENGE) on a 401, and any `headers` given (e.g. `Allow` on
 * 405).
 */
export function problemResponse(err: BeachballError, headers: Record<string, string> = {}): Response {
  return problemFactory(err, headers)();
}

/** The stable code of every problem response made here, so the request log need not read a body to name it (see problemCodeOf). */
const codes = new WeakMap<Response, ErrorCode>();

/**
 * The stable code of `res` when it is a problem response made by this
 * module (problemResponse, problemFactory), else undefined: a cheap lookup,
 * no body read (src/scheduler/requestLog.ts).
 */
export function problemCodeOf(res: Response): ErrorCode | undefined {
  return codes.get(res);
}

/**
 * A maker of fresh, identical problem responses for `err` (the same body,
 * status and headers as problemResponse): the body is serialised once, so
 * a refusal given thousands of times a second (a shed burst, issue 18 item
 * 21) costs one Response, not an Error, a stack and a JSON.stringify each.
 */
export function problemFactory(err: BeachballError, headers: Record<string, string> = {}): () => Response {
  const h: Record<string, string> = {
    "content-type": "application/problem+json",
    ...(err.status === 401 ? { "www-authenticate": BEARER_CHALLENGE } : {}),
    ...headers,
  };
  const retry = err.extra?.["retryAfterSeconds"];
  if (typeof retry === "number") h["retry-after"] = String(retry);
  const body = JSON.stringify(err.toProblem());
  const status = err.status;
  const code = err.code;
  return () => {
    const res = new Response(body, { status, headers: h });
    codes.set(res, code);
    return res;
  };
}

/** Shorthand: the problem response for a code and detail. */
export function problem(
  code: ErrorCode,
  detail: string,
  extra?: Record<string, unknown>,
  headers?: Record<string, string>,
): Response {
  return problemResponse(new BeachballError(code, detail, extra), headers);
}

/**
 * An error answer that carries no problem body with a code this build
 * knows (a proxy's 502, a newer server's code, plain text). `status` is the
 * HTTP status; callers treat it as a transport-level failure when it is 5xx.
 */
export class UnexpectedAnswerError extends Error {
  /** The HTTP status of the answer. */
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.name = "UnexpectedAnswerError";
    this.status = status;
  }
}

/**
 * Characters of a peer's text that must not reach a terminal or a log line
 * as they are: C0 and C1 controls and DEL (they start escape sequences: a
 * title change, a cleared screen, a forged line) and the bidirectional
 * overrides and isolates (they reorder what is shown, Unicode TR 9).
 */
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]+/g;

/** `text` with every run of UNPRINTABLE characters and spaces made one space, trimmed. */
function printable(text: string): string {
  return text.replace(UNPRINTABLE, " ").replace(/ {2,}/g, " ").trim();
}

/** The bounded fields of a problem body (the detail printable: see UNPRINTABLE), or null when `text` is not a problem with a known code. */
export function parseProblem(text: string): { code: ErrorCode; detail: string; extra: Record<string, unknown> } | null {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return null;
  const p = v as { code?: unknown; detail?: unknown; title?: unknown; extra?: unknown };
  if (!isErrorCode(p.code)) return null;
  const detail = typeof p.detail === "string" ? printable(p.detail.slice(0, MAX_PROBLEM_DETAIL_CHARS)) : p.code;
  const extra =
    typeof p.extra === "object" && p.extra !== null && !Array.isArray(p.extra)
      ? (p.extra as Record<string, unknown>)
      : {};
  return { code: p.code, detail, extra };
}

/**
 * The error for a non-2xx answer: a BeachballError with the server's stable
 * code (its `extra` holds the HTTP `status` and the problem's own extra
 * facts), or an UnexpectedAnswerError when the body is not a problem this
 * build understands.
 */
export function errorFromAnswer(status: number, text: string): BeachballError | UnexpectedAnswerError {
  const p = parseProblem(text);
  if (p) return new BeachballError(p.code, p.detail, { ...p.extra, status });
  const quoted = text
    .replace(/[^\x20-\x7e]+/g, " ")
    .trim()
    .slice(0, MAX_QUOTED_ANSWER_CHARS);
  return new UnexpectedAnswerError(status, `HTTP ${status} without a problem body${quoted ? `: ${quoted}` : ""}`);
}

/** Reads a non-2xx `Response` into the error errorFromAnswer describes. */
export async function errorFromResponse(res: Response): Promise<BeachballError | UnexpectedAnswerError> {
  const text = await res.text().catch(() => "");
  return errorFromAnswer(res.status, text);
}
