/**
 * The fencing simulation (issue: "Scheduler authority … proven by seeded
 * simulation"). Runs the real scheduler objects (SchedulerWorker, SQLite
 * files on tmpfs) under a fake clock with simulated agents, and injects a
 * seeded schedule of faults: dropped, duplicated, delayed and reordered
 * messages; agent crashes (new epoch, VMs keep running); scheduler crashes
 * between persisting intent and the side effect; partitions that make hosts
 * lost; clock skew; operator fencing and replacement authorizations.
 * After every step it checks the invariants; after the faults stop it checks
 * that every allocation settles.
 */
import { createHash } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { BeachballError } from "../../src/protocol/errors.ts";
import type { Envelope, PollResponse } from "../../src/protocol/agent.ts";
import type { AllocationView } from "../../src/protocol/api.ts";
import { SchedulerWorker } from "../../src/scheduler/worker.ts";
import { tokenDigest, type DeploymentManifest, type Identity } from "../../src/scheduler/manifest.ts";
import { HostObject } from "../../src/scheduler/objects/hostObject.ts";
import { AllocationObject } from "../../src/scheduler/objects/allocationObject.ts";
import { FakeClock, SeededRandom } from "./rng.ts";
import { SimAgent, type ExecutionRecord } from "./simAgent.ts";

/** Options of one simulated run. */
export interface SimOptions {
  seed: number;
  /** Parent directory for the run's SQLite files (tmpfs recommended). */
  baseDir: string;
  /** Inject the "release capacity on lease expiry" bug. */
  injectBug?: boolean;
  hosts?: number;
  maxAllocations?: number;
  faultSteps?: number;
  healSteps?: number;
  stepMs?: number;
}

/** What a run found. */
export interface SimResult {
  seed: number;
  violations: string[];
  traceHash: string;
  stats: { steps: number; allocations: number; schedulerCrashes: number; agentCrashes: number; fenced: number; replaced: number; executions: number };
}

const CONTROLLER: Identity = { id: "controller:sim", role: "controller" };
const OPERATOR: Identity = { id: "operator:sim", role: "operator" };
const HOST_CAPACITY = { cpuMillis: 3000, memoryMiB: 1024, ephemeralDiskMiB: 8192, maxPlacements: 2 };

