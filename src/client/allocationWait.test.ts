/**
 * waitForEvent against a fake event source and a fake clock: it follows
 * (every read asks `follow`), reconnects after a dropped read from the last
 * event seen, polls slowly only while the stream is unavailable (a
 * scheduler without `follow`: for the rest of the wait; a full follow
 * bound: one plain read, then follow again), and never pauses past the
 * deadline. No timing is asserted: the fake clock counts pauses.
 */
import { describe, expect, test } from "bun:test";
import type { AllocationEvent } from "../protocol/api.ts";
import { BeachballError } from "../protocol/errors.ts";
import { FakeClock } from "../protocol/fakeClock.ts";
import { SchedulerUnreachableError } from "./schedulerClient.ts";
import {
  RECONNECT_MIN_MS,
  WAIT_FALLBACK_POLL_MS,
  WAIT_TRANSPORT_RETRY_MS,
  waitForEvent,
  type EventSource,
} from "./allocationWait.ts";

const ID = `alloc_${"b".repeat(32)}`;

function event(seq: number, toState: AllocationEvent["toState"] = null): AllocationEvent {
  return {
    seq,
    eventId: `e${seq}`,
    type: "allocation.state",
    at: "2026-11-30T00:00:00.000Z",
    allocationId: ID,
    generation: 1,
    placementId: null,
    hostId: null,
    fromState: null,
    toState,
    reason: null,
    clientId: "c",
    correlationId: "c",
  };
}

/** A scripted source: each read takes the next answer (a batch or an error) and records `after` and `follow`. */
function source(answers: Array<AllocationEvent[] | Error>) {
  const reads: Array<{ after: number; follow: boolean }> = [];
  const src: EventSource = {
    events: async (_id, after, _limit, opts) => {
      reads.push({ after, follow: opts?.follow ?? false });
      const a = answers.shift() ?? [];
      if (a instanceof Error) throw a;
      return a;
    },
  };
  return { src, reads };
}

/** The one fake clock (src/protocol/fakeClock.ts) with a sleep that advances it; `pauses` records each sleep. */
function clock(start = 5_000_000) {
  const fake = new FakeClock({ wallMs: start });
  const pauses: number[] = [];
  return {
    clock: fake,
    now: () => fake.wallMs(),
    sleep: async (ms: number) => void (pauses.push(ms), fake.advance(ms)),
    pauses,
  };
}

const dropped = () => new SchedulerUnreachableError("http://127.0.0.1:1", undefined, new Error("socket closed"));

describe("waitForEvent", () => {
  test("follows: every read asks follow, and it returns at the goal without a pause", async () => {
    const c = clock();
    const { src, reads } = source([[event(1), event(2, "provisioning")], [event(3, "ready")]]);
    const seen: number[] = [];
    const r = await waitForEvent(src, ID, {
      until: (e) => e.toState === "ready",
      onEvent: (e) => seen.push(e.seq),
      ...c,
    });
    expect(r).toMatchObject({ ended: "goal", lastSeq: 3, event: { seq: 3 } });
    expect(seen).toEqual([1, 2, 3]);
    expect(reads).toEqual([
      { after: 0, follow: true },
      { after: 2, follow: true },
    ]);
    expect(c.pauses).toEqual([]);
  });

  test("a dropped read reconnects after the last event seen, with a short backoff, and passes nothing on twice", async () => {
    const c = clock();
    const { src, reads } = source([[event(1), event(2)], dropped(), dropped(), [event(3), event(4, "ready")]]);
    const seen: number[] = [];
    const r = await waitForEvent(src, ID, {
      until: (e) => e.toState === "ready",
      onEvent: (e) => seen.push(e.seq),
      ...c,
    });
    expect(r.ended).toBe("goal");
    expect(seen).toEqual([1, 2, 3, 4]);
    expect(reads.map((x) => x.after)).toEqual([0, 2, 2, 2]);
    expect(c.pauses).toEqual([RECONNECT_MIN_MS, RECONNECT_MIN_MS * 2]);
  });

  test("a scheduler without follow: the slow poll for the rest of the wait", async () => {
    const c = clock();
    // What a scheduler from before follow answers (src/scheduler/edge.ts).
    const noFollow = new BeachballError("VALIDATION_FAILED", "unknown query parameter; this route takes after, limit", {
      allowedParameters: ["after", "limit"],
      status: 400,
    });
    const { src, reads } = source([noFollow, [], [event(1, "ready")]]);
    const r = await waitForEvent(src, ID, { until: (e) => e.toState === "ready", ...c });
    expect(r.ended).toBe("goal");
    expect(reads.map((x) => x.follow)).toEqual([true, false, false]);
    expect(c.pauses).toEqual([WAIT_FALLBACK_POLL_MS, WAIT_FALLBACK_POLL_MS]);
  });

  test("a full follow bound: one plain read after a pause, then follow again", async () => {
    const c = clock();
    const full = new BeachballError("CONCURRENCY_LIMITED", "this caller already follows 16", { status: 429 });
    const { src, reads } = source([full, [event(1)], [event(2, "ready")]]);
    const r = await waitForEvent(src, ID, { until: (e) => e.toState === "ready", ...c });
    expect(r.ended).toBe("goal");
    expect(reads.map((x) => x.follow)).toEqual([true, false, true]);
    expect(c.pauses).toEqual([WAIT_FALLBACK_POLL_MS]);
  });

  test("a terminal event ends the wait; an answer that is not transient is thrown", async () => {
    const c = clock();
    const r = await waitForEvent(source([[event(1, "failed")]]).src, ID, { until: () => false, ...c });
    expect(r).toMatchObject({ ended: "terminal", event: { toState: "failed" } });
    const gone = new BeachballError("NOT_FOUND", "no such allocation");
    await expect(waitForEvent(source([gone]).src, ID, c)).rejects.toThrow("no such allocation");
  });

  test("gives up at the deadline, with no pause reaching past it", async () => {
    const c = clock();
    const deadline = c.now() + 2_500;
    const r = await waitForEvent(source([]).src, ID, { deadlineMs: deadline, after: 9, ...c });
    expect(r).toMatchObject({ ended: "deadline", lastSeq: 9 });
    expect(c.now()).toBe(deadline);
    expect(c.pauses).toEqual([WAIT_FALLBACK_POLL_MS, WAIT_FALLBACK_POLL_MS, 500]);
  });

  test("a scheduler that never answers is given up after WAIT_TRANSPORT_RETRY_MS", async () => {
    const c = clock();
    const src: EventSource = {
      events: async () => {
        throw dropped();
      },
    };
    await expect(waitForEvent(src, ID, c)).rejects.toBeInstanceOf(SchedulerUnreachableError);
    expect(c.pauses.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(WAIT_TRANSPORT_RETRY_MS);
  });

  test("an aborted signal ends the wait before any read", async () => {
    const { src, reads } = source([]);
    const a = new AbortController();
    a.abort();
    expect(await waitForEvent(src, ID, { signal: a.signal, ...clock() })).toMatchObject({ ended: "aborted" });
    expect(reads).toEqual([]);
  });
});
