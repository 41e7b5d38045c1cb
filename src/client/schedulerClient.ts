/**
 * The typed client of the scheduler's public HTTP API: what the CLI, the
 * dev demo and a workload controller use. Bodies are typed from the same
 * TypeBox schemas the scheduler validates and publishes in /openapi.json
 * (src/protocol/api.ts, src/protocol/responses.ts).
 *
 * Retries (spec "Admission and limits"): a 429 or 503 answer is retried
 * after its Retry-After (bounded by MAX_RETRY_AFTER_MS), a transport failure
 * after a short backoff, up to `maxAttempts` tries; only calls that are safe
 * to repeat are retried: reads, and writes the scheduler deduplicates
 * (create by clientRequestId, bootstrap by deliveryId, release, host state).
 * `create` fills a missing clientRequestId with a fresh idempotency key, once,
 * so a create whose answer was lost is replayed (200), never doubled.
 *
 * A scheduler that gives no answer is a SchedulerUnreachableError naming
 * the URL and where it came from. Side effects (fetch, sleep, the
 * idempotency key) are ports, so tests fake
 * them. Must never: print, log or put the token in an error message; retry
 * a call the scheduler does not deduplicate after it may have acted.
 */
import { BeachballError } from "../protocol/errors.ts";
import { bytesToBase64 } from "./base64.ts";
import { errorFromAnswer, UnexpectedAnswerError } from "../protocol/problem.ts";
import { LOG_FOLLOW_WAIT_MS } from "../protocol/logs.ts";
import { EVENT_FOLLOW_WAIT_MS } from "../protocol/eventFollow.ts";
import { WAIT_PAGE_SIZE, waitForEvent, type EventWaitOptions, type EventWaitResult } from "./allocationWait.ts";
import {
  connectionGrantsPath,
  type ConnectionGrantBody,
  type ConnectionGrantResponse,
  type ConnectionMessagesBody,
  type ConnectionPollResponse,
  type ConnectionRelayTokensResponse,
} from "../protocol/connection.ts";
import type {
  AllocationEvent,
  AllocationPage,
  AllocationView,
  AlertItem,
  BootstrapBody,
  CreateAllocationBody,
  DeliveryResult,
  EnrollmentToken,
  EventPage,
  ForkAllocationBody,
  ForkResult,
  HostView,
  LogPage,
  RunEvent,
  RunPage,
  RunView,
  SubmitRunBody,
  UsageReport,
  CreateLeaseBody,
  LeaseEvent,
  LeaseView,
  WellKnown,
} from "./types.ts";

/** Longest a Retry-After is honoured, ms (a larger value is waited this long, then retried). */
export const MAX_RETRY_AFTER_MS = 30_000;
/** Wait before retrying a transport failure or a 429/503 without Retry-After, ms (doubles per attempt). */
export const RETRY_BACKOFF_MS = 500;
/** Tries per call by default (the first one included). */
export const DEFAULT_MAX_ATTEMPTS = 4;
/** How long waiting helpers (follow, deliverWhenReady) keep retrying an unreachable scheduler, ms. */
export const TRANSPORT_RETRY_MS = 60_000;
/** Pause before a refused delivery (GUEST_NOT_CONNECTED, DELIVERY_TIMEOUT, STALE_GENERATION) is tried again, ms. */
export const DELIVERY_RETRY_MS = 300;
/** Default per-request timeout, ms. */
export const REQUEST_TIMEOUT_MS = 60_000;

/** The client's side effects. */
export interface ClientPorts {
  fetch: (url: string, init: RequestInit) => Promise<Response>;
  sleep: (ms: number) => Promise<void>;
  /** A fresh idempotency key for a create without clientRequestId. */
  newRequestId: () => string;
}

/** Options of a SchedulerClient. */
export interface ClientOptions extends Partial<ClientPorts> {
  /** Tries per retryable call (≥ 1); default DEFAULT_MAX_ATTEMPTS. */
  maxAttempts?: number;
  /** Where the URL came from (`--scheduler`, `BB_SCHEDULER_URL`, a config file): named when the scheduler cannot be reached. */
  origin?: string;
}

/**
 * The scheduler did not answer: connection refused or reset, a name that
 * does not resolve, a timeout. The message names the URL and where it came
 * from; retryable calls and retryTransport retry it.
 */
export class SchedulerUnreachableError extends Error {
  constructor(
    readonly url: string,
    readonly origin: string | undefined,
    cause: unknown,
  ) {
    const c = cause as { code?: unknown; name?: unknown; message?: unknown } | null;
    const why =
      c?.code === "ConnectionRefused" || c?.code === "ECONNREFUSED"
        ? "connection refused"
        : c?.name === "TimeoutError"
          ? "no answer in time"
          : typeof c?.code === "string"
            ? `${c.code}${typeof c.message === "string" ? ` (${c.message})` : ""}`
            : String(c?.message ?? cause);
    super(`cannot reach the scheduler at ${url}${origin ? ` (from ${origin})` : ""}: ${why}`);
    this.name = "SchedulerUnreachableError";
  }
}

