/**
 * Waiting on an allocation (issue 20: "the CLI stops polling for
 * readiness"): a real scheduler in-process, a scripted agent that makes
 * the allocation ready at a moment the test chooses, and a counting proxy
 * between client and scheduler. Asserted by what reached the server and by
 * the order of events, never by timings: a wait that follows events asks
 * no question the scheduler answers empty-handed while nothing happens,
 * and a wait whose stream is cut mid-way resumes from the last event seen,
 * missing and repeating nothing.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { SchedulerClient } from "../../src/client/index.ts";
import type { AllocationEvent } from "../../src/protocol/api.ts";
import { waitFor } from "../../src/cli/wait.ts";
import { enrollTestHost, startTestScheduler, TEST_HOST_CAPACITY, type TestScheduler } from "../support/scheduler.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";
import { startCountingProxy, type CountingProxy } from "../support/countingProxy.ts";
import { MAX_FOLLOWS_PER_CALLER } from "../../src/scheduler/callerLimits.ts";
import { waitForEvent } from "../../src/client/allocationWait.ts";
import { SCHEDULER_HOSTS, startSchedulerOn, type SchedulerUnderTest } from "../support/schedulerHosts.ts";

/** How long the allocation is left unready while the wait runs (not asserted: it is the time a poll would fill with questions). */
const IDLE_MS = 1_500;

let s: TestScheduler;
let agent: ScriptedAgent;

beforeAll(async () => {
  s = await startTestScheduler();
  // Room for every allocation the tests make (none of them is released before the last test).
  const e = await enrollTestHost(s, "h-wait", { ...TEST_HOST_CAPACITY, cpuMillis: 16_000, memoryMiB: 16_384 });
  agent = new ScriptedAgent(s.url, "h-wait", e.credential);
  await agent.poll(0);
});
afterAll(async () => {
  await s.stop();
});

/** Bounded wait (no timing asserted) until `cond` holds. */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if (cond()) return;
    await Bun.sleep(25);
  }
  throw new Error(`gave up waiting for ${what}`);
}

/** A new allocation whose placement the agent holds, not yet reported: returns its ID and how to make it ready. */
async function placed(clientRequestId: string): Promise<{ id: string; makeReady: () => Promise<void> }> {
  const { view } = await s.controller.create({ clientRequestId, workloadClass: "ci-small" });
  const present = await agent.waitCommand("ensure_present", view.allocationId);
  return {
    id: view.allocationId,
    makeReady: async () => {
      await agent.report(present, "prepared");
      await agent.waitCommand("ensure_running", view.allocationId);
      await agent.report(present, "running");
    },
  };
}

