/**
 * Budgets (issue 22, "Usage and cost") on the embedded scheduler: a class
 * with a price per hour and a controller with a monthly budget. A create
 * reserves price × its lifetime; one that would pass the budget is 429
 * COST_LIMIT_EXCEEDED with nothing created (no allocation, no admission:
 * the next create that fits is admitted); a released allocation gives its
 * reservation back; a run whose allocation would pass it ends failed with
 * COST_LIMIT_EXCEEDED, without a VM.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { startSchedulerOn, type SchedulerUnderTest } from "../support/schedulerHosts.ts";
import { SchedulerClient } from "../../src/client/index.ts";

const TOKEN = "token-for-the-budgeted-controller-0123456789";
let s: SchedulerUnderTest;
let c: SchedulerClient;

const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (e: { code?: string }) => e.code ?? String(e),
  );

describe("monthly budgets", () => {
  beforeAll(async () => {
    s = await startSchedulerOn("embedded", (m) => {
      (m["principals"] as Record<string, unknown>[]).push({
        id: "controller:budgeted",
        role: "controller",
        tokenSha256: createHash("sha256").update(TOKEN).digest("hex"),
        monthlyBudget: 1,
      });
      const classes = m["workloadClasses"] as Record<string, Record<string, unknown>>;
      classes["ci-small"]!["pricePerHour"] = 1;
    });
    c = new SchedulerClient(s.url, TOKEN);
  });
  afterAll(async () => {
    await s?.stop();
  });

  test("creates reserve price × lifetime; past the budget 429 with nothing created; a release gives it back", async () => {
    const a = await c.create({ clientRequestId: "half-1", workloadClass: "ci-small", ttlSeconds: 1800 });
    await c.create({ clientRequestId: "half-2", workloadClass: "ci-small", ttlSeconds: 1800 });
    const before = (await c.list(undefined, 200)).items.length;
    const raw = await fetch(`${s.url}/v1/allocations`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ clientRequestId: "over", workloadClass: "ci-small", ttlSeconds: 10 }),
    });
    expect(raw.status).toBe(429);
    const problem = (await raw.json()) as { code: string; extra?: Record<string, number> };
    expect(problem.code).toBe("COST_LIMIT_EXCEEDED");
    expect((await c.list(undefined, 200)).items.length).toBe(before);
    // Another controller without a budget is not limited.
    expect(
      await codeOf(s.controller.create({ clientRequestId: "free", workloadClass: "ci-small", ttlSeconds: 3600 })),
    ).toBeNull();
    // A repeat of an admitted create is answered, not charged again.
    expect((await c.create({ clientRequestId: "half-1", workloadClass: "ci-small", ttlSeconds: 1800 })).created).toBe(
      false,
    );
    await c.release(a.view.allocationId);
    await c.waitFor(a.view.allocationId, (v) => v.state === "released", { timeoutMs: 10_000 }).catch(() => undefined);
    // Released before it ever ran: it used nothing, and its half is free again.
    for (let i = 0; i < 50; i++) {
      if (
        (await codeOf(c.create({ clientRequestId: "after-release", workloadClass: "ci-small", ttlSeconds: 1800 }))) ===
        null
      )
        return;
      await Bun.sleep(100);
    }
    throw new Error("the released allocation's reservation never came back");
  });

  test("a run whose allocation would pass the budget ends failed with COST_LIMIT_EXCEEDED and no VM", async () => {
    const { view } = await c.submitRun({
      clientRequestId: "costly",
      workloadClass: "ci-small",
      scriptBase64: "ZXhpdCAwCg==",
      budgetSeconds: 3600,
    });
    const v = await c.waitRun(view.runId, { timeoutMs: 30_000 });
    expect(v.state).toBe("failed");
    expect(v.reason).toBe("COST_LIMIT_EXCEEDED");
    expect(await codeOf(c.get(v.allocationId!))).toBe("NOT_FOUND");
  });
});
