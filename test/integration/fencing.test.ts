/**
 * The scheduler's fencing and admission rules, each driven to the edge on
 * the real objects (SQLite files) under a fake clock: host loss before and
 * after readiness, replacement authorizations, operator fencing, overlapping
 * sessions, clock skew and inventory, rates and quotas, reservation
 * idempotency, lease renewal, retention and metrics.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BeachballError } from "../../src/protocol/errors.ts";
import type { AgentCommand, Envelope, PlacementUpdate, PollResponse } from "../../src/protocol/agent.ts";
import { SchedulerWorker } from "../../src/scheduler/worker.ts";
import { tokenDigest, type DeploymentManifest } from "../../src/scheduler/manifest.ts";

import { reservationKey } from "../../src/domain/identifiers.ts";
import { TEST_CONTROLLER, TEST_OPERATOR, testManifest } from "../support/testManifest.ts";
import { InProcessAgent } from "../support/inProcessAgent.ts";
import { FakeClock } from "../../src/protocol/fakeClock.ts";
import { SeededRandom } from "../sim/rng.ts";

const C = TEST_CONTROLLER;
const O = TEST_OPERATOR;
const CAP = { cpuMillis: 2000, memoryMiB: 1024, ephemeralDiskMiB: 4096, maxPlacements: 2 };
const dirs: string[] = [];
const workers: SchedulerWorker[] = [];

function world(limits: Partial<DeploymentManifest["limits"]> = {}, leaseMs = 30_000) {
  const dir = mkdtempSync(join(tmpdir(), "bb-fence-"));
  dirs.push(dir);
  const clock = new FakeClock({ wallMs: 1_900_000_000_000 });
  const manifest = testManifest(limits);
  const w = new SchedulerWorker({
    dataDir: dir,
    manifest,
    publicUrl: "http://t",
    clock,
    random: new SeededRandom(42),
    timeouts: { leaseMs, hostCheckIntervalMs: 5_000, leaseGraceMs: 10_000, retentionDays: 1 },
  });
  w.runtime.recover();
  workers.push(w);
  const settle = async (ms = 0) => {
    clock.advance(ms);
    w.runtime.tick();
    await w.runtime.idle();
  };
  return { w, clock, settle };
}

/** An in-process agent with this file's inventory (test/support/inProcessAgent.ts). */
const INVENTORY = { cpuMillis: 2000, memoryMiB: 1024 };
class Agent extends InProcessAgent {
  constructor(w: SchedulerWorker, hostId: string, clock: FakeClock, bootId = "boot-1", skewMs = 0) {
    super(w, hostId, clock, { bootId, skewMs, inventory: INVENTORY });
  }
}

async function enroll(w: SchedulerWorker, hostId: string, cap = CAP): Promise<void> {
  const t = await w.createEnrollmentToken(O, hostId, 3600);
  await w.enroll({
    token: t.token,
    capacity: cap,
    region: "t",
    architecture: "x86_64",
    agentProtocolVersion: "1.0",
    vmmDriver: "t",
  });
}

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return "OK";
  } catch (e) {
    return e instanceof BeachballError ? e.code : String(e);
  }
}

/** Two enrolled, heartbeating hosts and one allocation running (ready) on one of them, `owner`. */
async function twoHostsOneReady() {
  const { w, clock, settle } = world();
  await enroll(w, "a");
  await enroll(w, "b");
  const a = new Agent(w, "a", clock);
  const b = new Agent(w, "b", clock);
  await a.poll();
  await b.poll();
  const { view } = await w.createAllocation(C, { clientRequestId: "r1", workloadClass: "small" });
  await settle();
  const owner = (await w.getAllocation(C, view.allocationId)).hostId === "a" ? a : b;
  const other = owner === a ? b : a;
  await owner.run(view.allocationId);
  return { w, settle, view, owner, other };
}

