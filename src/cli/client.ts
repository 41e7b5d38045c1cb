/**
 * The HTTP client for the scheduler's public API, shared by the CLI and the
 * dev demo (client configuration is resolved in src/cli/config.ts).
 * Must never: print the token.
 */
import { BeachballError } from "../protocol/errors.ts";
import { errorFromAnswer, errorFromResponse, UnexpectedAnswerError } from "../protocol/problem.ts";
import type { AllocationEvent, AllocationView, BootstrapBody, CreateAllocationBody } from "../protocol/api.ts";
import type { AlertItem, HostView } from "../protocol/views.ts";
import { LOG_FOLLOW_WAIT_MS, type LogPage } from "../protocol/logs.ts";

/** How long waiting commands keep retrying while the scheduler is unreachable (a restart), ms. */
export const TRANSPORT_RETRY_MS = 60_000;

/**
 * Runs `fn`, retrying transport failures (connection refused or reset, a
 * 503 problem, a 5xx answer without a problem body such as a proxy's 502)
 * every second until `deadline` (the last sleep cut to it); other error
 * answers are thrown at once.
 */
export async function retryTransport<T>(fn: () => Promise<T>, deadline: number): Promise<T> {
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      const transient = e instanceof BeachballError ? e.status === 503 : e instanceof UnexpectedAnswerError ? e.status >= 500 : true;
      if (!transient || Date.now() >= deadline) throw e;
      await Bun.sleep(Math.min(1_000, deadline - Date.now()));
    }
  }
}

/**
 * The scheduler did not answer: connection refused or reset, a name that
 * does not resolve, a timeout. The message names the URL and where it came
 * from; waiting commands retry it (retryTransport).
 */
export class SchedulerUnreachableError extends Error {
  constructor(
    readonly url: string,
    readonly origin: string | undefined,
    cause: unknown,
  ) {
    const c = cause as { code?: unknown; name?: unknown; message?: unknown } | null;
    const why =
      c?.code === "ConnectionRefused" || c?.code === "ECONNREFUSED" ? "connection refused"
      : c?.name === "TimeoutError" ? "no answer in time"
      : typeof c?.code === "string" ? `${c.code}${typeof c.message === "string" ? ` (${c.message})` : ""}`
      : String(c?.message ?? cause);
    super(`cannot reach the scheduler at ${url}${origin ? ` (from ${origin})` : ""}: ${why}`);
    this.name = "SchedulerUnreachableError";
  }
}

/**
 * A typed client of the public API. Methods throw BeachballError carrying
 * the server's stable code (parsed by src/protocol/problem.ts), or
 * UnexpectedAnswerError for an error answer without a problem body.
 */
export class SchedulerClient {
  /**
   * `origin` says where `baseUrl` came from (`--scheduler`,
   * `BB_SCHEDULER_URL`, a config file); it is named when the scheduler
   * cannot be reached.
   */
  constructor(
    readonly baseUrl: string,
    private readonly token: string,
    readonly origin?: string,
  ) {}

  /** fetch, with a failure to connect turned into SchedulerUnreachableError. */
  private async send(path: string, init: RequestInit): Promise<Response> {
    try {
      return await fetch(`${this.baseUrl}${path}`, init);
    } catch (e) {
      throw new SchedulerUnreachableError(this.baseUrl, this.origin, e);
    }
  }