/** A create request: the body of POST /v1/allocations, with clientRequestId optional (the client then makes one). */
export type CreateRequest = Omit<CreateAllocationBody, "clientRequestId"> & { clientRequestId?: string };
/** A fork request: the body, its clientRequestId optional (a fresh key used for every retry). */
export type ForkRequest = Omit<ForkAllocationBody, "clientRequestId"> & { clientRequestId?: string };

const defaultPorts: ClientPorts = {
  fetch: (url, init) => fetch(url, init),
  sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
  newRequestId: () => `req-${crypto.randomUUID()}`,
};

/**
 * A request's signal: aborts after `timeoutMs` (a TimeoutError reason, as
 * AbortSignal.timeout) or with `outer`; `done` lets its timer and listener
 * go. (AbortSignal.any is not in every Node the package supports.)
 */
function requestSignal(timeoutMs: number, outer?: AbortSignal): { signal: AbortSignal; done: () => void } {
  if (!outer) return { signal: AbortSignal.timeout(timeoutMs), done: () => {} };
  const c = new AbortController();
  const timer = setTimeout(() => c.abort(new DOMException("The operation timed out.", "TimeoutError")), timeoutMs);
  const onAbort = () => c.abort(outer.reason);
  if (outer.aborted) onAbort();
  else outer.addEventListener("abort", onAbort, { once: true });
  return {
    signal: c.signal,
    done: () => {
      clearTimeout(timer);
      outer.removeEventListener("abort", onAbort);
    },
  };
}

/** How long to wait before retrying `e`, ms, or null when it must not be retried. */
export function retryDelayMs(e: unknown, attempt: number): number | null {
  const backoff = RETRY_BACKOFF_MS * 2 ** (attempt - 1);
  if (e instanceof BeachballError) {
    const status = Number(e.extra?.["status"] ?? e.status);
    if (status !== 429 && status !== 503) return null;
    // A spent budget does not come back by waiting a moment (issue 22).
    if (e.code === "COST_LIMIT_EXCEEDED") return null;
    const after = e.extra?.["retryAfterSeconds"];
    return typeof after === "number" && Number.isFinite(after) && after >= 0
      ? Math.min(after * 1000, MAX_RETRY_AFTER_MS)
      : backoff;
  }
  if (e instanceof UnexpectedAnswerError) return e.status === 429 || e.status >= 500 ? backoff : null;
  if (e instanceof SchedulerUnreachableError) return backoff; // refused, reset or timed out: the scheduler deduplicates a repeat
  return null;
}

/** Parses a Retry-After header (delay-seconds or an HTTP-date, RFC 9110 §10.2.3) into seconds, or null. */
export function parseRetryAfter(header: string | null, nowMs: number): number | null {
  if (!header) return null;
  if (/^\d{1,9}$/.test(header.trim())) return Number(header.trim());
  const at = Date.parse(header);
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - nowMs) / 1000));
}

/**
 * Runs `fn`, retrying transport failures (connection refused or reset, a
 * 503 problem, a 5xx answer without a problem body such as a proxy's 502)
 * until `deadline` (epoch ms), after each answer's Retry-After or one second
 * (the last sleep cut to the deadline); other error answers are thrown at once.
 */
export async function retryTransport<T>(
  fn: () => Promise<T>,
  deadline: number,
  sleep: (ms: number) => Promise<void> = defaultPorts.sleep,
): Promise<T> {
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      const transient =
        e instanceof BeachballError
          ? Number(e.extra?.["status"] ?? e.status) === 503
          : e instanceof UnexpectedAnswerError
            ? e.status >= 500
            : !(e instanceof Error && e.name === "AbortError");
      if (!transient || Date.now() >= deadline) throw e;
      const after = e instanceof BeachballError ? e.extra?.["retryAfterSeconds"] : undefined;
      await sleep(
        Math.max(
          0,
          Math.min(typeof after === "number" ? after * 1000 : 1_000, MAX_RETRY_AFTER_MS, deadline - Date.now()),
        ),
      );
    }
  }
}

/**
 * See the module header. Methods throw BeachballError carrying the
 * server's stable code (its `extra.status` is the HTTP status), or
 * UnexpectedAnswerError for an error answer without a problem body.
 */
export class SchedulerClient {
  private readonly ports: ClientPorts;
  private readonly maxAttempts: number;
  /** Where baseUrl came from (see ClientOptions.origin). */
  readonly origin: string | undefined;

