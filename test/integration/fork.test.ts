/**
 * Fork through the API (issue 21, "Fork"), on the embedded scheduler with
 * a scripted agent (test/support/scriptedAgent.ts: it speaks the agent
 * protocol and reports what a real agent would; the real restore is in
 * test/e2e/pause-suspend.test.ts). Checked: a fork of an allocation that
 * is not suspended is 409 INVALID_STATE; a fork of a suspended one makes
 * `count` allocations whose commands name the parent's placement and
 * generation and go to the parent's host only; a repeat answers the same
 * forks (200, created false); the same key with another count is 422
 * IDEMPOTENCY_CONFLICT; a fork of a parent that consumed a payload is 409
 * PAYLOAD_CONSUMED without allowConsumedPayload and carries
 * payloadAllowed with it.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startSchedulerOn, type SchedulerUnderTest } from "../support/schedulerHosts.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";
import { enrollTestHost } from "../support/scheduler.ts";

let s: SchedulerUnderTest;
let agent: ScriptedAgent;

/** The stable code a call was refused with, or null if it succeeded. */
const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (e: { code?: string }) => e.code ?? String(e),
  );

/** Enrolls `hostId` with room for a parent and its forks, and its scripted agent. */
async function enroll(hostId: string): Promise<ScriptedAgent> {
  const cap = { cpuMillis: 8000, memoryMiB: 8192, ephemeralDiskMiB: 65536, maxPlacements: 8 };
  const enrolled = await enrollTestHost(s, hostId, cap);
  const a = new ScriptedAgent(s.url, hostId, enrolled.credential);
  await a.poll();
  await s.operator.setHostState(hostId, "activate").catch(() => undefined);
  return a;
}

/** Creates an allocation and reports it running; with `payload`, delivers one and acknowledges it consumed. */
async function ready(key: string, payload = false): Promise<string> {
  const { view } = await s.controller.create({ clientRequestId: key, workloadClass: "ci-small" });
  const present = await agent.waitCommand("ensure_present", view.allocationId);
  await agent.report(present, "prepared");
  await agent.waitCommand("ensure_running", view.allocationId);
  await agent.report(present, "running");
  await s.controller.waitFor(view.allocationId, (v) => v.state === "ready", { timeoutMs: 5000 });
  if (payload) {
    await agent.consumeDelivery(s.controller, view.allocationId, present.placementId, `${key}-d`, "echo hi");
    agent.deliveries.length = 0;
  }
  return view.allocationId;
}

async function suspend(id: string): Promise<void> {
  await s.controller.suspend(id);
  const cmd = await agent.waitCommand("ensure_suspended", id);
  await agent.report(cmd, "suspended");
  await s.controller.waitFor(id, (v) => v.state === "suspended", { timeoutMs: 5000 });
}

describe("fork through the API (scripted agent)", () => {
  beforeAll(async () => {
    s = await startSchedulerOn("embedded", (m) => {
      const classes = m["workloadClasses"] as Record<string, Record<string, unknown>>;
      classes["ci-small"]!["suspendable"] = true;
    });
    agent = await enroll("fork-host");
  });
  afterAll(async () => {
    await s.stop();
  });

  test("forks of a suspended allocation run from its snapshot on its host; repeats answer the same forks", async () => {
    const parent = await ready("parent-1");
    expect(await codeOf(s.controller.fork(parent, { clientRequestId: "f1", count: 2 }))).toBe("INVALID_STATE");
    await suspend(parent);
    const p = await s.controller.get(parent);

    const first = await s.controller.fork(parent, { clientRequestId: "f1", count: 2 });
    expect(first.created).toBe(true);
    expect(first.items.length).toBe(2);
    const ids = first.items.map((v) => v.allocationId);
    expect(new Set([...ids, parent]).size).toBe(3);
    for (const id of ids) {
      const cmd = await agent.waitCommand("ensure_present", id);
      expect(cmd.spec.forkOf).toEqual({
        allocationId: parent,
        placementId: p.placementId!,
        generation: p.generation,
        hostId: "fork-host",
        payloadAllowed: false,
      });
      const created = (await s.controller.events(id, 0, 10)).find((e) => e.type === "allocation.created");
      expect(created?.data).toMatchObject({ forkOf: parent, forkGeneration: p.generation });
    }

    const again = await s.controller.fork(parent, { clientRequestId: "f1", count: 2 });
    expect(again.created).toBe(false);
    expect(again.items.map((v) => v.allocationId)).toEqual(ids);
    expect(await codeOf(s.controller.fork(parent, { clientRequestId: "f1", count: 3 }))).toBe("IDEMPOTENCY_CONFLICT");
    // The parent is untouched by its forks.
    expect((await s.controller.get(parent)).state).toBe("suspended");
  });

  test("a parent that consumed a payload forks only with allowConsumedPayload, and its forks may take one", async () => {
    const parent = await ready("parent-2", true);
    await suspend(parent);
    expect(await codeOf(s.controller.fork(parent, { clientRequestId: "f2", count: 1 }))).toBe("PAYLOAD_CONSUMED");
    const { items } = await s.controller.fork(parent, { clientRequestId: "f2", count: 1, allowConsumedPayload: true });
    const cmd = await agent.waitCommand("ensure_present", items[0]!.allocationId);
    expect(cmd.spec.forkOf?.payloadAllowed).toBe(true);
  });
});