  private async call<T>(method: string, path: string, body?: unknown, timeoutMs = 60_000): Promise<{ status: number; body: T }> {
    const res = await this.send(path, {
      method,
      headers: { authorization: `Bearer ${this.token}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    if (!res.ok) throw errorFromAnswer(res.status, text);
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      throw new UnexpectedAnswerError(res.status, `HTTP ${res.status} with a body that is not JSON`);
    }
    return { status: res.status, body: parsed as T };
  }

  /** POST /v1/allocations. */
  async create(body: CreateAllocationBody): Promise<{ created: boolean; view: AllocationView }> {
    const r = await this.call<AllocationView>("POST", "/v1/allocations", body);
    return { created: r.status === 201, view: r.body };
  }
  /** GET /v1/allocations/{id}. */
  async get(id: string): Promise<AllocationView> {
    return (await this.call<AllocationView>("GET", `/v1/allocations/${encodeURIComponent(id)}`)).body;
  }
  /** GET /v1/allocations (one page). */
  async list(cursor?: string, limit = 50): Promise<{ items: AllocationView[]; nextCursor: string | null }> {
    const q = new URLSearchParams({ limit: String(limit), ...(cursor ? { cursor } : {}) });
    return (await this.call<{ items: AllocationView[]; nextCursor: string | null }>("GET", `/v1/allocations?${q}`)).body;
  }
  /** POST /v1/allocations/{id}/release. */
  async release(id: string): Promise<AllocationView> {
    return (await this.call<AllocationView>("POST", `/v1/allocations/${encodeURIComponent(id)}/release`)).body;
  }
  /** GET /v1/allocations/{id}/events after `after`. */
  async events(id: string, after = 0, limit = 100): Promise<AllocationEvent[]> {
    return (await this.call<{ items: AllocationEvent[] }>("GET", `/v1/allocations/${encodeURIComponent(id)}/events?after=${after}&limit=${limit}`)).body.items;
  }
  /** POST /v1/allocations/{id}/bootstrap (waits up to ~35 s for the guest's receipt). */
  async deliver(id: string, body: BootstrapBody): Promise<{ deliveryId: string; digest: string; replayed: boolean }> {
    return (await this.call<{ deliveryId: string; digest: string; replayed: boolean }>("POST", `/v1/allocations/${encodeURIComponent(id)}/bootstrap`, body, 40_000)).body;
  }
  /** POST /v1/hosts/{id}/enrollment-tokens (operator). */
  async enrollmentToken(hostId: string, ttlSeconds?: number): Promise<{ token: string; hostId: string; expiresAt: string; joinCommand: string }> {
    return (await this.call<{ token: string; hostId: string; expiresAt: string; joinCommand: string }>("POST", `/v1/hosts/${encodeURIComponent(hostId)}/enrollment-tokens`, ttlSeconds ? { ttlSeconds } : {})).body;
  }
  /** POST /v1/hosts/{id}/activate|drain|disable (operator); `disable` fences the host. */
  async setHostState(hostId: string, action: "activate" | "drain" | "disable"): Promise<HostView> {
    return (await this.call<HostView>("POST", `/v1/hosts/${encodeURIComponent(hostId)}/${action}`)).body;
  }
  /** POST /v1/allocations/{id}/replacement-authorizations (controller). */
  async authorizeReplacement(id: string, generation: number): Promise<AllocationView> {
    return (await this.call<AllocationView>("POST", `/v1/allocations/${encodeURIComponent(id)}/replacement-authorizations`, { generation })).body;
  }
  /** GET /v1/operations/alerts (operator). */
  async alerts(after = 0, limit = 100): Promise<AlertItem[]> {
    return (await this.call<{ items: AlertItem[] }>("GET", `/v1/operations/alerts?after=${after}&limit=${limit}`)).body.items;
  }
  /** GET /v1/operations/metrics (operator): Prometheus text. */
  async metrics(): Promise<string> {
    const res = await this.send("/v1/operations/metrics", { headers: { authorization: `Bearer ${this.token}` }, signal: AbortSignal.timeout(30_000) });
    if (!res.ok) throw await errorFromResponse(res);
    return res.text();
  }
  /** GET /v1/hosts (operator). */
  async hosts(): Promise<HostView[]> {
    return (await this.call<{ items: HostView[] }>("GET", "/v1/hosts")).body.items;
  }

  /**
   * Follows events from `after` until the allocation is terminal (or `until`
   * returns true), calling `onEvent` for each. Polls every `intervalMs`.
   * Returns the last sequence number seen.
   */
  async follow(id: string, onEvent: (e: AllocationEvent) => void, opts: { after?: number; intervalMs?: number; until?: (e: AllocationEvent) => boolean; signal?: AbortSignal } = {}): Promise<number> {
    let after = opts.after ?? 0;
    for (;;) {
      if (opts.signal?.aborted) return after;
      const batch = await retryTransport(() => this.events(id, after, 100), Date.now() + TRANSPORT_RETRY_MS);
      for (const e of batch) {
        after = e.seq;
        onEvent(e);
        if (e.toState === "released" || e.toState === "failed" || opts.until?.(e)) return after;
      }
      if (batch.length === 0) await Bun.sleep(opts.intervalMs ?? 250);
    }
  }

  /**
   * GET /v1/allocations/{id}/logs from byte offset `offset`; with `follow`
   * the scheduler holds a read that finds nothing new for up to
   * LOG_FOLLOW_WAIT_MS. Throws NOT_FOUND, LOG_OFFSET_PAST_END, RATE_LIMITED.
   */
  async logs(id: string, offset = 0, follow = false): Promise<LogPage> {
    const q = `offset=${offset}${follow ? "&follow=1" : ""}`;
    return (await this.call<LogPage>("GET", `/v1/allocations/${encodeURIComponent(id)}/logs?${q}`, undefined, LOG_FOLLOW_WAIT_MS + 15_000)).body;
  }

  /**
   * Streams an allocation's workload output from `offset`: `onPage` gets
   * each page (its `droppedBytes` says what the reader missed). Without
   * `follow`, ends at the log's current end; with it, keeps reading (each
   * read held by the scheduler, transport failures retried for
   * TRANSPORT_RETRY_MS) until the allocation is terminal and read to its
   * end, or `signal` aborts. Returns the offset to resume at.
   */
  async streamLogs(id: string, onPage: (p: LogPage) => void, opts: { offset?: number; follow?: boolean; signal?: AbortSignal } = {}): Promise<number> {
    let offset = opts.offset ?? 0;
    for (;;) {
      if (opts.signal?.aborted) return offset;
      const page = await retryTransport(() => this.logs(id, offset, opts.follow ?? false), Date.now() + TRANSPORT_RETRY_MS);
      if (page.text || page.droppedBytes) onPage(page);
      const moved = page.nextOffset !== offset;
      offset = page.nextOffset;
      if (page.complete || (!opts.follow && !moved)) return offset;
    }
  }

  /**
   * Hands a payload to a ready allocation, waiting for readiness and retrying
   * GUEST_NOT_CONNECTED / DELIVERY_TIMEOUT until `timeoutMs`.
   */
  async deliverWhenReady(id: string, payload: Uint8Array, deliveryId: string, timeoutMs: number, signal?: AbortSignal): Promise<{ digest: string; generation: number }> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (signal?.aborted) throw Object.assign(new Error("interrupted"), { exitCode: 130 });
      const v = await retryTransport(() => this.get(id), deadline);
      if (v.state === "released" || v.state === "failed") throw new BeachballError("INVALID_STATE", `allocation is ${v.state}${v.reason ? ` (${v.reason})` : ""}`);
      if (v.state === "ready") {
        try {
          const r = await this.deliver(id, { deliveryId, generation: v.generation, contentType: "text/x-shellscript", payloadBase64: Buffer.from(payload).toString("base64") });
          return { digest: r.digest, generation: v.generation };
        } catch (e) {
          if (!(e instanceof BeachballError) || !["GUEST_NOT_CONNECTED", "DELIVERY_TIMEOUT", "STALE_GENERATION"].includes(e.code)) throw e;
        }
      }
      if (Date.now() > deadline) throw new BeachballError("DELIVERY_TIMEOUT", `allocation not ready within ${timeoutMs} ms (state ${v.state})`);
      await Bun.sleep(300);
    }
  }
}