function manifest(): DeploymentManifest {
  return {
    version: 1,
    region: "sim",
    principals: [
      { id: CONTROLLER.id, role: "controller", tokenSha256: tokenDigest("sim-controller") },
      { id: OPERATOR.id, role: "operator", tokenSha256: tokenDigest("sim-operator") },
    ],
    workloadClasses: {
      small: { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"0".repeat(64)}` },
      medium: { cpuMillis: 2000, memoryMiB: 512, ephemeralDiskMiB: 2048, imageDigest: `sha256:${"0".repeat(64)}` },
    },
    limits: { maxConcurrentAllocationsPerController: 1000, maxRegisteredHosts: 16, controllerRequestsPerSecond: 1000, deploymentRequestsPerSecond: 1000 },
    hostEnrollment: { autoActivate: true },
  };
}

interface Delayed {
  at: number;
  hostId: string;
  env: Envelope;
  resp: PollResponse | null;
}

/** Runs one seed. Never throws for an invariant violation: it reports it. */
export async function runSimulation(opts: SimOptions): Promise<SimResult> {
  const rng = new SeededRandom(opts.seed);
  const schedRng = new SeededRandom(opts.seed ^ 0x5eed5eed);
  const clock = new FakeClock(1_800_000_000_000);
  const stepMs = opts.stepMs ?? 3_000;
  const faultSteps = opts.faultSteps ?? 80;
  const healSteps = opts.healSteps ?? 100;
  const dir = join(opts.baseDir, `seed-${opts.seed}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const violations: string[] = [];
  const trace = createHash("sha256");
  const stats = { steps: 0, allocations: 0, schedulerCrashes: 0, agentCrashes: 0, fenced: 0, replaced: 0, executions: 0 };
  let faults = true;
  const timeouts = { leaseMs: 30_000, pendingTimeoutMs: 180_000, provisioningTimeoutMs: 120_000, hostCheckIntervalMs: 5_000, leaseGraceMs: 20_000, defaultTtlMs: 3_600_000 };
  const makeWorker = () => {
    const w = new SchedulerWorker({
      dataDir: dir,
      manifest: manifest(),
      publicUrl: "http://sim",
      clock,
      random: schedRng,
      timeouts,
      faultHook: () => faults && rng.chance(0.004),
      ...(opts.injectBug ? { debug: { releaseCapacityOnLeaseExpiry: true } } : {}),
    });
    w.runtime.recover();
    return w;
  };
  let worker = makeWorker();
  const restartIfCrashed = async () => {
    if (!worker.runtime.isCrashed) return;
    stats.schedulerCrashes++;
    trace.update(`crash@${clock.now()}`);
    await worker.runtime.abandon();
    worker = makeWorker();
  };
  /** Runs a scheduler call; a simulated crash restarts the scheduler and yields null. */
  const sched = async <T>(fn: (w: SchedulerWorker) => Promise<T>): Promise<T | null> => {
    try {
      const r = await fn(worker);
      await worker.runtime.idle();
      await restartIfCrashed();
      return r;
    } catch (e) {
      await worker.runtime.idle().catch(() => undefined);
      if (worker.runtime.isCrashed) {
        await restartIfCrashed();
        return null;
      }
      throw e;
    }
  };

  const agents: SimAgent[] = [];
  const fenced = new Set<string>();
  const downUntil = new Map<string, number>();
  const executions: ExecutionRecord[] = [];
  for (let i = 0; i < (opts.hosts ?? 3); i++) {
    const hostId = `host-${i}`;
    const t = await sched((w) => w.createEnrollmentToken(OPERATOR, hostId, 3600));
    await sched((w) => w.enroll({ token: t!.token, capacity: HOST_CAPACITY, region: "sim", architecture: "x86_64", agentProtocolVersion: "1.0", vmmDriver: "sim" }));
    agents.push(new SimAgent(hostId, rng, () => clock.now(), (r) => executions.push(r)));
  }
  const allocations: string[] = [];
  let createAttempts = 0;
  let pendingCreate: { clientRequestId: string; workloadClass: string } | null = null;
  const delayed: Delayed[] = [];
  const lastConsuming = new Map<string, Set<string>>();

  const exchange = async (a: SimAgent) => {
    if (!a.alive || a.partitioned || fenced.has(a.hostId)) return;
    const env = a.envelope("poll");
    if (faults && rng.chance(0.05)) return trace.update("drop-req");
    const copies = faults && rng.chance(0.05) ? 2 : 1;
    let resp: PollResponse | null = null;
    for (let c = 0; c < copies; c++) {
      try {
        resp = (await sched((w) => w.agentEnvelope(a.hostId, env))) ?? resp;
      } catch (e) {
        if (e instanceof BeachballError && e.code === "STALE_AGENT_EPOCH") a.epoch = "";
        else throw e;
      }
    }
    if (!resp) return;
    if (faults && rng.chance(0.05)) return trace.update("drop-resp");
    if (faults && rng.chance(0.1)) {
      delayed.push({ at: clock.now() + stepMs * (1 + rng.int(5)), hostId: a.hostId, env, resp });
      return;
    }
    a.delivered(env);
    a.handle(resp);
  };

  const totalSteps = faultSteps + healSteps;
  for (let step = 0; step < totalSteps; step++) {
    stats.steps++;
    if (step === faultSteps) {
      faults = false;
      for (const a of agents) {
        a.partitioned = false;
        a.skewMs = 0;
        if (!a.alive) a.alive = true;
      }
    }
    clock.advance(stepMs);
    worker.runtime.tick();
    await sched(async () => undefined);

    // Controller.
    if (faults && createAttempts < (opts.maxAllocations ?? 6) && rng.chance(0.15)) {
      // A controller retries with the same body after a failure; each new request gets a new clientRequestId.
      pendingCreate ??= { clientRequestId: `req-${createAttempts}`, workloadClass: rng.chance(0.7) ? "small" : "medium" };
      const r = await sched((w) => w.createAllocation(CONTROLLER, pendingCreate!));
      if (r) {
        if (!allocations.includes(r.view.allocationId)) allocations.push(r.view.allocationId);
        pendingCreate = null;
        createAttempts++;
      }
      stats.allocations = allocations.length;
    }
    if (faults && allocations.length && rng.chance(0.04)) {
      const id = rng.pick(allocations);
      await sched((w) => w.releaseAllocation(CONTROLLER, id));
    }
    if (faults && allocations.length && rng.chance(0.05)) {
      const id = rng.pick(allocations);
      const v = await sched((w) => w.getAllocation(CONTROLLER, id));
      if (v && v.conditions.includes("replacement_blocked")) await sched((w) => w.authorizeReplacement(CONTROLLER, id, v.generation)).catch(() => null);
    }

    // Operator: fence one lost host at most.
    if (faults && fenced.size === 0 && rng.chance(0.03)) {
      const views = (await sched((w) => w.hosts(OPERATOR))) ?? [];
      const lost = views.find((h) => h.health === "lost" && h.adminState !== "disabled");
      if (lost) {
        await sched((w) => w.setHostState(OPERATOR, lost.hostId, "disabled"));
        fenced.add(lost.hostId);
        stats.fenced++;
      }
    }

    // Agents.
    for (const a of agents) {
      if (faults) {
        if (a.alive && rng.chance(0.01)) {
          a.crash();
          stats.agentCrashes++;
          downUntil.set(a.hostId, clock.now() + stepMs * (1 + rng.int(4)));
        }
        if (rng.chance(0.01)) a.partitioned = !a.partitioned;
        if (a.partitioned && rng.chance(0.02)) a.partitioned = false;
        if (rng.chance(0.02)) a.skewMs = rng.chance(0.5) ? 0 : (rng.int(17) - 8) * 1000;
      }
      if (!a.alive && clock.now() >= (downUntil.get(a.hostId) ?? 0)) a.alive = true;
      if (!a.alive) continue;
      a.progress();
      for (const r of executions.splice(0)) {
        stats.executions++;
        const v = await sched((w) => w.env.Allocation.get(r.allocationId).get(CONTROLLER.id));
        if (v && v.generation !== r.generation) violations.push(`step ${step}: ${r.hostId} started a VM for ${r.allocationId} generation ${r.generation}, but the allocation is at generation ${v.generation}`);
        if (v && (v.state === "released" || v.state === "failed")) violations.push(`step ${step}: ${r.hostId} started a VM for ${r.allocationId}, which is ${v.state}`);
      }
      await exchange(a);
    }
    const due = delayed.filter((x) => x.at <= clock.now());
    for (let i = due.length - 1; i > 0; i--) {
      const j = rng.int(i + 1);
      [due[i], due[j]] = [due[j]!, due[i]!];
    }
    for (const d of due) {
      delayed.splice(delayed.indexOf(d), 1);
      const a = agents.find((x) => x.hostId === d.hostId)!;
      if (!a.alive) continue;
      a.delivered(d.env);
      if (d.resp) a.handle(d.resp);
    }
    if (faults && rng.chance(0.01)) {
      stats.schedulerCrashes++;
      await worker.runtime.abandon();
      worker = makeWorker();
    }

    // Invariants.
    await checkStep(step);
  }

  // Liveness: once the faults stopped, everything settled (every allocation the index knows, even one whose create answer was lost).
  const listed = (await sched((w) => w.listAllocations(CONTROLLER, null, 200)))?.items.map((v) => v.allocationId) ?? [];
  for (const id of new Set([...allocations, ...listed])) {
    const v = await sched((w) => w.getAllocation(CONTROLLER, id));
    if (!v) continue;
    trace.update(`${id}:${v.state}:${v.generation}`);
    if (v.state !== "ready" && v.state !== "released" && v.state !== "failed") violations.push(`liveness: ${id} is still ${v.state} (gen ${v.generation}, reason ${v.reason}) ${healSteps * stepMs} ms after the faults stopped`);
    if (v.generation > 1) stats.replaced++;
  }
  await worker.close();
  rmSync(dir, { recursive: true, force: true });
  return { seed: opts.seed, violations, traceHash: trace.digest("hex").slice(0, 16), stats };

  async function checkStep(step: number): Promise<void> {
    const views = ((await sched((w) => w.hosts(OPERATOR))) ?? []) as Awaited<ReturnType<SchedulerWorker["hosts"]>>;
    const running = new Map<string, string[]>();
    for (const a of agents) {
      if (fenced.has(a.hostId)) continue;
      let cpu = 0;
      let mem = 0;
      for (const vm of a.vms.values()) {
        cpu += vm.cpuMillis;
        mem += vm.memoryMiB;
        running.set(vm.allocationId, [...(running.get(vm.allocationId) ?? []), `${a.hostId}/g${vm.generation}`]);
      }
      if (cpu > HOST_CAPACITY.cpuMillis || mem > HOST_CAPACITY.memoryMiB || a.vms.size > HOST_CAPACITY.maxPlacements)
        violations.push(`step ${step}: ${a.hostId} runs ${a.vms.size} VMs using ${cpu}m/${mem} MiB: over its capacity`);
    }
    for (const [alloc, where] of running) if (where.length > 1) violations.push(`step ${step}: allocation ${alloc} has ${where.length} running VMs (${where.join(", ")})`);
    for (const h of views) {
      trace.update(`${h.hostId}:${h.free.cpuMillis}:${h.placements.length}`);
      if (h.free.cpuMillis < 0 || h.free.memoryMiB < 0 || h.free.ephemeralDiskMiB < 0 || h.free.slots < 0) violations.push(`step ${step}: ${h.hostId} accounting is overcommitted: free ${JSON.stringify(h.free)}`);
      const now = new Set(h.placements.map((p) => p.placementId));
      const before = lastConsuming.get(h.hostId) ?? new Set();
      const agent = agents.find((a) => a.hostId === h.hostId)!;
      for (const id of before) {
        if (now.has(id) || fenced.has(h.hostId)) continue;
        const local = agent.placements.get(id);
        if (agent.vms.has(id) || (local && local.observed !== "absent")) violations.push(`step ${step}: ${h.hostId} freed the capacity of ${id} before the agent observed it absent (agent: ${local?.observed ?? "unknown"}, VM ${agent.vms.has(id) ? "running" : "gone"})`);
      }
      lastConsuming.set(h.hostId, now);
    }
    void HostObject;
    void (null as AllocationView | null);
  }
}