afterEach(async () => {
  for (const w of workers.splice(0)) await w.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("host loss and replacement", () => {
  test("before readiness: replaced on another host only after the old lease expired; the lost host keeps the capacity", async () => {
    const { w, clock, settle } = world({}, 120_000);
    await enroll(w, "a");
    const a = new Agent(w, "a", clock);
    await a.poll();
    const { view } = await w.createAllocation(C, { clientRequestId: "r1", workloadClass: "small" });
    await settle();
    await a.poll();
    const p1 = a.cmd("ensure_present", view.allocationId)!;
    await a.report(p1, "prepared");
    await enroll(w, "b");
    const b = new Agent(w, "b", clock);
    // Host a goes silent (lost after 90 s); its lease (120 s) has not expired yet, so no replacement may start.
    for (let t = 0; t < 110_000; t += 5_000) {
      await settle(5_000);
      await b.poll();
    }
    const lease = (await w.env.Host.get("a").placementStatus(p1.placementId)).leaseExpiresAtMs;
    expect((await w.hosts(O)).find((h) => h.hostId === "a")!.health).toBe("lost");
    expect(clock.wallMs()).toBeLessThan(lease + 10_000);
    let v = await w.getAllocation(C, view.allocationId);
    expect(v.generation).toBe(1);
    for (let t = 0; t < 30_000; t += 5_000) {
      await settle(5_000);
      await b.poll();
    }
    v = await w.getAllocation(C, view.allocationId);
    expect(v.allocationId).toBe(view.allocationId);
    expect(v.generation).toBe(2);
    expect(v.hostId).toBe("b");
    const events = await w.events(C, view.allocationId, 0, 100);
    const replacedAt = Date.parse(events.find((e) => e.toState === "pending" && e.reason === "HOST_LOST")!.at);
    expect(replacedAt).toBeGreaterThanOrEqual(lease + 10_000);
    const hostA = (await w.hosts(O)).find((h) => h.hostId === "a")!;
    expect(hostA.health).toBe("lost");
    expect(hostA.placements.map((p) => p.placementId)).toEqual([p1.placementId]);
    expect(hostA.free.cpuMillis).toBe(1000);
  });

  test("after readiness: replacement_blocked until the controller authorizes it", async () => {
    const { w, settle, view, owner, other } = await twoHostsOneReady();
    expect((await w.getAllocation(C, view.allocationId)).state).toBe("ready");
    for (let t = 0; t < 150_000; t += 5_000) {
      await settle(5_000);
      await other.poll();
    }
    let v = await w.getAllocation(C, view.allocationId);
    expect(v.state).toBe("ready");
    expect(v.generation).toBe(1);
    expect(v.conditions).toContain("replacement_blocked");
    expect((await w.alerts(O, 0, 50)).some((x) => x.type === "allocation.replacement_blocked")).toBe(true);
    expect(await code(w.authorizeReplacement(C, view.allocationId, 2))).toBe("STALE_GENERATION");
    await w.authorizeReplacement(C, view.allocationId, 1);
    await settle(1_000);
    await other.poll();
    v = await w.getAllocation(C, view.allocationId);
    expect(v.generation).toBe(2);
    expect(v.hostId).toBe(other.hostId);
    expect(v.conditions).not.toContain("replacement_blocked");
    expect(await code(w.authorizeReplacement(C, view.allocationId, 2))).toBe("REPLACEMENT_NOT_BLOCKED");
  });

  test("operator fencing frees the host's capacity, bumps its credential version and replaces its allocations", async () => {
    const { w, settle, view, owner, other } = await twoHostsOneReady();
    const hostId = owner.hostId;
    const before = (await w.hosts(O)).find((h) => h.hostId === hostId)!;
    const fenced = await w.setHostState(O, hostId, "disabled");
    expect(fenced.adminState).toBe("disabled");
    expect(fenced.credentialVersion).toBe(before.credentialVersion + 1);
    expect(fenced.placements).toEqual([]);
    expect(await w.env.Host.get(hostId).authenticate(tokenDigest("anything"))).toBe(false);
    await settle(100);
    await other.poll();
    const v = await w.getAllocation(C, view.allocationId);
    expect(v.generation).toBe(2);
    expect(v.hostId).toBe(other.hostId);
    expect(
      (await w.events(C, view.allocationId, 0, 100)).some(
        (e) => e.type === "placement.absent" && e.reason === "HOST_FENCED",
      ),
    ).toBe(true);
  });
});

describe("host conditions", () => {
  test("an overlapping session, clock skew and a short inventory each make the host unschedulable", async () => {
    const { w, clock, settle } = world();
    await enroll(w, "a");
    const a = new Agent(w, "a", clock);
    await a.poll();
    expect((await w.hosts(O))[0]!.unschedulable).toEqual([]);
    const intruder = new Agent(w, "a", clock, "boot-2");
    await intruder.poll();
    expect((await w.hosts(O))[0]!.unschedulable).toContain("OVERLAPPING_AGENT_SESSION");
    expect(
      await w.env.Host.get("a").reserve({
        key: "k1",
        allocationId: "alloc_x",
        generation: 1,
        placementId: "plc_x",
        spec: { cpuMillis: 100, memoryMiB: 16, ephemeralDiskMiB: 1, imageDigest: `sha256:${"0".repeat(64)}` },
      }),
    ).toEqual({ accepted: false, code: "OVERLAPPING_AGENT_SESSION" });
    expect(await code(w.agentEnvelope("a", a.env("messages")))).toBe("STALE_AGENT_EPOCH");
    await settle(91_000);
    const skewed = new Agent(w, "a", clock, "boot-2", 6_000);
    skewed.epoch = intruder.epoch;
    await skewed.poll();
    expect((await w.hosts(O))[0]!.unschedulable).toEqual(["CLOCK_SKEW"]);
    skewed.o = { ...skewed.o, skewMs: 0, inventory: { cpuMillis: 1000, memoryMiB: 1024 } };
    await skewed.poll();
    expect((await w.hosts(O))[0]!.unschedulable).toEqual(["INVENTORY_MISMATCH"]);
  });
});

describe("admission", () => {
  test("rates answer 429 with Retry-After; quotas answer 409 with stable codes; nothing is created", async () => {
    const { w } = world({ controllerRequestsPerSecond: 1, maxAllocations: 100 });
    expect(await code(w.createAllocation(C, { clientRequestId: "a", workloadClass: "small" }))).toBe("OK");
    expect(await code(w.createAllocation(C, { clientRequestId: "b", workloadClass: "small" }))).toBe("OK");
    const e = await w
      .createAllocation(C, { clientRequestId: "c", workloadClass: "small" })
      .catch((x: BeachballError) => x);
    expect((e as BeachballError).code).toBe("RATE_LIMITED");
    expect((e as BeachballError).status).toBe(429);
    expect(((e as BeachballError).extra?.["retryAfterSeconds"] as number) >= 1).toBe(true);
    expect((await w.listAllocations(C, null, 10)).items).toHaveLength(2);
    const q = world({ maxConcurrentAllocationsPerController: 1 });
    await q.w.createAllocation(C, { clientRequestId: "a", workloadClass: "small" });
    expect(await code(q.w.createAllocation(C, { clientRequestId: "b", workloadClass: "small" }))).toBe(
      "QUOTA_CONCURRENT_ALLOCATIONS",
    );
    const d = world({ maxAllocations: 1 });
    await d.w.createAllocation(C, { clientRequestId: "a", workloadClass: "small" });
    expect(await code(d.w.createAllocation(C, { clientRequestId: "b", workloadClass: "small" }))).toBe(
      "QUOTA_DEPLOYMENT_ALLOCATIONS",
    );
    const r = world({ maxRetainedAllocations: 1 });
    const first = await r.w.createAllocation(C, { clientRequestId: "a", workloadClass: "small" });
    await r.w.releaseAllocation(C, first.view.allocationId);
    expect(await code(r.w.createAllocation(C, { clientRequestId: "b", workloadClass: "small" }))).toBe(
      "QUOTA_RETAINED_RECORDS",
    );
    const h = world({ maxRegisteredHosts: 1 });
    await enroll(h.w, "one");
    expect(await code(enroll(h.w, "two"))).toBe("QUOTA_REGISTERED_HOSTS");
  });

  test("retention deletes a terminal allocation after the configured days and frees its retained slot", async () => {
    const { w, settle } = world({ maxRetainedAllocations: 1 });
    const { view } = await w.createAllocation(C, { clientRequestId: "a", workloadClass: "small" });
    await w.releaseAllocation(C, view.allocationId);
    expect((await w.getAllocation(C, view.allocationId)).state).toBe("released");
    await settle(23 * 3600_000);
    expect((await w.getAllocation(C, view.allocationId)).state).toBe("released");
    await settle(2 * 3600_000);
    await settle(10_000);
    expect(await code(w.getAllocation(C, view.allocationId))).toBe("NOT_FOUND");
    expect((await w.listAllocations(C, null, 10)).items).toHaveLength(0);
    expect(await code(w.createAllocation(C, { clientRequestId: "b", workloadClass: "small" }))).toBe("OK");
  });
});

describe("reservation, leases and metrics", () => {
  test("a retried reservation returns the earlier answer and counts capacity once", async () => {
    const { w, clock } = world();
    await enroll(w, "a");
    await new Agent(w, "a", clock).poll();
    const spec = { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"0".repeat(64)}` };
    const key = reservationKey("alloc_x", 1, "a");
    const r1 = await w.env.Host.get("a").reserve({
      key,
      allocationId: "alloc_x",
      generation: 1,
      placementId: "plc_1",
      spec,
    });
    const r2 = await w.env.Host.get("a").reserve({
      key,
      allocationId: "alloc_x",
      generation: 1,
      placementId: "plc_2",
      spec,
    });
    expect(r1).toEqual({ accepted: true, placementId: "plc_1" });
    expect(r2).toEqual({ accepted: true, placementId: "plc_1" });
    expect((await w.hosts(O))[0]!.free.cpuMillis).toBe(1000);
    const r3 = await w.env.Host.get("a").reserve({
      key: reservationKey("alloc_y", 1, "a"),
      allocationId: "alloc_y",
      generation: 1,
      placementId: "plc_3",
      spec: { ...spec, cpuMillis: 1500 },
    });
    expect(r3).toEqual({ accepted: false, code: "INSUFFICIENT_CPU" });
  });

  test("heartbeats renew leases, except for placements the scheduler wants gone", async () => {
    const { w, clock, settle } = world();
    await enroll(w, "a");
    const a = new Agent(w, "a", clock);
    await a.poll();
    const x = await w.createAllocation(C, { clientRequestId: "x", workloadClass: "small" });
    const y = await w.createAllocation(C, { clientRequestId: "y", workloadClass: "small" });
    await settle();
    const px = await a.run(x.view.allocationId);
    const py = await a.run(y.view.allocationId);
    await w.releaseAllocation(C, y.view.allocationId);
    await settle(20_000);
    const r = await a.poll();
    expect(Date.parse(r.leases[px.placementId]!)).toBe(clock.wallMs() + 30_000);
    expect(Date.parse(r.leases[py.placementId]!)).toBeLessThan(Date.parse(r.leases[px.placementId]!) - 15_000);
    const metrics = await w.metrics(O);
    expect(metrics).toContain(
      'bb_allocation_transitions_total{reason="CLIENT_RELEASE",state="releasing",workload_class="small"} 1',
    );
    expect(metrics).not.toContain("alloc_");
  });
});
