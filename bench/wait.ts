/**
 * Wait benchmark (issue 20: "the CLI stops polling for readiness"): how long
 * after the scheduler writes an allocation's ready event a client's wait
 * returns. A real scheduler in-process and a scripted agent that makes each
 * allocation ready at a random moment after the wait started (0..600 ms,
 * the same draws for every mode); the scheduler's ready event time (`at`,
 * the same clock) is the start, the wait's return the end. Modes, run
 * interleaved in the same run:
 *   event  the typed client's waitForEvent (events follow=1), what
 *          `bb allocation create --wait`, waitFor and deliverWhenReady use now;
 *   poll   the baseline: the old `--wait` loop kept here only (events read,
 *          then a 250 ms sleep when none came), and the old deliverWhenReady
 *          readiness loop (GET the view, 300 ms sleep).
 * Prints p50/p90/max per mode and the ratio of each baseline's median to
 * the event-driven median. Ends on its own.
 *
 *   bun bench/wait.ts [--rounds 15]
 */
import { parseArgs } from "node:util";
import type { SchedulerClient } from "../src/client/index.ts";
import { enrollTestHost, startTestScheduler, TEST_HOST_CAPACITY } from "../test/support/scheduler.ts";
import { ScriptedAgent } from "../test/support/scriptedAgent.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/wait.ts", 300);

const { values } = parseArgs({ options: { rounds: { type: "string", default: "15" } } });
const ROUNDS = Math.max(1, Math.min(200, Number(values.rounds)));
/** The old `--wait` poll interval (src/cli/wait.ts before issue 20), ms. */
const OLD_EVENTS_POLL_MS = 250;
/** The old deliverWhenReady poll interval, ms. */
const OLD_GET_POLL_MS = 300;
/** Latest moment, after the wait started, at which the agent makes the allocation ready, ms. */
const MAX_READY_DELAY_MS = 600;

type Mode = "event" | "poll-events-250" | "poll-get-300";
const MODES: Mode[] = ["event", "poll-events-250", "poll-get-300"];

/** The old `--wait`: events after `seq`, a fixed sleep when none came. Baseline only. */
async function oldEventsPoll(c: SchedulerClient, id: string): Promise<void> {
  let seq = 0;
  for (;;) {
    const batch = await c.events(id, seq, 100);
    for (const e of batch) {
      seq = e.seq;
      if (e.toState === "ready") return;
    }
    if (batch.length === 0) await Bun.sleep(OLD_EVENTS_POLL_MS);
  }
}

/** The old deliverWhenReady readiness loop: GET the view, a fixed sleep until ready. Baseline only. */
async function oldGetPoll(c: SchedulerClient, id: string): Promise<void> {
  while ((await c.get(id)).state !== "ready") await Bun.sleep(OLD_GET_POLL_MS);
}

const s = await startTestScheduler();
try {
  const e = await enrollTestHost(s, "h-bench", { ...TEST_HOST_CAPACITY, maxPlacements: 4 });
  const agent = new ScriptedAgent(s.url, "h-bench", e.credential);
  await agent.poll(0);
  const delays = Array.from({ length: ROUNDS }, () => Math.round(Math.random() * MAX_READY_DELAY_MS));
  const lat: Record<Mode, number[]> = { event: [], "poll-events-250": [], "poll-get-300": [] };
  for (let round = 0; round < ROUNDS; round++) {
    for (const mode of MODES) {
      const { view } = await s.controller.create({ clientRequestId: `b-${round}-${mode}`, workloadClass: "ci-small" });
      const id = view.allocationId;
      const present = await agent.waitCommand("ensure_present", id);
      await agent.report(present, "prepared");
      const waiting =
        mode === "event"
          ? s.controller.waitForEvent(id, { until: (x) => x.toState === "ready" }).then(() => Date.now())
          : (mode === "poll-events-250" ? oldEventsPoll(s.controller, id) : oldGetPoll(s.controller, id)).then(() =>
              Date.now(),
            );
      await Bun.sleep(delays[round]!);
      await agent.waitCommand("ensure_running", id);
      await agent.report(present, "running");
      const returnedAt = await waiting;
      const ready = (await s.controller.events(id, 0, 200)).find((x) => x.toState === "ready")!;
      lat[mode].push(returnedAt - Date.parse(ready.at));
      await s.controller.release(id);
      const absent = await agent.waitCommand("ensure_absent", id);
      await agent.report(absent, "absent");
    }
  }
  const q = (xs: number[], p: number) =>
    [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))]!;
  console.log(
    `ready event → wait returned, ms (${ROUNDS} rounds per mode, ready 0..${MAX_READY_DELAY_MS} ms after the wait began)`,
  );
  const base = Math.max(1, q(lat.event, 0.5));
  for (const m of MODES)
    console.log(
      `  ${m.padEnd(16)} p50 ${q(lat[m], 0.5)}  p90 ${q(lat[m], 0.9)}  max ${Math.max(...lat[m])}  median vs event ${(q(lat[m], 0.5) / base).toFixed(1)}×`,
    );
} finally {
  await s.stop();
}