describe("waiting for an allocation's state", () => {
  let proxy: CountingProxy;
  beforeAll(() => {
    proxy = startCountingProxy(s.url);
  });
  afterAll(async () => {
    await proxy.stop();
  });

  test("a wait that polls returns late: while nothing happens the wait asks nothing the scheduler answers empty, and it returns at the ready event", async () => {
    const { id, makeReady } = await placed("wait-polls-late");
    const client = new SchedulerClient(proxy.url, s.tokens.token);
    const before = proxy.eventsRequests().length;
    const seen: AllocationEvent[] = [];
    const waiting = waitFor(client, id, "ready", Date.now() + 60_000, (e) => seen.push(e));
    await until(() => proxy.eventsRequests().length > before, "the wait's first read");
    await Bun.sleep(IDLE_MS);
    await makeReady();
    const r = await waiting;
    expect(r.timedOut).toBe(false);
    expect(r.view.state).toBe("ready");
    const reads = proxy.eventsRequests().slice(before);
    // A poll asks every interval and mostly hears "nothing yet"; a follow is answered only when events exist.
    expect(reads.filter((q) => q.items === 0)).toEqual([]);
    // One read per batch of events the scheduler wrote (create, prepared, running), nothing more.
    expect(reads.length).toBeLessThanOrEqual(3);
    expect(reads.every((q) => q.query.get("after") !== null)).toBe(true);
    // The last event passed on is the ready one, and the sequence has no gap.
    expect(seen.at(-1)?.toState).toBe("ready");
    expect(seen.map((e) => e.seq)).toEqual(seen.map((_, i) => i + 1));
    expect(r.lastSeq).toBe(seen.at(-1)!.seq);
  });

  test("a stream dropped mid-wait: the wait reconnects after the last event seen and misses nothing", async () => {
    const { id, makeReady } = await placed("wait-dropped");
    const client = new SchedulerClient(proxy.url, s.tokens.token);
    const before = proxy.requests.length;
    const seen: AllocationEvent[] = [];
    const waiting = client.waitForEvent(id, {
      deadlineMs: Date.now() + 60_000,
      until: (e) => e.toState === "ready",
      onEvent: (e) => seen.push(e),
    });
    const parked = () =>
      proxy.inFlight().filter((q) => q.path.endsWith("/events") && q.query.get("follow") === "1").length;
    await until(() => parked() === 1, "a parked follow read");
    const lastBeforeCut = seen.at(-1)!.seq;
    // Cut the parked read and hold the reconnect while the allocation becomes ready: its events happen while the client is away.
    proxy.hold();
    expect(proxy.cutInFlight()).toBe(1);
    await makeReady();
    await until(() => proxy.requests.slice(before).some((q) => q.status === null && !q.cut), "the reconnect");
    proxy.release();
    const r = await waiting;
    expect(r.ended).toBe("goal");
    expect(r.event?.toState).toBe("ready");
    const mine = proxy.requests.slice(before).filter((q) => q.path.endsWith("/events"));
    const cutAt = mine.findIndex((q) => q.cut);
    expect(cutAt).toBeGreaterThanOrEqual(0);
    // The reconnect asked after the last event seen before the cut.
    expect(mine[cutAt + 1]?.query.get("after")).toBe(String(lastBeforeCut));
    // Nothing missed or repeated: the events seen are exactly the scheduler's, up to ready.
    const all = await s.controller.events(id, 0, 200);
    const upToReady = all.slice(0, all.findIndex((e) => e.toState === "ready") + 1);
    expect(seen.map((e) => e.eventId)).toEqual(upToReady.map((e) => e.eventId));
  });

  test("release --wait follows the events to released", async () => {
    const { id, makeReady } = await placed("wait-release");
    await makeReady();
    const client = new SchedulerClient(proxy.url, s.tokens.token);
    await client.waitFor(id, (v) => v.state === "ready", { timeoutMs: 30_000 });
    const before = proxy.eventsRequests().length;
    await client.release(id);
    const waiting = waitFor(client, id, "released", Date.now() + 60_000);
    const stop = await agent.waitCommand("ensure_absent", id);
    await agent.report(stop, "absent");
    const r = await waiting;
    expect(r.view.state).toBe("released");
    expect(
      proxy
        .eventsRequests()
        .slice(before)
        .filter((q) => q.items === 0),
    ).toEqual([]);
  });

  test("events follow=1: a read with nothing new parks until the next event is written; the caller's follows are bounded", async () => {
    const { id, makeReady } = await placed("wait-route");
    const last = (await s.controller.events(id, 0, 200)).at(-1)!.seq;
    const follow = () =>
      fetch(`${proxy.url}/v1/allocations/${id}/events?after=${last}&follow=1`, {
        headers: { authorization: `Bearer ${s.tokens.token}` },
      });
    const parked = Array.from({ length: MAX_FOLLOWS_PER_CALLER }, follow);
    const mine = () => proxy.inFlight().filter((q) => q.path.endsWith(`${id}/events`));
    await until(() => mine().length === MAX_FOLLOWS_PER_CALLER, "every follow read in flight");
    // Past the caller's bound (log and event follows together) a follow is shed at once.
    const shed = await follow();
    expect(shed.status).toBe(429);
    expect(((await shed.json()) as { code: string }).code).toBe("CONCURRENCY_LIMITED");
    expect(mine().length).toBe(MAX_FOLLOWS_PER_CALLER);
    await makeReady();
    for (const r of await Promise.all(parked)) {
      const page = (await r.json()) as { items: AllocationEvent[] };
      expect(page.items[0]?.seq).toBe(last + 1);
    }
  });
});

describe.each(SCHEDULER_HOSTS)("on the %s host", (host) => {
  let u: SchedulerUnderTest;
  beforeAll(async () => {
    u = await startSchedulerOn(host);
  }, 120_000);
  afterAll(async () => {
    await u?.stop();
  });

  test("a wait on a pending allocation returns at the event that releases it, from one parked read", async () => {
    const { view } = await u.controller.create({ clientRequestId: `pending-${host}`, workloadClass: "ci-small" });
    const id = view.allocationId;
    const last = (await u.controller.events(id, 0, 200)).at(-1)!.seq;
    const reads: Array<{ after: number; follow: boolean }> = [];
    const src = {
      events: (i: string, after: number, limit: number, opts?: { follow?: boolean; signal?: AbortSignal }) => {
        reads.push({ after, follow: opts?.follow ?? false });
        return u.controller.events(i, after, limit, opts);
      },
    };
    const waiting = waitForEvent(src, id, { after: last, until: (e) => e.toState === "released" });
    await until(() => reads.length === 1, "the parked read");
    await u.controller.release(id);
    const r = await waiting;
    expect(r).toMatchObject({ ended: "goal", event: { toState: "released" } });
    // The read made before the release is the one that carried the release's events.
    expect(reads).toEqual([{ after: last, follow: true }]);
  });
});
