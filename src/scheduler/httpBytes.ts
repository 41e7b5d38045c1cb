/**
 * The scheduler's HTTP byte counters (spec "Observability and retention";
 * issue 20: exec and files never pass through the scheduler, and its byte
 * counters show it): `bb_http_request_body_bytes_total`, the request body
 * bytes the front door read (the guard's bounded read and its drain of a
 * refused body; bytes a host discards unread never reach the process), and
 * `bb_http_response_body_bytes_total`, the body bytes of every answer it
 * gave. Counted in one place, the front door both hosts build (app.ts).
 *
 * Cost: one counter add per request. A JSON answer the front door encodes
 * itself (nearly every answer) is counted from its encoded text
 * (`json`), with no second pass over the bytes: cloning every answer to
 * read it beside the send cost the embedded host Bun's fast path for
 * static bodies (about 15 % of allocation creates per second in
 * bench/api.ts, old and new in the same run). Any other answer (streams,
 * problems, the metrics text) is counted from a clone read chunk by chunk
 * beside the send (no copy of a chunk), so its count lags the send by
 * moments.
 * Must never: read, log or keep the bytes themselves; delay or reframe an
 * answer (a clone keeps Content-Length); count a WebSocket's messages as
 * either (an upgrade answer has no body).
 */
import type { Metrics } from "./metrics.ts";

/** Request body bytes read by the front door, counter name. */
export const REQUEST_BYTES_METRIC = "bb_http_request_body_bytes_total";
/** Response body bytes answered by the front door, counter name. */
export const RESPONSE_BYTES_METRIC = "bb_http_response_body_bytes_total";

/** The two counters over one Metrics registry. */
export class HttpByteCounters {
  /** Answers `json` made and counted already. */
  private readonly counted = new WeakSet<Response>();

  constructor(private readonly metrics: Metrics) {}

  /** Adds `bytes` request body bytes (bytes ≥ 0; 0 adds nothing). */
  request(bytes: number): void {
    if (bytes > 0) this.metrics.inc(REQUEST_BYTES_METRIC, "Request body bytes the scheduler read", {}, bytes);
  }

  /**
   * A JSON answer of `text` with `status`, counted from the text itself
   * (UTF-8 bytes; an answer to HEAD counts 0) and marked so `response`
   * does not count it again.
   */
  json(text: string, status: number, method: string): Response {
    const res = new Response(text, { status, headers: { "content-type": "application/json" } });
    this.counted.add(res);
    const n = method === "HEAD" ? 0 : Buffer.byteLength(text, "utf8");
    if (n > 0) this.metrics.inc(RESPONSE_BYTES_METRIC, "Response body bytes the scheduler answered", {}, n);
    return res;
  }

  /** Counts `res`'s body as it goes out and returns `res` unchanged (a body-less answer, any answer to HEAD, or one `json` made, counts 0 here). */
  response(res: Response, method: string): Response {
    if (res.body === null || res.status === 101 || method === "HEAD" || this.counted.has(res)) return res;
    let copy: ReadableStream<Uint8Array> | null;
    try {
      copy = res.clone().body;
    } catch {
      return res; // a body already taken (cannot happen for answers made here): nothing to count
    }
    if (copy) void this.countStream(copy);
    return res;
  }

  private async countStream(body: ReadableStream<Uint8Array>): Promise<void> {
    const reader = body.getReader();
    let total = 0;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        total += value.byteLength;
      }
    } catch {
      // The answer's stream failed (the client went away mid-stream): count what was read of it.
    }
    if (total > 0) this.metrics.inc(RESPONSE_BYTES_METRIC, "Response body bytes the scheduler answered", {}, total);
  }
}
