/**
 * The typed client's one wait on an allocation (issue 20: "the CLI stops
 * polling for readiness"): follows the allocation's events with the
 * scheduler's long-poll (`GET /v1/allocations/{id}/events?after=N&follow=1`,
 * src/protocol/eventFollow.ts), so it returns as soon as the event it waits
 * for is written, not a poll interval later. Every waiting caller (the
 * CLI's `--wait`, SchedulerClient.waitFor/follow/deliverWhenReady, the dev
 * demo) goes through here.
 *
 * A dropped read (a transport failure, a 5xx) reconnects from the last
 * sequence number seen, so nothing is missed or passed on twice; transport
 * failures are retried for up to TRANSPORT_RETRY_MS after the last answer.
 * A slow poll (one plain read per WAIT_FALLBACK_POLL_MS) is used only while
 * the stream is unavailable: a scheduler that does not know `follow`
 * (400 VALIDATION_FAILED whose allowedParameters lack it: for the rest of
 * the wait), or a follow
 * bound that is full (429 RATE_LIMITED / CONCURRENCY_LIMITED: one plain read,
 * then follow again). An empty follow answer (the scheduler's park ended
 * with nothing new) is also followed by one such pause before the next read,
 * so a scheduler that ignores `follow` is asked at most once per interval.
 *
 * Must never: wait past the deadline (every pause and the parked read are
 * cut to it); skip or repeat an event; change the allocation.
 */
import type { AllocationEvent } from "../protocol/api.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { BeachballError } from "../protocol/errors.ts";
import { UnexpectedAnswerError } from "../protocol/problem.ts";

/** How often the allocation is read while its event stream is unavailable (see the module header), ms. */
export const WAIT_FALLBACK_POLL_MS = 1_000;
/** First pause before reconnecting a dropped read, ms (doubles per failure in a row, up to RECONNECT_MAX_MS). */
export const RECONNECT_MIN_MS = 100;
/** Longest pause before reconnecting a dropped read, ms. */
export const RECONNECT_MAX_MS = 5_000;
/** How long a wait keeps reconnecting to a scheduler that gives no answer, after its last answer, ms. */
export const WAIT_TRANSPORT_RETRY_MS = 60_000;
/** Events asked for per read. */
export const WAIT_PAGE_SIZE = 100;

/** What a wait reads from: the events route (SchedulerClient.events). */
export interface EventSource {
  /** Events after `after`; with `follow` the scheduler parks a read that finds none; `signal` ends the read. */
  events(
    id: string,
    after: number,
    limit: number,
    opts?: { follow?: boolean; signal?: AbortSignal },
  ): Promise<AllocationEvent[]>;
}

/** Options of waitForEvent. */
export interface EventWaitOptions {
  /** Sequence number to follow after (events up to it were seen); default 0. */
  after?: number;
  /** Epoch ms at which the wait gives up (ends "deadline"); default none. */
  deadlineMs?: number;
  /** The goal: the wait ends "goal" at the first event for which it is true. */
  until?: (e: AllocationEvent) => boolean;
  /** Called for every event in order, the last one included. */
  onEvent?: (e: AllocationEvent) => void;
  /** Ends the wait ("aborted") and its parked read. */
  signal?: AbortSignal;
  /** Pause of the fallback poll, ms; default WAIT_FALLBACK_POLL_MS. */
  fallbackPollMs?: number;
  /** Clock (its wallMs, like `deadlineMs`) and pause ports; defaults systemClock and a timer. */
  clock?: Clock;
  sleep?: (ms: number) => Promise<unknown>;
}

/** How a wait ended. */
export interface EventWaitResult {
  /** goal: `until` held; terminal: the allocation reached released or failed; deadline / aborted: gave up. */
  ended: "goal" | "terminal" | "deadline" | "aborted";
  /** The event that ended it (goal or terminal), else null. */
  event: AllocationEvent | null;
  /** The last sequence number seen (resume with it). */
  lastSeq: number;
}

/** True for the event that makes an allocation terminal. */
export function isTerminalEvent(e: AllocationEvent): boolean {
  return e.toState === "released" || e.toState === "failed";
}

