/**
 * Runs benchmark (issue 22, "Done when"): runs admitted and dispatched per
 * second on the embedded scheduler, against bare allocation creates in the
 * same run. A real scheduler in-process and a scripted agent that runs each
 * job at once (test/support/runAutopilot.ts: it reports each placement
 * prepared and running, acknowledges each payload and reports its exit), a
 * host with room for SLOTS VMs and maxActiveRuns = SLOTS. Modes, alternated:
 *   create  N `POST /v1/allocations` (the baseline of admission), then the
 *           same N allocations taken through the whole life a controller
 *           gives them by hand (wait ready, deliver the script, wait for its
 *           exit, release, wait released), SLOTS at a time;
 *   runs    N `POST /v1/runs` (admission into the queue), then until every
 *           one has ended (the queue does the same life itself).
 * Prints, per mode, admissions per second and whole lives per second, and
 * each ratio of runs to the baseline. Ends on its own.
 *
 *   bun bench/runs.ts [--runs 120] [--slots 8] [--rounds 2]
 */
import { parseArgs } from "node:util";
import { SchedulerClient } from "../src/client/index.ts";
import { startSchedulerOn } from "../test/support/schedulerHosts.ts";
import { enrollTestHost } from "../test/support/scheduler.ts";
import { ScriptedAgent } from "../test/support/scriptedAgent.ts";
import { RunAutopilot } from "../test/support/runAutopilot.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/runs.ts", 600);

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "120" },
    slots: { type: "string", default: "8" },
    rounds: { type: "string", default: "2" },
  },
});
const N = Math.max(1, Math.min(2000, Number(values.runs)));
const SLOTS = Math.max(1, Math.min(64, Number(values.slots)));
const ROUNDS = Math.max(1, Math.min(10, Number(values.rounds)));
const SCRIPT = "echo bench\nexit 0\n";

const s = await startSchedulerOn("embedded", (m) => {
  const limits = m["limits"] as Record<string, unknown>;
  limits["maxActiveRuns"] = SLOTS;
  limits["maxQueuedRunsPerController"] = 100_000;
  limits["maxQueuedRuns"] = 100_000;
  limits["controllerRequestsPerSecond"] = 100_000;
  limits["deploymentRequestsPerSecond"] = 100_000;
  limits["maxConcurrentAllocationsPerController"] = 100_000;
});
const cap = { cpuMillis: 1000 * SLOTS, memoryMiB: 256 * SLOTS, ephemeralDiskMiB: 1024 * SLOTS, maxPlacements: SLOTS };
const enrolled = await enrollTestHost(s, "bench-runs", cap);
const agent = new ScriptedAgent(s.url, "bench-runs", enrolled.credential);
await agent.poll();
await s.operator.setHostState("bench-runs", "activate").catch(() => undefined);
const pilot = new RunAutopilot(agent, 0);
pilot.start();
const c: SchedulerClient = s.controller;

/** Runs `fn` over `items`, `width` at a time. */
async function pool<T>(items: T[], width: number, fn: (t: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

/** The baseline: N creates, then each allocation's life by hand, SLOTS at a time. Returns [admit s, life s]. */
async function bare(round: number): Promise<[number, number]> {
  const keys = Array.from({ length: N }, (_, i) => `bare-${round}-${i}`);
  const t0 = performance.now();
  const ids: string[] = [];
  await pool(keys, 16, async (k) => {
    ids.push((await c.create({ clientRequestId: k, workloadClass: "ci-small", ttlSeconds: 3600 })).view.allocationId);
  });
  const admitted = performance.now();
  // Admission above is unbounded by slots; a controller then gives each its life within the host's room.
  await pool(ids, SLOTS, async (id) => {
    await c.waitFor(id, (v) => v.state === "ready", { timeoutMs: 120_000 });
    const payload = new TextEncoder().encode(SCRIPT);
    await c.deliverWhenReady(id, payload, `d-${id}`, 60_000);
    await c.waitFor(id, (v) => v.workloadExitCode !== null, { timeoutMs: 60_000 });
    await c.release(id);
    await c.waitFor(id, (v) => v.state === "released", { timeoutMs: 60_000 }).catch(() => undefined);
  });
  return [(admitted - t0) / 1000, (performance.now() - t0) / 1000];
}

/** Runs: N submits, then until every one ended. Returns [admit s, life s]. */
async function runs(round: number): Promise<[number, number]> {
  const keys = Array.from({ length: N }, (_, i) => `run-${round}-${i}`);
  const t0 = performance.now();
  const ids: string[] = [];
  const scriptBase64 = Buffer.from(SCRIPT).toString("base64");
  await pool(keys, 16, async (k) => {
    ids.push(
      (await c.submitRun({ clientRequestId: k, workloadClass: "ci-small", scriptBase64, budgetSeconds: 600 })).view
        .runId,
    );
  });
  const admitted = performance.now();
  await pool(ids, 16, async (id) => {
    const v = await c.waitRun(id, { timeoutMs: 300_000 });
    if (v.state !== "succeeded") throw new Error(`run ${id} ended ${v.state} (${v.reason})`);
  });
  return [(admitted - t0) / 1000, (performance.now() - t0) / 1000];
}

const results: Record<"create" | "runs", [number, number][]> = { create: [], runs: [] };
try {
  for (let r = 0; r < ROUNDS; r++) {
    // Alternate which goes first, so a machine warming up or slowing down favours neither.
    const order = r % 2 === 0 ? (["create", "runs"] as const) : (["runs", "create"] as const);
    for (const mode of order) results[mode].push(mode === "create" ? await bare(r) : await runs(r));
  }
} finally {
  await pilot.stop();
  await s.stop();
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rate = (mode: "create" | "runs", i: 0 | 1) => N / median(results[mode].map((x) => x[i]));
console.log(`bench/runs.ts: ${N} per mode, ${SLOTS} slots, ${ROUNDS} rounds (median), scripted agent`);
console.log(
  `admitted/s   allocations ${rate("create", 0).toFixed(0).padStart(6)}   runs ${rate("runs", 0).toFixed(0).padStart(6)}   ratio ${(rate("runs", 0) / rate("create", 0)).toFixed(2)}x`,
);
console.log(
  `whole life/s allocations ${rate("create", 1).toFixed(1).padStart(6)}   runs ${rate("runs", 1).toFixed(1).padStart(6)}   ratio ${(rate("runs", 1) / rate("create", 1)).toFixed(2)}x`,
);
console.log(
  `payloads handed over: ${[...pilot.consumed.values()].reduce((a, b) => a + b, 0)} (each once: ${[...pilot.consumed.values()].every((n) => n === 1)})`,
);
