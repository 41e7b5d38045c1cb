/**
 * `--wait` against a fake scheduler and a fake clock: it stops at the goal
 * or a terminal state, gives up at the deadline and never sleeps past it,
 * retries an unreachable scheduler only until the deadline, and says why
 * an allocation is still pending from its latest placement attempt.
 */
import { describe, expect, test } from "bun:test";
import type { AllocationEvent, AllocationView, PlacementOutcome } from "../protocol/api.ts";
import { FakeClock } from "../protocol/fakeClock.ts";
import { BeachballError } from "../protocol/errors.ts";
import { describePlacement, notPlacedMessage, waitFor, WAIT_POLL_MS } from "./wait.ts";

const ID = `alloc_${"a".repeat(32)}`;

function view(over: Partial<AllocationView> = {}): AllocationView {
  return {
    allocationId: ID,
    clientRequestId: "c",
    workloadClass: "ci-small",
    state: "pending",
    generation: 1,
    hostId: null,
    placementId: null,
    reason: null,
    conditions: [],
    resources: { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024 },
    imageDigest: `sha256:${"0".repeat(64)}`,
    labels: {},
    createdAt: "2026-11-30T00:00:00.000Z",
    updatedAt: "2026-11-30T00:00:00.000Z",
    expiresAt: "2026-11-30T01:00:00.000Z",
    workloadExitCode: null,
    placement: null,
    ...over,
  };
}

function event(seq: number, over: Partial<AllocationEvent>): AllocationEvent {
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
    toState: null,
    reason: null,
    clientId: "c",
    correlationId: "c",
    ...over,
  };
}

/** The one fake clock (src/protocol/fakeClock.ts) with a sleep that advances it; `sleeps` records each sleep's length. */
function clock(start = 1_000_000) {
  const fake = new FakeClock({ wallMs: start });
  const sleeps: number[] = [];
  return {
    fake,
    now: () => fake.wallMs(),
    sleep: async (ms: number) => void (sleeps.push(ms), fake.advance(ms)),
    advance: (ms: number) => fake.advance(ms),
    sleeps,
  };
}

describe("waitFor", () => {
  test("returns at the goal with the view and the last sequence number, passing every event on", async () => {
    const c = clock();
    const batches: AllocationEvent[][] = [
      [],
      [event(1, { toState: "reserving" }), event(2, { toState: "provisioning" })],
      [event(3, { toState: "ready" }), event(4, { toState: "released" })],
    ];
    const afters: number[] = [];
    const client = {
      events: async (_id: string, after: number) => (afters.push(after), batches.shift() ?? []),
      get: async () => view({ state: "ready" }),
    };
    const seen: number[] = [];
    const r = await waitFor(client, ID, "ready", c.now() + 10_000, (e) => seen.push(e.seq), 0, c.fake, c.sleep);
    expect(r).toMatchObject({ timedOut: false, lastSeq: 3 });
    expect(r.view.state).toBe("ready");
    expect(seen).toEqual([1, 2, 3]);
    expect(afters).toEqual([0, 0, 2]);
  });

  test("a terminal state ends the wait before the goal", async () => {
    const c = clock();
    const client = {
      events: async () => [event(1, { toState: "failed", reason: "IMAGE_UNAVAILABLE" })],
      get: async () => view({ state: "failed", reason: "IMAGE_UNAVAILABLE" }),
    };
    const r = await waitFor(client, ID, "exited", c.now() + 10_000, () => {}, 0, c.fake, c.sleep);
    expect(r).toMatchObject({ timedOut: false, view: { state: "failed" } });
  });

  test("gives up at the deadline with the current view, and no sleep reaches past it", async () => {
    const c = clock();
    const deadline = c.now() + 1_100;
    let gets = 0;
    const client = { events: async () => [], get: async () => (gets++, view({ conditions: ["NO_CAPACITY"] })) };
    const r = await waitFor(client, ID, "ready", deadline, () => {}, 7, c.fake, c.sleep);
    expect(r).toMatchObject({ timedOut: true, lastSeq: 7 });
    expect(r.view.conditions).toEqual(["NO_CAPACITY"]);
    expect(c.now()).toBe(deadline);
    expect(Math.max(...c.sleeps)).toBe(WAIT_POLL_MS);
    expect(c.sleeps.reduce((a, b) => a + b, 0)).toBe(1_100);
    expect(gets).toBe(1);
  });

  test("a deadline already passed reads the view once and returns", async () => {
    const c = clock();
    const client = {
      events: async (): Promise<AllocationEvent[]> => {
        throw new Error("not called");
      },
      get: async () => view(),
    };
    expect(await waitFor(client, ID, "ready", c.now() - 1, () => {}, 0, c.fake, c.sleep)).toMatchObject({
      timedOut: true,
      lastSeq: 0,
    });
  });

  test("an error answer that is not a transport failure is thrown at once", async () => {
    const c = clock();
    const client = {
      events: async (): Promise<AllocationEvent[]> => {
        throw new BeachballError("NOT_FOUND", "no such allocation");
      },
      get: async () => view(),
    };
    await expect(waitFor(client, ID, "ready", c.now() + 10_000, () => {}, 0, c.fake, c.sleep)).rejects.toThrow(
      "no such allocation",
    );
  });
});

describe("why an allocation is pending", () => {
  const base: PlacementOutcome = {
    at: "2026-11-30T00:00:05.000Z",
    result: "no_eligible_host",
    hostId: null,
    hostsConsidered: 3,
    noFit: {},
    unschedulable: {},
  };

  test("no attempt, no host, reasons by count, refused reservations, a reservation", () => {
    expect(describePlacement(null)).toBe("no placement attempt yet");
    expect(describePlacement({ ...base, hostsConsidered: 0 })).toBe(
      "no host is registered (last attempt 2026-11-30T00:00:05.000Z)",
    );
    expect(
      describePlacement({
        ...base,
        noFit: { INSUFFICIENT_MEMORY: 1, INSUFFICIENT_CPU: 2 },
        unschedulable: { CLOCK_SKEW: 1 },
      }),
    ).toBe(
      "no eligible host among 3: INSUFFICIENT_CPU on 2 hosts, INSUFFICIENT_MEMORY on 1 host, CLOCK_SKEW on 1 host (takes no reservations) (last attempt 2026-11-30T00:00:05.000Z)",
    );
    expect(describePlacement({ ...base, result: "rejected", hostId: "h-2" })).toBe(
      "every candidate refused the reservation (last h-2) (last attempt 2026-11-30T00:00:05.000Z)",
    );
    expect(describePlacement({ ...base, result: "reserved", hostId: "h-1" })).toBe(
      "reserved on h-1 at 2026-11-30T00:00:05.000Z",
    );
  });

  test("the give-up message names the wait, the state and conditions, why, and how to give the allocation up", () => {
    const m = notPlacedMessage(
      view({ conditions: ["NO_CAPACITY"], placement: { ...base, noFit: { PLACEMENT_LIMIT_REACHED: 3 } } }),
      120,
    );
    expect(m).toBe(
      `allocation ${ID} was not placed within 120 s (pending, NO_CAPACITY): no eligible host among 3: PLACEMENT_LIMIT_REACHED on 3 hosts (last attempt 2026-11-30T00:00:05.000Z); it stays pending until a host can take it or its TTL ends (\`bb allocation release ${ID}\` gives it up)`,
    );
  });
});
