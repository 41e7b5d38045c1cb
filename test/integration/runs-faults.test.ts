/**
 * Runs when their allocation cannot be made (issue 22; found by review): a
 * controller whose allocation quota is full submits a run with a 10 s
 * budget. The run keeps its slot, shows DISPATCH_RETRYING (one event for
 * the refusal, however often it retries), and ends timed_out with BUDGET_EXCEEDED when
 * its budget passes, without a VM; another tenant's run, queued behind it,
 * then gets the slot and succeeds.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { startSchedulerOn, type SchedulerUnderTest } from "../support/schedulerHosts.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";
import { RunAutopilot } from "../support/runAutopilot.ts";
import { enrollTestHost } from "../support/scheduler.ts";
import { SchedulerClient } from "../../src/client/index.ts";

const OTHER = "token-for-the-other-controller-0123456789";
let s: SchedulerUnderTest;
let pilot: RunAutopilot;

describe("a run whose allocation is refused", () => {
  beforeAll(async () => {
    s = await startSchedulerOn("embedded", (m) => {
      (m["principals"] as Record<string, unknown>[]).push({
        id: "controller:other",
        role: "controller",
        tokenSha256: createHash("sha256").update(OTHER).digest("hex"),
      });
      const limits = m["limits"] as Record<string, unknown>;
      limits["maxConcurrentAllocationsPerController"] = 1;
      limits["maxActiveRuns"] = 1;
    });
    const enrolled = await enrollTestHost(s, "faults-host");
    const agent = new ScriptedAgent(s.url, "faults-host", enrolled.credential);
    await agent.poll();
    await s.operator.setHostState("faults-host", "activate").catch(() => undefined);
    pilot = new RunAutopilot(agent, 50);
    pilot.start();
  });
  afterAll(async () => {
    await pilot?.stop();
    await s?.stop();
  });

  test("keeps its slot while it retries, then times out without a VM; the next tenant's run goes", async () => {
    await s.controller.create({ clientRequestId: "holds-the-quota", workloadClass: "ci-small" });
    const body = { workloadClass: "ci-small", scriptBase64: "ZXhpdCAwCg==", budgetSeconds: 10 };
    const stuck = (await s.controller.submitRun({ ...body, clientRequestId: "stuck" })).view;
    const other = new SchedulerClient(s.url, OTHER);
    const next = (await other.submitRun({ ...body, clientRequestId: "next", budgetSeconds: 60 })).view;
    await Bun.sleep(1500);
    const mid = await s.controller.getRun(stuck.runId);
    expect(mid.state).toBe("starting");
    expect(mid.conditions).toContain("DISPATCH_RETRYING");
    expect(mid.reason).toBe("QUOTA_CONCURRENT_ALLOCATIONS");
    expect((await other.getRun(next.runId)).state).toBe("queued");
    const v = await s.controller.waitRun(stuck.runId, { timeoutMs: 30_000 });
    expect(v.state).toBe("timed_out");
    expect(v.reason).toBe("BUDGET_EXCEEDED");
    expect(pilot.started.has(v.allocationId!)).toBe(false);
    const events = await s.controller.runEvents(stuck.runId, 0, 200);
    expect(events.filter((e) => e.type === "run.dispatch_retrying")).toHaveLength(1);
    const n = await other.waitRun(next.runId, { timeoutMs: 30_000 });
    expect(n.state).toBe("succeeded");
  }, 60_000);
});