  /** `baseUrl`: the scheduler's URL (no trailing slash needed); `token`: a principal's bearer token. */
  constructor(
    readonly baseUrl: string,
    private readonly token: string,
    opts: ClientOptions = {},
  ) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.ports = {
      ...defaultPorts,
      ...Object.fromEntries(Object.entries(opts).filter(([k]) => k in defaultPorts)),
    } as ClientPorts;
    this.maxAttempts = Math.max(1, opts.maxAttempts ?? DEFAULT_MAX_ATTEMPTS);
    this.origin = opts.origin;
  }

  /** fetch, with a failure to get any answer turned into SchedulerUnreachableError. */
  private async send(path: string, init: RequestInit): Promise<Response> {
    try {
      return await this.ports.fetch(`${this.baseUrl}${path}`, init);
    } catch (e) {
      throw new SchedulerUnreachableError(this.baseUrl, this.origin, e);
    }
  }

  /** One request; parses JSON or throws the answer's error. */
  private async once(
    method: string,
    path: string,
    body: unknown,
    timeoutMs: number,
    raw: boolean,
    signal?: AbortSignal,
  ): Promise<{ status: number; body: unknown }> {
    const { signal: ended, done } = requestSignal(timeoutMs, signal);
    const res = await this.send(path, {
      method,
      headers: {
        authorization: `Bearer ${this.token}`,
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: ended,
    }).catch((e) => {
      done();
      throw e;
    });
    const text = await res.text().finally(done);
    if (!res.ok) {
      const err = errorFromAnswer(res.status, text);
      const after = parseRetryAfter(res.headers.get("retry-after"), Date.now());
      if (err instanceof BeachballError && after !== null && err.extra?.["retryAfterSeconds"] === undefined)
        throw new BeachballError(err.code, err.message, { ...err.extra, retryAfterSeconds: after });
      throw err;
    }
    if (raw) return { status: res.status, body: text };
    try {
      return { status: res.status, body: text ? JSON.parse(text) : null };
    } catch {
      throw new UnexpectedAnswerError(res.status, `HTTP ${res.status} with a body that is not JSON`);
    }
  }

  /** A request, retried per the module header when `retry` is true. */
  private async call<T>(
    method: string,
    path: string,
    opts: { body?: unknown; retry?: boolean; timeoutMs?: number; raw?: boolean; signal?: AbortSignal } = {},
  ): Promise<{ status: number; body: T }> {
    const tries = opts.retry === false ? 1 : this.maxAttempts;
    for (let attempt = 1; ; attempt++) {
      try {
        return (await this.once(
          method,
          path,
          opts.body,
          opts.timeoutMs ?? REQUEST_TIMEOUT_MS,
          opts.raw ?? false,
          opts.signal,
        )) as {
          status: number;
          body: T;
        };
      } catch (e) {
        const delay = attempt < tries ? retryDelayMs(e, attempt) : null;
        if (delay === null) throw e;
        await this.ports.sleep(delay);
      }
    }
  }

  /** GET /v1/.well-known/beachball: versions, region and workload classes. */
  async discover(): Promise<WellKnown> {
    return (await this.call<WellKnown>("GET", "/v1/.well-known/beachball")).body;
  }

  /**
   * POST /v1/allocations. Idempotent: the same clientRequestId and body
   * answer the same allocation (`created: false`); a missing
   * clientRequestId is filled with a fresh key used for every retry.
   * Throws UNKNOWN_WORKLOAD_CLASS, QUOTA_*, RATE_LIMITED (after retries),
   * IDEMPOTENCY_CONFLICT (same key, another body).
   */
  async create(req: CreateRequest): Promise<{ created: boolean; view: AllocationView }> {
    const body: CreateAllocationBody = { ...req, clientRequestId: req.clientRequestId ?? this.ports.newRequestId() };
    const r = await this.call<AllocationView>("POST", "/v1/allocations", { body });
    return { created: r.status === 201, view: r.body };
  }
  /** GET /v1/allocations/{id}. Throws NOT_FOUND. */
  async get(id: string): Promise<AllocationView> {
    return (await this.call<AllocationView>("GET", `/v1/allocations/${encodeURIComponent(id)}`)).body;
  }
  /** GET /v1/allocations: one page (limit 1..200) after `cursor`. */
  async list(cursor?: string, limit = 50): Promise<AllocationPage> {
    const q = new URLSearchParams({ limit: String(limit), ...(cursor ? { cursor } : {}) });
    return (await this.call<AllocationPage>("GET", `/v1/allocations?${q}`)).body;
  }
  /**
   * POST /v1/allocations/{id}/connection-grants: a signed grant for this
   * client's public key (spec "Data path" step 2; `bb proxy`). Not retried:
   * the scheduler does not deduplicate grants.
   */
  async createConnectionGrant(id: string, body: ConnectionGrantBody): Promise<ConnectionGrantResponse> {
    return (await this.call<ConnectionGrantResponse>("POST", connectionGrantsPath(id), { body, retry: false })).body;
  }
  /** DELETE /v1/allocations/{id}/connection-grants/{grantId}: revokes a grant (idempotent), one try within `timeoutMs` (a proxy exiting does not wait longer; the grant expires anyway). */
  async revokeConnectionGrant(id: string, grantId: string, timeoutMs = 10_000): Promise<void> {
    await this.call<unknown>("DELETE", connectionGrantsPath(id, grantId), { timeoutMs, raw: true, retry: false });
  }
  /**
   * POST /v1/connections/{id}/messages: this side's rendezvous messages
   * (candidates, path observations, acks) to a grant's Connection. The
   * route authenticates with the grant's endpoint token, not a principal's:
   * call it on a client made with that token
   * (`new SchedulerClient(url, endpointToken)`). One try within
   * `timeoutMs` (sequence numbers make a retry by the caller safe).
   */
  async connectionMessages(
    connectionId: string,
    body: ConnectionMessagesBody,
    timeoutMs = 10_000,
  ): Promise<ConnectionPollResponse> {
    return (
      await this.call<ConnectionPollResponse>("POST", `/v1/connections/${encodeURIComponent(connectionId)}/messages`, {
        body,
        timeoutMs,
        retry: false,
      })
    ).body;
  }
  /**
   * POST /v1/connections/{id}/relay-tokens under this client's endpoint
   * token: fresh relay tokens for its role of the Connection's grant. Throws
   * UNAUTHENTICATED once the grant ended, RATE_LIMITED within 10 s of the
   * last refresh.
   */
  async connectionRelayTokens(connectionId: string, timeoutMs = 10_000): Promise<ConnectionRelayTokensResponse> {
    return (
      await this.call<ConnectionRelayTokensResponse>(
        "POST",
        `/v1/connections/${encodeURIComponent(connectionId)}/relay-tokens`,
        { timeoutMs, retry: false },
      )
    ).body;
  }
  /**
   * POST /v1/allocations/{id}/fork (issue 21): `count` allocations restored
   * from the suspended allocation's snapshot. Idempotent by clientRequestId
   * (`created: false` for a replay; a missing key is filled with a fresh
   * one used for every retry). Throws INVALID_STATE (not suspended),
   * PAYLOAD_CONSUMED (the parent consumed a payload: pass
   * allowConsumedPayload), IDEMPOTENCY_CONFLICT, QUOTA_*, RATE_LIMITED.
   */
  async fork(id: string, req: ForkRequest): Promise<{ created: boolean; items: AllocationView[] }> {
    const body: ForkAllocationBody = { ...req, clientRequestId: req.clientRequestId ?? this.ports.newRequestId() };
    const r = await this.call<ForkResult>("POST", `/v1/allocations/${encodeURIComponent(id)}/fork`, { body });
    return { created: r.status === 201, items: r.body.items };
  }
  /** POST /v1/allocations/{id}/pause (idempotent; issue 21): 202 with the allocation, paused once the agent confirms. */
  async pause(id: string): Promise<AllocationView> {
    return (await this.call<AllocationView>("POST", `/v1/allocations/${encodeURIComponent(id)}/pause`)).body;
  }

  /** POST /v1/allocations/{id}/suspend (idempotent; the workload class must be suspendable, else NOT_SUSPENDABLE). */
  async suspend(id: string): Promise<AllocationView> {
    return (await this.call<AllocationView>("POST", `/v1/allocations/${encodeURIComponent(id)}/suspend`)).body;
  }

  /** POST /v1/allocations/{id}/resume (idempotent): a suspended VM comes back as the next generation. */
  async resume(id: string): Promise<AllocationView> {
    return (await this.call<AllocationView>("POST", `/v1/allocations/${encodeURIComponent(id)}/resume`)).body;
  }

  /** POST /v1/allocations/{id}/release (idempotent). */
  async release(id: string): Promise<AllocationView> {
    return (await this.call<AllocationView>("POST", `/v1/allocations/${encodeURIComponent(id)}/release`)).body;
  }
  /**
   * GET /v1/allocations/{id}/events after sequence number `after`. With
   * `follow`, the scheduler parks a read that finds none for up to
   * EVENT_FOLLOW_WAIT_MS (src/protocol/eventFollow.ts); such a read is tried
   * once (waitForEvent handles its failures) and `signal` ends it. Throws
   * NOT_FOUND; with `follow`, RATE_LIMITED or CONCURRENCY_LIMITED when a
   * follow bound is full, VALIDATION_FAILED from a scheduler without it.
   */
  async events(
    id: string,
    after = 0,
    limit = 100,
    opts: { follow?: boolean; signal?: AbortSignal } = {},
  ): Promise<AllocationEvent[]> {
    const q = `after=${after}&limit=${limit}${opts.follow ? "&follow=1" : ""}`;
    return (
      await this.call<EventPage>("GET", `/v1/allocations/${encodeURIComponent(id)}/events?${q}`, {
        ...(opts.follow ? { retry: false, timeoutMs: EVENT_FOLLOW_WAIT_MS + 15_000 } : {}),
        ...(opts.signal ? { signal: opts.signal } : {}),
      })
    ).body.items;
  }

  /**
   * Follows `id`'s events until a goal event, a terminal state, a deadline
   * or an abort (src/client/allocationWait.ts: event-driven, resumes after
   * a dropped read, a slow poll only while the stream is unavailable).
   */
  waitForEvent(id: string, opts: EventWaitOptions = {}): Promise<EventWaitResult> {
    return waitForEvent(this, id, { sleep: this.ports.sleep, ...opts });
  }
  /** POST /v1/allocations/{id}/bootstrap (waits up to ~35 s for the guest's receipt; idempotent by deliveryId). */
  async deliver(id: string, body: BootstrapBody): Promise<DeliveryResult> {
    // Not retried here: GUEST_NOT_CONNECTED / DELIVERY_TIMEOUT mean "not yet"; deliverWhenReady retries them with the allocation's state in view.
    return (
      await this.call<DeliveryResult>("POST", `/v1/allocations/${encodeURIComponent(id)}/bootstrap`, {
        body,
        timeoutMs: 40_000,
        retry: false,
      })
    ).body;
  }
  /** POST /v1/hosts/{id}/enrollment-tokens (operator). Not retried: each call mints a token. */
  async enrollmentToken(hostId: string, ttlSeconds?: number): Promise<EnrollmentToken> {
    return (
      await this.call<EnrollmentToken>("POST", `/v1/hosts/${encodeURIComponent(hostId)}/enrollment-tokens`, {
        body: ttlSeconds ? { ttlSeconds } : {},
        retry: false,
      })
    ).body;
  }
  /** POST /v1/hosts/{id}/activate|drain|disable (operator); `disable` fences the host. */
  async setHostState(hostId: string, action: "activate" | "drain" | "disable"): Promise<HostView> {
    return (await this.call<HostView>("POST", `/v1/hosts/${encodeURIComponent(hostId)}/${action}`)).body;
  }
  /** POST /v1/allocations/{id}/replacement-authorizations (controller). */
  async authorizeReplacement(id: string, generation: number): Promise<AllocationView> {
    return (
      await this.call<AllocationView>("POST", `/v1/allocations/${encodeURIComponent(id)}/replacement-authorizations`, {
        body: { generation },
      })
    ).body;
  }
  /** GET /v1/operations/alerts (operator). */
  async alerts(after = 0, limit = 100): Promise<AlertItem[]> {
    return (await this.call<{ items: AlertItem[] }>("GET", `/v1/operations/alerts?after=${after}&limit=${limit}`)).body
      .items;
  }
  /** GET /v1/operations/metrics (operator): Prometheus text. */
  async metrics(): Promise<string> {
    return (await this.call<string>("GET", "/v1/operations/metrics", { raw: true, timeoutMs: 30_000 })).body;
  }
  /** GET /v1/hosts (operator). */
  async hosts(): Promise<HostView[]> {
    return (await this.call<{ items: HostView[] }>("GET", "/v1/hosts")).body.items;
  }

  /**
   * Waits until `until(view)` holds and returns that view: reads the view,
   * then again after each batch of new events (waitForEvent: no polling;
   * `intervalMs` is only the pause of the fallback poll while the event
   * stream is unavailable). Throws BeachballError INVALID_STATE when the
   * allocation ends (released/failed) first, and WaitTimeoutError when
   * `timeoutMs` passes or `signal` aborts (the message names the state and
   * conditions, e.g. NO_CAPACITY).
   */
  async waitFor(
    id: string,
    until: (v: AllocationView) => boolean,
    opts: { timeoutMs: number; intervalMs?: number; signal?: AbortSignal },
  ): Promise<AllocationView> {
    const deadline = Date.now() + opts.timeoutMs;
    // The sequence number is read before the view: an event written after the view was read wakes the follow below.
    let seq = await this.lastEventSeq(id, deadline);
    for (;;) {
      if (opts.signal?.aborted) throw new WaitTimeoutError(`interrupted while waiting for ${id}`);
      const v = await retryTransport(() => this.get(id), deadline, this.ports.sleep);
      if (until(v)) return v;
      if (v.state === "released" || v.state === "failed")
        throw new BeachballError("INVALID_STATE", `allocation is ${v.state}${v.reason ? ` (${v.reason})` : ""}`);
      if (Date.now() >= deadline)
        throw new WaitTimeoutError(
          `allocation ${id} still ${v.state} after ${opts.timeoutMs} ms${v.conditions.length ? ` (${v.conditions.join(", ")})` : ""}`,
        );
      const r = await this.waitForEvent(id, {
        after: seq,
        deadlineMs: deadline,
        until: () => true,
        ...(opts.signal ? { signal: opts.signal } : {}),
        ...(opts.intervalMs !== undefined ? { fallbackPollMs: opts.intervalMs } : {}),
      });
      seq = await this.lastEventSeq(id, deadline, r.lastSeq);
    }
  }

  /** The last event's sequence number at or after `after` (pages through plain reads). */
  private async lastEventSeq(id: string, deadline: number, after = 0): Promise<number> {
    for (;;) {
      const page = await retryTransport(() => this.events(id, after, WAIT_PAGE_SIZE), deadline, this.ports.sleep);
      if (page.length > 0) after = page[page.length - 1]!.seq;
      if (page.length < WAIT_PAGE_SIZE) return after;
    }
  }

  /**
   * Follows events from `after` until the allocation is terminal (or `until`
   * returns true) or `signal` aborts, calling `onEvent` for each
   * (waitForEvent: event-driven; `intervalMs` is only the fallback poll's
   * pause). Returns the last sequence number seen.
   */
  async follow(
    id: string,
    onEvent: (e: AllocationEvent) => void,
    opts: { after?: number; intervalMs?: number; until?: (e: AllocationEvent) => boolean; signal?: AbortSignal } = {},
  ): Promise<number> {
    const r = await this.waitForEvent(id, {
      onEvent,
      ...(opts.after !== undefined ? { after: opts.after } : {}),
      ...(opts.until ? { until: opts.until } : {}),
      ...(opts.signal ? { signal: opts.signal } : {}),
      ...(opts.intervalMs !== undefined ? { fallbackPollMs: opts.intervalMs } : {}),
    });
    return r.lastSeq;
  }

  /**
   * GET /v1/allocations/{id}/logs from byte offset `offset`; with `follow`
   * the scheduler holds a read that finds nothing new for up to
   * LOG_FOLLOW_WAIT_MS. Throws NOT_FOUND, LOG_OFFSET_PAST_END, RATE_LIMITED
   * (after retries).
   */
  async logs(id: string, offset = 0, follow = false): Promise<LogPage> {
    const q = `offset=${offset}${follow ? "&follow=1" : ""}`;
    return (
      await this.call<LogPage>("GET", `/v1/allocations/${encodeURIComponent(id)}/logs?${q}`, {
        timeoutMs: LOG_FOLLOW_WAIT_MS + 15_000,
      })
    ).body;
  }

  /**
   * Streams an allocation's workload output from `offset`: `onPage` gets
   * each page (its `droppedBytes` says what the reader missed). Without
   * `follow`, ends at the log's current end; with it, keeps reading (each
   * read held by the scheduler, transport failures retried for
   * TRANSPORT_RETRY_MS) until the allocation is terminal and read to its
   * end, or `signal` aborts. Returns the offset to resume at.
   */
  async streamLogs(
    id: string,
    onPage: (p: LogPage) => void,
    opts: { offset?: number; follow?: boolean; signal?: AbortSignal } = {},
  ): Promise<number> {
    let offset = opts.offset ?? 0;
    for (;;) {
      if (opts.signal?.aborted) return offset;
      const page = await retryTransport(
        () => this.logs(id, offset, opts.follow ?? false),
        Date.now() + TRANSPORT_RETRY_MS,
        this.ports.sleep,
      );
      if (page.text || page.droppedBytes) onPage(page);
      const moved = page.nextOffset !== offset;
      offset = page.nextOffset;
      if (page.complete || (!opts.follow && !moved)) return offset;
    }
  }

  /**
   * POST /v1/runs (issue 22): queues a run. Idempotent by clientRequestId
   * (`created: false` for a repeat). Throws UNKNOWN_WORKLOAD_CLASS,
   * PAYLOAD_TOO_LARGE, IDEMPOTENCY_CONFLICT, QUOTA_QUEUED_RUNS (after the
   * retries Retry-After allows), RATE_LIMITED.
   */
  async submitRun(body: SubmitRunBody): Promise<{ created: boolean; view: RunView }> {
    const r = await this.call<RunView>("POST", "/v1/runs", { body });
    return { created: r.status === 201, view: r.body };
  }
  /** GET /v1/runs/{id}. Throws NOT_FOUND. */
  async getRun(id: string): Promise<RunView> {
    return (await this.call<RunView>("GET", `/v1/runs/${encodeURIComponent(id)}`)).body;
  }
  /** GET /v1/runs: one page (limit 1..200), newest first, below `cursor`. */
  async listRuns(cursor?: number, limit = 50): Promise<RunPage> {
    const q = new URLSearchParams({
      limit: String(limit),
      ...(cursor !== undefined ? { cursor: String(cursor) } : {}),
    });
    return (await this.call<RunPage>("GET", `/v1/runs?${q}`)).body;
  }
  /** POST /v1/runs/{id}/cancel (idempotent). Throws NOT_FOUND. */
  async cancelRun(id: string): Promise<RunView> {
    return (await this.call<RunView>("POST", `/v1/runs/${encodeURIComponent(id)}/cancel`)).body;
  }
  /** GET /v1/runs/{id}/events after `after`; `follow` parks up to EVENT_FOLLOW_WAIT_MS (tried once). Throws NOT_FOUND, RATE_LIMITED. */
  async runEvents(id: string, after = 0, limit = 100, follow = false): Promise<RunEvent[]> {
    const q = `after=${after}&limit=${limit}${follow ? "&follow=1" : ""}`;
    return (
      await this.call<{ items: RunEvent[] }>("GET", `/v1/runs/${encodeURIComponent(id)}/events?${q}`, {
        ...(follow ? { retry: false, timeoutMs: EVENT_FOLLOW_WAIT_MS + 15_000 } : {}),
      })
    ).body.items;
  }
  /** GET /v1/runs/{id}/logs from byte offset `offset` (`follow`: held until more arrives). Throws NOT_FOUND, LOG_OFFSET_PAST_END. */
  async runLogs(id: string, offset = 0, follow = false): Promise<LogPage> {
    const q = `offset=${offset}${follow ? "&follow=1" : ""}`;
    return (
      await this.call<LogPage>("GET", `/v1/runs/${encodeURIComponent(id)}/logs?${q}`, {
        timeoutMs: LOG_FOLLOW_WAIT_MS + 15_000,
      })
    ).body;
  }
  /** POST /v1/leases (issue 22): a VM held until its TTL or idle timeout; idempotent by clientRequestId. Throws QUOTA_ACTIVE_LEASES, COST_LIMIT_EXCEEDED, UNKNOWN_WORKLOAD_CLASS. */
  async createLease(body: CreateLeaseBody): Promise<{ created: boolean; view: LeaseView }> {
    const r = await this.call<LeaseView>("POST", "/v1/leases", { body });
    return { created: r.status === 201, view: r.body };
  }
  /** GET /v1/leases/{id} (the owner's, or one shared with the caller). Throws NOT_FOUND. */
  async getLease(id: string): Promise<LeaseView> {
    return (await this.call<LeaseView>("GET", `/v1/leases/${encodeURIComponent(id)}`)).body;
  }
  /** GET /v1/leases: the caller's own and shared leases, newest first. */
  async listLeases(): Promise<LeaseView[]> {
    return (await this.call<{ items: LeaseView[] }>("GET", "/v1/leases")).body.items;
  }
  /** GET /v1/leases/{id}/events after `after`. */
  async leaseEvents(id: string, after = 0, limit = 100): Promise<LeaseEvent[]> {
    return (
      await this.call<{ items: LeaseEvent[] }>(
        "GET",
        `/v1/leases/${encodeURIComponent(id)}/events?after=${after}&limit=${limit}`,
      )
    ).body.items;
  }
  /** POST /v1/leases/{id}/heartbeat. Throws LEASE_ENDED once it ended, FORBIDDEN for a read share. */
  async heartbeatLease(id: string): Promise<LeaseView> {
    return (await this.call<LeaseView>("POST", `/v1/leases/${encodeURIComponent(id)}/heartbeat`)).body;
  }
  /** POST /v1/leases/{id}/extend: it now ends `ttlSeconds` from now. Throws LEASE_ENDED. */
  async extendLease(id: string, ttlSeconds: number): Promise<LeaseView> {
    return (await this.call<LeaseView>("POST", `/v1/leases/${encodeURIComponent(id)}/extend`, { body: { ttlSeconds } }))
      .body;
  }
  /** POST /v1/leases/{id}/release (owner; idempotent). */
  async releaseLease(id: string): Promise<LeaseView> {
    return (await this.call<LeaseView>("POST", `/v1/leases/${encodeURIComponent(id)}/release`)).body;
  }
  /** POST /v1/leases/{id}/shares: share with `principal` to read or use (owner). */
  async shareLease(id: string, principal: string, access: "read" | "use"): Promise<LeaseView> {
    return (
      await this.call<LeaseView>("POST", `/v1/leases/${encodeURIComponent(id)}/shares`, { body: { principal, access } })
    ).body;
  }
  /** POST /v1/leases/{id}/unshare: take a share back (owner; idempotent). */
  async unshareLease(id: string, principal: string): Promise<LeaseView> {
    return (await this.call<LeaseView>("POST", `/v1/leases/${encodeURIComponent(id)}/unshare`, { body: { principal } }))
      .body;
  }
  /** GET /v1/usage over [fromMs, toMs) (ms since the epoch; defaults: this month to now), grouped `by` tenant, controller, class or host. */
  async usage(
    opts: { fromMs?: number; toMs?: number; by?: "tenant" | "controller" | "class" | "host" } = {},
  ): Promise<UsageReport> {
    const q = new URLSearchParams({
      ...(opts.fromMs !== undefined ? { from: String(opts.fromMs) } : {}),
      ...(opts.toMs !== undefined ? { to: String(opts.toMs) } : {}),
      ...(opts.by ? { by: opts.by } : {}),
    });
    return (await this.call<UsageReport>("GET", `/v1/usage${q.size ? `?${q}` : ""}`)).body;
  }
  /**
   * Waits until run `id` is terminal (or `timeoutMs` passes: WaitTimeoutError)
   * and returns its view. It reads the view once per new event, parking on
   * the run's event follow between them, so a waiter costs about one
   * request per event plus one per EVENT_FOLLOW_WAIT_MS; when a follow
   * fails it backs off 100 ms doubling to 2 s (reset by any progress), never
   * spinning.
   */
  async waitRun(id: string, opts: { timeoutMs: number; signal?: AbortSignal }): Promise<RunView> {
    const deadline = Date.now() + opts.timeoutMs;
    let after = 0;
    let backoff = 100;
    for (;;) {
      const v = await retryTransport(() => this.getRun(id), deadline, this.ports.sleep);
      if (["succeeded", "failed", "timed_out", "canceled"].includes(v.state)) return v;
      if (Date.now() >= deadline || opts.signal?.aborted)
        throw new WaitTimeoutError(`run ${id} still ${v.state} after ${opts.timeoutMs} ms`);
      try {
        const events = await this.runEvents(id, after, 200, true);
        if (events.length) after = events[events.length - 1]!.seq;
        backoff = 100;
      } catch {
        await this.ports.sleep(backoff);
        backoff = Math.min(2_000, backoff * 2);
      }
    }
  }

  /**
   * Hands a payload to a ready allocation: waits for readiness (waitFor,
   * event-driven) and retries GUEST_NOT_CONNECTED / DELIVERY_TIMEOUT /
   * STALE_GENERATION after DELIVERY_RETRY_MS until `timeoutMs`. Throws
   * INVALID_STATE when the allocation ends first, DELIVERY_TIMEOUT when
   * `timeoutMs` passes, an Error with exitCode 130 when `signal` aborts.
   */
  async deliverWhenReady(
    id: string,
    payload: Uint8Array,
    deliveryId: string,
    timeoutMs: number,
    signal?: AbortSignal,
  ): Promise<{ digest: string; generation: number }> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (signal?.aborted) throw Object.assign(new Error("interrupted"), { exitCode: 130 });
      let v: AllocationView;
      try {
        v = await this.waitFor(id, (x) => x.state === "ready", {
          timeoutMs: Math.max(0, deadline - Date.now()),
          ...(signal ? { signal } : {}),
        });
      } catch (e) {
        if (!(e instanceof WaitTimeoutError)) throw e;
        if (signal?.aborted) throw Object.assign(new Error("interrupted"), { exitCode: 130 });
        throw new BeachballError("DELIVERY_TIMEOUT", `allocation not ready within ${timeoutMs} ms (${e.message})`);
      }
      try {
        const r = await this.deliver(id, {
          deliveryId,
          generation: v.generation,
          contentType: "text/x-shellscript",
          payloadBase64: bytesToBase64(payload),
        });
        return { digest: r.digest, generation: v.generation };
      } catch (e) {
        if (
          !(e instanceof BeachballError) ||
          !["GUEST_NOT_CONNECTED", "DELIVERY_TIMEOUT", "STALE_GENERATION"].includes(e.code)
        )
          throw e;
      }
      if (Date.now() >= deadline)
        throw new BeachballError("DELIVERY_TIMEOUT", `allocation not ready within ${timeoutMs} ms (state ${v.state})`);
      // A refused delivery (the guest not connected yet) is retried after a pause; the state itself is not polled.
      await this.ports.sleep(Math.min(DELIVERY_RETRY_MS, Math.max(0, deadline - Date.now())));
    }
  }
}

/** A wait (SchedulerClient.waitFor) that ran out of time or was interrupted. */
export class WaitTimeoutError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WaitTimeoutError";
  }
}
