/**
 * Runs through the API (issue 22, "Runs") on the embedded scheduler with a
 * scripted agent that runs each job by itself (test/support/runAutopilot.ts;
 * the same jobs in real VMs are test/e2e/runs.test.ts). Checked: three
 * tenants submit 60 runs with room for 4, and no tenant waits while another
 * has two running and it has none; every run ends exactly once with the
 * exit code of its script and each payload is handed over once; a queued
 * run's position only shrinks; a repeat of a submit answers the same run,
 * another body under its key is IDEMPOTENCY_CONFLICT; a full queue is 429
 * QUOTA_QUEUED_RUNS with Retry-After and nothing admitted; a run past its
 * budget ends timed_out with its VM released; a queued run past its queue
 * deadline ends timed_out without a VM; cancel ends a queued run at once
 * and a started one once its VM is gone; another tenant gets NOT_FOUND.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { startSchedulerOn, type SchedulerUnderTest } from "../support/schedulerHosts.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";
import { RunAutopilot } from "../support/runAutopilot.ts";
import { enrollTestHost } from "../support/scheduler.ts";
import { SchedulerClient, type RunView } from "../../src/client/index.ts";

const TENANTS = ["controller:a", "controller:b", "controller:c"] as const;
const tokenOf = (id: string) => `token-for-${id}-0123456789abcdef`;
const sha = (s: string) => createHash("sha256").update(s).digest("hex");

let s: SchedulerUnderTest;
let pilot: RunAutopilot;
const clients = new Map<string, SchedulerClient>();

const script = (body: string) => Buffer.from(body).toString("base64");
const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (e: { code?: string }) => e.code ?? String(e),
  );

describe("runs: a fair queue over allocations (scripted agent)", () => {
  beforeAll(async () => {
    s = await startSchedulerOn("embedded", (m) => {
      const principals = m["principals"] as Record<string, unknown>[];
      for (const t of TENANTS) principals.push({ id: t, role: "controller", tokenSha256: sha(tokenOf(t)) });
      const limits = m["limits"] as Record<string, unknown>;
      limits["maxActiveRuns"] = 4;
      limits["maxQueuedRunsPerController"] = 30;
      limits["controllerRequestsPerSecond"] = 1000;
    });
    for (const t of TENANTS) clients.set(t, new SchedulerClient(s.url, tokenOf(t)));
    const cap = { cpuMillis: 16_000, memoryMiB: 16_384, ephemeralDiskMiB: 65_536, maxPlacements: 16 };
    const enrolled = await enrollTestHost(s, "runs-host", cap);
    const agent = new ScriptedAgent(s.url, "runs-host", enrolled.credential);
    await agent.poll();
    await s.operator.setHostState("runs-host", "activate").catch(() => undefined);
    pilot = new RunAutopilot(agent, 150);
    pilot.start();
  });
  afterAll(async () => {
    await pilot?.stop();
    await s?.stop();
  });

  test("three tenants, 60 runs, room for 4: fair, each ends once with its exit code, positions shrink", async () => {
    const a = clients.get("controller:a")!;
    const startedAt = Date.now();
    const submitted: { tenant: string; runId: string; code: number }[] = [];
    // Tenant a floods first; b and c come after, so a fair queue must not serve a first.
    for (let i = 0; i < 30; i++) {
      const { view } = await a.submitRun({
        clientRequestId: `a-${i}`,
        workloadClass: "ci-small",
        scriptBase64: script(`echo a ${i}\nexit ${i % 3}\n`),
        budgetSeconds: 600,
      });
      submitted.push({ tenant: "controller:a", runId: view.runId, code: i % 3 });
    }
    for (const [t, n] of [
      ["controller:b", 20],
      ["controller:c", 10],
    ] as const)
      for (let i = 0; i < n; i++) {
        const { view } = await clients.get(t)!.submitRun({
          clientRequestId: `${t}-${i}`,
          workloadClass: "ci-small",
          scriptBase64: script(`echo ${t} ${i}\n`),
          budgetSeconds: 600,
        });
        submitted.push({ tenant: t, runId: view.runId, code: 0 });
      }
    // A queued run's position only shrinks.
    const watched = submitted[submitted.length - 1]!;
    const c = clients.get(watched.tenant)!;
    const positions: number[] = [];
    for (;;) {
      const v = await c.getRun(watched.runId);
      if (v.state !== "queued") break;
      positions.push(v.queue!.position);
      await Bun.sleep(50);
    }
    for (let i = 1; i < positions.length; i++) expect(positions[i]!).toBeLessThanOrEqual(positions[i - 1]!);

    const ended: RunView[] = [];
    for (const r of submitted) ended.push(await clients.get(r.tenant)!.waitRun(r.runId, { timeoutMs: 120_000 }));
    for (const [i, v] of ended.entries()) {
      expect(v.exitCode).toBe(submitted[i]!.code);
      expect(v.state).toBe(submitted[i]!.code === 0 ? "succeeded" : "failed");
      expect(v.allocationId).not.toBeNull();
      const events = await clients.get(submitted[i]!.tenant)!.runEvents(v.runId);
      expect(events.filter((e) => e.type === "run.ended")).toHaveLength(1);
      expect(events.filter((e) => e.type === "run.dispatched")).toHaveLength(1);
      expect(pilot.consumed.get(`run:${v.runId}`)).toBe(1);
      expect(pilot.absent.has(v.allocationId!)).toBe(true);
    }
    // Fairness: whenever a tenant got a slot that gave it two or more, no other tenant waited with none.
    const t = (x: string | null) => (x ? Date.parse(x) : Number.POSITIVE_INFINITY);
    const rows = ended.map((v, i) => ({ tenant: submitted[i]!.tenant, ...v.timings }));
    const activeAt = (tenant: string, at: number) =>
      rows.filter((r) => r.tenant === tenant && t(r.dispatchedAt) <= at && t(r.endedAt) > at).length;
    for (const r of rows) {
      const at = t(r.dispatchedAt);
      if (activeAt(r.tenant, at) < 2) continue;
      for (const other of TENANTS) {
        if (other === r.tenant) continue;
        const waiting = rows.some((o) => o.tenant === other && t(o.queuedAt) < at && t(o.dispatchedAt) > at);
        if (waiting) expect(activeAt(other, at)).toBeGreaterThanOrEqual(1);
      }
    }
    // Usage: each tenant's VM time is the sum over its allocations' events, from placement.running to placement.absent, to the ms.
    for (const tenant of TENANTS) {
      const c = clients.get(tenant)!;
      let want = 0;
      for (const [i, v] of ended.entries()) {
        if (submitted[i]!.tenant !== tenant) continue;
        const ev = await c.events(v.allocationId!, 0, 200);
        const at = (type: string) => Date.parse(ev.find((e) => e.type === type)!.at);
        want += at("placement.absent") - at("placement.running");
      }
      const report = await c.usage({ fromMs: startedAt - 60_000, toMs: Date.now() + 60_000, by: "tenant" });
      expect(report.items.map((x) => x.key)).toEqual([tenant]);
      expect(report.total.vmMs).toBe(want);
      expect(report.total.vms).toBe(tenant === "controller:a" ? 30 : tenant === "controller:b" ? 20 : 10);
      expect(report.total.cpuMillicoreMs).toBe(want * 1000);
      expect(report.total.memoryMiBMs).toBe(want * 256);
    }
    const all = await s.operator.usage({ fromMs: startedAt - 60_000, toMs: Date.now() + 60_000, by: "class" });
    expect(all.items.map((x) => x.key)).toEqual(["ci-small"]);
    expect(all.total.vms).toBe(60);
    // Never more than 4 at once.
    for (const r of rows) {
      const at = t(r.dispatchedAt);
      expect(rows.filter((o) => t(o.dispatchedAt) <= at && t(o.endedAt) > at).length).toBeLessThanOrEqual(4);
    }
  }, 180_000);

  test("a repeat answers the same run; another body is IDEMPOTENCY_CONFLICT; others see NOT_FOUND; a full queue is 429", async () => {
    const b = clients.get("controller:b")!;
    const body = {
      clientRequestId: "same",
      workloadClass: "ci-small",
      scriptBase64: script("exit 0\n"),
      budgetSeconds: 60,
    };
    const first = await b.submitRun(body);
    const again = await b.submitRun(body);
    expect(again.created).toBe(false);
    expect(again.view.runId).toBe(first.view.runId);
    expect(await codeOf(b.submitRun({ ...body, budgetSeconds: 61 }))).toBe("IDEMPOTENCY_CONFLICT");
    expect(await codeOf(clients.get("controller:c")!.getRun(first.view.runId))).toBe("NOT_FOUND");
    expect(await codeOf(b.submitRun({ ...body, clientRequestId: "bad", workloadClass: "nope" }))).toBe(
      "UNKNOWN_WORKLOAD_CLASS",
    );
    await b.waitRun(first.view.runId, { timeoutMs: 30_000 });

    // Fill b's share of the queue (30) behind runs that never end, then one more is refused with Retry-After.
    const hold = await Promise.all(
      Array.from({ length: 4 }, (_, i) =>
        b.submitRun({
          clientRequestId: `hold-${i}`,
          workloadClass: "ci-small",
          scriptBase64: script("sleep forever\n"),
          budgetSeconds: 600,
        }),
      ),
    );
    for (const h of hold) await waitState(b, h.view.runId, "running");
    for (let i = 0; i < 30; i++)
      await b.submitRun({
        clientRequestId: `fill-${i}`,
        workloadClass: "ci-small",
        scriptBase64: script("exit 0\n"),
        budgetSeconds: 60,
      });
    const raw = await fetch(`${s.url}/v1/runs`, {
      method: "POST",
      headers: { authorization: `Bearer ${tokenOf("controller:b")}`, "content-type": "application/json" },
      body: JSON.stringify({
        clientRequestId: "over",
        workloadClass: "ci-small",
        scriptBase64: script("exit 0\n"),
        budgetSeconds: 60,
      }),
    });
    expect(raw.status).toBe(429);
    expect(raw.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(((await raw.json()) as { code: string }).code).toBe("QUOTA_QUEUED_RUNS");
    expect(await codeOf(b.getRun((await b.listRuns()).items[0]!.runId))).toBeNull();
    // Cancel: a queued run ends at once; a running one once its VM is gone.
    const queued = (await b.listRuns(undefined, 1)).items[0]!;
    expect(queued.state).toBe("queued");
    expect((await b.cancelRun(queued.runId)).state).toBe("canceled");
    for (const h of hold) await b.cancelRun(h.view.runId);
    for (const h of hold) {
      const v = await b.waitRun(h.view.runId, { timeoutMs: 30_000 });
      expect(v.state).toBe("canceled");
      expect(pilot.absent.has(v.allocationId!)).toBe(true);
    }
    const page = await b.listRuns(undefined, 200);
    for (const r of page.items.filter((x) => x.clientRequestId.startsWith("fill-"))) await b.cancelRun(r.runId);
  }, 120_000);

  test("a run past its budget ends timed_out with its VM gone; a queue deadline ends one without a VM", async () => {
    const c = clients.get("controller:c")!;
    const { view } = await c.submitRun({
      clientRequestId: "slow",
      workloadClass: "ci-small",
      scriptBase64: script("sleep forever\n"),
      budgetSeconds: 10,
    });
    const v = await c.waitRun(view.runId, { timeoutMs: 60_000 });
    expect(v.state).toBe("timed_out");
    expect(v.reason).toBe("BUDGET_EXCEEDED");
    expect(v.exitCode).toBeNull();
    expect(pilot.absent.has(v.allocationId!)).toBe(true);
    expect(Date.parse(v.timings.exitedAt!) - Date.parse(v.timings.dispatchedAt!)).toBeGreaterThanOrEqual(10_000);

    // Hold all four slots, then a run with a 1 s queue deadline never gets one.
    const hold = await Promise.all(
      Array.from({ length: 4 }, (_, i) =>
        c.submitRun({
          clientRequestId: `c-hold-${i}`,
          workloadClass: "ci-small",
          scriptBase64: script("sleep forever\n"),
          budgetSeconds: 600,
        }),
      ),
    );
    for (const h of hold) await waitState(c, h.view.runId, "running");
    const late = await c.submitRun({
      clientRequestId: "late",
      workloadClass: "ci-small",
      scriptBase64: script("exit 0\n"),
      budgetSeconds: 60,
      queueDeadlineSeconds: 1,
    });
    const lv = await c.waitRun(late.view.runId, { timeoutMs: 30_000 });
    expect(lv.state).toBe("timed_out");
    expect(lv.reason).toBe("QUEUE_DEADLINE_EXCEEDED");
    expect(lv.allocationId).toBeNull();
    for (const h of hold) await c.cancelRun(h.view.runId);
    for (const h of hold) expect((await c.waitRun(h.view.runId, { timeoutMs: 30_000 })).state).toBe("canceled");
  }, 120_000);
});

async function waitState(c: SchedulerClient, runId: string, state: RunView["state"]): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if ((await c.getRun(runId)).state === state) return;
    await Bun.sleep(50);
  }
  throw new Error(`run ${runId} never reached ${state}`);
}