/** Why a read failed, for the wait: the stream is unavailable (and for how long), a transient failure, or fatal. */
function classify(e: unknown): "no-follow" | "follow-full" | "transient" | "fatal" {
  if (e instanceof BeachballError) {
    const status = Number(e.extra?.["status"] ?? e.status);
    // A scheduler from before follow refuses the parameter naming the ones it takes (src/scheduler/edge.ts).
    const allowed = e.extra?.["allowedParameters"];
    if (e.code === "VALIDATION_FAILED" && Array.isArray(allowed) && !allowed.includes("follow")) return "no-follow";
    if (e.code === "RATE_LIMITED" || e.code === "CONCURRENCY_LIMITED") return "follow-full";
    return status === 503 ? "transient" : "fatal";
  }
  if (e instanceof UnexpectedAnswerError) return e.status >= 500 ? "transient" : "fatal";
  return "transient"; // no answer: refused, reset, a dropped stream, a timeout
}

/** A signal that aborts with `outer` or at `deadlineMs` (epoch ms), and a function to let it go. */
function readSignal(outer: AbortSignal | undefined, deadlineMs: number, now: number): [AbortSignal, () => void] {
  const c = new AbortController();
  const timer = Number.isFinite(deadlineMs) ? setTimeout(() => c.abort(), Math.max(0, deadlineMs - now)) : undefined;
  const onAbort = () => c.abort();
  outer?.addEventListener("abort", onAbort, { once: true });
  return [
    c.signal,
    () => {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
    },
  ];
}

/**
 * Follows `id`'s events after `opts.after` (see the module header) until
 * `opts.until` holds for one, the allocation is terminal, the deadline
 * passes or the signal aborts. Throws what the scheduler answers that is
 * neither transient nor an unavailable stream (NOT_FOUND, UNAUTHENTICATED,
 * …), and the last transport failure once WAIT_TRANSPORT_RETRY_MS passed
 * without an answer.
 */
export async function waitForEvent(
  src: EventSource,
  id: string,
  opts: EventWaitOptions = {},
): Promise<EventWaitResult> {
  const clock = opts.clock ?? systemClock;
  const now = () => clock.wallMs();
  const sleep = opts.sleep ?? ((ms: number) => new Promise((r) => setTimeout(r, ms)));
  const deadline = opts.deadlineMs ?? Number.POSITIVE_INFINITY;
  const pollMs = opts.fallbackPollMs ?? WAIT_FALLBACK_POLL_MS;
  const pause = (ms: number) => sleep(Math.max(0, Math.min(ms, deadline - now())));
  let seq = opts.after ?? 0;
  let follow = true;
  let followAgain = true;
  let failures = 0;
  let lastAnswer = now();
  for (;;) {
    if (opts.signal?.aborted) return { ended: "aborted", event: null, lastSeq: seq };
    if (now() >= deadline) return { ended: "deadline", event: null, lastSeq: seq };
    const asFollow = follow && followAgain;
    const [signal, done] = readSignal(opts.signal, deadline, now());
    let batch: AllocationEvent[];
    try {
      batch = await src.events(id, seq, WAIT_PAGE_SIZE, { follow: asFollow, signal });
    } catch (e) {
      if (opts.signal?.aborted || now() >= deadline) continue;
      const kind = classify(e);
      if (kind === "fatal") throw e;
      if (kind === "no-follow") follow = false;
      else if (kind === "follow-full") followAgain = false;
      else {
        if (now() - lastAnswer >= WAIT_TRANSPORT_RETRY_MS) throw e;
        failures++;
        await pause(Math.min(RECONNECT_MIN_MS * 2 ** (failures - 1), RECONNECT_MAX_MS));
        continue;
      }
      await pause(pollMs);
      continue;
    } finally {
      done();
    }
    failures = 0;
    lastAnswer = now();
    followAgain = true;
    for (const e of batch) {
      seq = e.seq;
      opts.onEvent?.(e);
      if (opts.until?.(e)) return { ended: "goal", event: e, lastSeq: seq };
      if (isTerminalEvent(e)) return { ended: "terminal", event: e, lastSeq: seq };
    }
    // Nothing new: a plain read (no stream) or a park that ended empty waits one interval before the next read.
    if (batch.length === 0) await pause(pollMs);
  }
}
