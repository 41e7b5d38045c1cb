/**
 * The scheduler's side of two host faults (issue 7, items 2 and 3), through
 * the real HTTP API and a scripted agent: a host whose agent reports its
 * VMM failing is unschedulable with VMM_START_FAILING and raises one alert
 * until the agent reports it cleared; a VM_EXITED observation's diagnosis
 * (reason and console tail) shows in the allocation's events and view, and a
 * payload consumed just before the crash still yields bootstrap.consumed.
 * The agent's side runs against real VMs in test/e2e/main-job.test.ts and
 * test/integration/vmm-health.test.ts.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { enrollTestHost, startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";

let s: TestScheduler;
const capacity = { cpuMillis: 2000, memoryMiB: 2048, ephemeralDiskMiB: 8192, maxPlacements: 2 };
const health = (vmmStartFailing: boolean) => ({
  health: { isolationHealthy: true, quarantineCount: 0, vmmDriver: "scripted", vmmStartFailing },
});

async function enroll(hostId: string): Promise<ScriptedAgent> {
  return new ScriptedAgent(s.url, hostId, (await enrollTestHost(s, hostId, capacity)).credential);
}

beforeAll(async () => {
  s = await startTestScheduler();
});
afterAll(async () => {
  await s.stop();
});

test("a failing VMM makes the host unschedulable with VMM_START_FAILING and one alert, until the agent reports it cleared", async () => {
  const agent = await enroll("vmm-host");
  await agent.poll(0, health(false));
  const host = async () => (await s.operator.hosts()).find((h) => h.hostId === "vmm-host")!;
  expect((await host()).unschedulable).toEqual([]);
  await agent.poll(0, health(true));
  await agent.poll(0, health(true));
  expect((await host()).unschedulable).toEqual(["VMM_START_FAILING"]);
  const { view } = await s.controller.create({ clientRequestId: "vmm-1", workloadClass: "ci-small" });
  await Bun.sleep(200);
  expect((await s.controller.get(view.allocationId)).state).toBe("pending");
  const alerts = (await s.operator.alerts()).filter((a) => a.subject === "vmm-host");
  expect(alerts.map((a) => `${a.type}/${a.reason}`)).toEqual(["host.vmm_start_failing/VMM_START_FAILING"]);
  await agent.poll(0, health(false));
  expect((await host()).unschedulable).toEqual([]);
  await agent.waitCommand("ensure_present", view.allocationId);
  await s.controller.release(view.allocationId);
});

test("a VM's exit diagnosis shows in events and the allocation view; a payload consumed before the crash is still recorded", async () => {
  const agent = await enroll("crash-host");
  await agent.poll(0, health(false));
  const { view } = await s.controller.create({ clientRequestId: "crash-1", workloadClass: "ci-small" });
  const present = await agent.waitCommand("ensure_present", view.allocationId);
  for (const st of ["preparing", "prepared"] as const) await agent.report(present, st);
  await agent.waitCommand("ensure_running", view.allocationId);
  for (const st of ["starting", "running"] as const) await agent.report(present, st);
  for (let i = 0; i < 100 && (await s.controller.get(view.allocationId)).state !== "ready"; i++) await Bun.sleep(20);
  const payload = Buffer.from("echo c > /proc/sysrq-trigger\n");
  const digest = `sha256:${createHash("sha256").update(payload).digest("hex")}`;
  const delivery = s.controller.deliver(view.allocationId, {
    deliveryId: "d-crash",
    generation: 1,
    contentType: "text/x-shellscript",
    payloadBase64: payload.toString("base64"),
  });
  for (let i = 0; i < 20 && agent.deliveries.length === 0; i++) await agent.poll(200);
  const tail =
    "[    5.121000] Kernel panic - not syncing: sysrq triggered crash\n[    5.124000] Rebooting in 1 seconds..";
  // The crash and the receipt arrive in one envelope, the crash first (as the real agent flushes them).
  await agent.send({
    updates: [
      {
        seq: 100,
        placementId: present.placementId,
        allocationId: present.allocationId,
        generation: 1,
        state: "error",
        errorCode: "VM_EXITED",
        exit: { reason: "KERNEL_PANIC", consoleTail: tail },
        at: new Date().toISOString(),
      },
    ],
    deliveryAcks: [
      { deliveryId: "d-crash", placementId: present.placementId, generation: 1, result: "consumed", digest },
    ],
  });
  expect((await delivery).digest).toBe(digest);
  const events = await s.controller.events(view.allocationId);
  const err = events.find((e) => e.type === "placement.error")!;
  expect(err.reason).toBe("VM_EXITED");
  expect(err.data).toMatchObject({ exitReason: "KERNEL_PANIC", consoleTail: tail });
  expect(events.some((e) => e.type === "bootstrap.consumed")).toBe(true);
  const v = await s.controller.get(view.allocationId);
  expect(v.placementExit).toMatchObject({
    generation: 1,
    placementId: present.placementId,
    reason: "KERNEL_PANIC",
    consoleTail: tail,
  });
  // An oversized or unknown diagnosis is refused by the envelope schema, never stored.
  const bad = await agent
    .send({
      updates: [
        {
          seq: 101,
          placementId: present.placementId,
          allocationId: present.allocationId,
          generation: 1,
          state: "error",
          errorCode: "VM_EXITED",
          exit: { reason: "KERNEL_PANIC", consoleTail: "x".repeat(5000) },
          at: new Date().toISOString(),
        },
      ],
    })
    .catch((e: { code?: string }) => e.code);
  expect(bad).toBe("VALIDATION_FAILED");
});
