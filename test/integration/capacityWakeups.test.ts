/**
 * Waiting allocations and freed capacity (issue "Freed capacity sits idle
 * while work waits", "Pending is unexplained"): a release observed as absent
 * wakes the waiting allocations in order of age with no alarm and no time
 * passing; the pending view says why no host took it, counted by reason.
 * Real objects and SQLite under a fake clock; the runtime's alarm timer is
 * never started and nothing calls `tick()`, so nothing in these tests can be
 * the work of an alarm.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AgentCommand } from "../../src/protocol/agent.ts";
import { SchedulerWorker } from "../../src/scheduler/worker.ts";
import { TEST_CONTROLLER, TEST_OPERATOR, testManifest } from "../support/testManifest.ts";
import { FakeClock } from "../../src/protocol/fakeClock.ts";
import { SeededRandom } from "../sim/rng.ts";
import { InProcessAgent } from "../support/inProcessAgent.ts";

const C = TEST_CONTROLLER;
const O = TEST_OPERATOR;
const dirs: string[] = [];
const workers: SchedulerWorker[] = [];

afterEach(async () => {
  for (const w of workers.splice(0)) await w.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function world() {
  const dir = mkdtempSync(join(tmpdir(), "bb-wake-"));
  dirs.push(dir);
  const clock = new FakeClock({ wallMs: 1_900_000_000_000 });
  const manifest = testManifest();
  const w = new SchedulerWorker({ dataDir: dir, manifest, publicUrl: "http://t", clock, random: new SeededRandom(7) });
  w.runtime.recover();
  workers.push(w);
  return { w, clock };
}

/** An in-process agent (test/support/inProcessAgent.ts) that finds an allocation's ensure_present of any generation. */
class Agent extends InProcessAgent {
  present(allocationId: string): AgentCommand {
    return this.cmds.find((c) => c.type === "ensure_present" && c.allocationId === allocationId)!;
  }
}

async function enroll(
  w: SchedulerWorker,
  clock: FakeClock,
  hostId: string,
  maxPlacements: number,
  skewMs = 0,
): Promise<Agent> {
  const t = await w.createEnrollmentToken(O, hostId, 3600);
  await w.enroll({
    token: t.token,
    capacity: { cpuMillis: 4000, memoryMiB: 4096, ephemeralDiskMiB: 10_000, maxPlacements },
    region: "t",
    architecture: "x86_64",
    agentProtocolVersion: "1.0",
    vmmDriver: "t",
  });
  const a = new Agent(w, hostId, clock, { bootId: "boot", skewMs });
  await a.poll();
  return a;
}

describe("freed capacity wakes waiting work", () => {
  test("a release observed as absent places the waiting allocations in order of age, with no time passing", async () => {
    const { w, clock } = world();
    const agent = await enroll(w, clock, "h1", 2);
    const a = (await w.createAllocation(C, { clientRequestId: "a", workloadClass: "small" })).view;
    const b = (await w.createAllocation(C, { clientRequestId: "b", workloadClass: "small" })).view;
    expect([a.state, b.state]).toEqual(["provisioning", "provisioning"]);
    const older = (await w.createAllocation(C, { clientRequestId: "older", workloadClass: "small" })).view;
    clock.advance(1);
    const younger = (await w.createAllocation(C, { clientRequestId: "younger", workloadClass: "small" })).view;
    for (const v of [older, younger]) {
      expect(v.state).toBe("pending");
      expect(v.conditions).toEqual(["NO_CAPACITY"]);
      expect(v.placement).toMatchObject({
        result: "no_eligible_host",
        hostsConsidered: 1,
        noFit: { PLACEMENT_LIMIT_REACHED: 1 },
        unschedulable: {},
      });
    }

    await agent.poll();
    await w.releaseAllocation(C, a.allocationId);
    await agent.report(agent.present(a.allocationId), "absent");
    expect((await w.getAllocation(C, a.allocationId)).state).toBe("released");
    const o = await w.getAllocation(C, older.allocationId);
    expect([o.state, o.conditions, o.placement?.result]).toEqual(["provisioning", [], "reserved"]);
    expect((await w.getAllocation(C, younger.allocationId)).state).toBe("pending");

    await agent.poll();
    await w.releaseAllocation(C, b.allocationId);
    await agent.report(agent.present(b.allocationId), "absent");
    expect((await w.getAllocation(C, younger.allocationId)).state).toBe("provisioning");
    // The alarm timer never ran (the runtime was not started and nothing called tick()): only events placed them.
    expect(clock.wallMs()).toBe(1_900_000_000_001);
  });

  test("a new host wakes the waiting allocation; one that was released while waiting leaves the queue", async () => {
    const { w, clock } = world();
    const gone = (await w.createAllocation(C, { clientRequestId: "gone", workloadClass: "small" })).view;
    const waiting = (await w.createAllocation(C, { clientRequestId: "waiting", workloadClass: "small" })).view;
    expect((await w.env.HostDirectory.get("global").waiters()).map((x) => x.allocationId)).toEqual(
      [gone.allocationId, waiting.allocationId].sort((x, y) => (x < y ? -1 : 1)),
    );
    await w.releaseAllocation(C, gone.allocationId);
    expect((await w.env.HostDirectory.get("global").waiters()).map((x) => x.allocationId)).toEqual([
      waiting.allocationId,
    ]);
    await enroll(w, clock, "h1", 1);
    await w.runtime.idle();
    expect((await w.getAllocation(C, waiting.allocationId)).state).toBe("provisioning");
  });
});

describe("a pending allocation explains itself", () => {
  test("a host unschedulable only for clock skew is counted as such, not as missing capacity", async () => {
    const { w, clock } = world();
    await enroll(w, clock, "skewed", 4, 30_000);
    await enroll(w, clock, "full", 0 + 1);
    await w.createAllocation(C, { clientRequestId: "fill", workloadClass: "small" });
    const v = (await w.createAllocation(C, { clientRequestId: "p", workloadClass: "small" })).view;
    expect(v.state).toBe("pending");
    expect(v.placement).toMatchObject({
      result: "no_eligible_host",
      hostsConsidered: 2,
      unschedulable: { CLOCK_SKEW: 1 },
      noFit: { PLACEMENT_LIMIT_REACHED: 1 },
    });
    const listed = (await w.listAllocations(C, null, 10)).items.find((x) => x.allocationId === v.allocationId);
    expect(listed?.placement?.unschedulable).toEqual({ CLOCK_SKEW: 1 });
  });
});
