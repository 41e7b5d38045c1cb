/**
 * The fencing simulation (issue: "Scheduler authority … proven by seeded
 * simulation"). Runs the real scheduler objects (SchedulerWorker, SQLite
 * files on tmpfs) and the real host agent (src/agent/agent.ts with its
 * placement reconciler, src/agent/reconcile/reconciler.ts) over fake
 * ports (simHost.ts), all on one fake timeline, and injects a seeded
 * schedule of faults: dropped, duplicated and delayed messages; agent
 * crashes (VMs keep running), agent stalls (a frozen process) and host
 * reboots (VMs die); VMMs that fail every start for a while (the host must
 * turn VMM_START_FAILING and recover); VMs that crash,
 * guests that never boot, images that fail or resolve slowly; scheduler
 * crashes between persisting intent and the side effect; partitions that
 * make hosts lost; clock skew; operator fencing and replacement
 * authorizations; connection grants asked for and revoked, applied by a
 * stand-in host endpoint (simEndpoint.ts). After every step it checks the
 * invariants (two of them: an allocation's private address is never routed
 * through two hosts or generations at once, and an allocation never moves
 * past a generation that a host still routes); after the faults stop it
 * checks that every allocation settles (a replacement held for
 * CONNECTIONS_NOT_FENCED only until its old grant may have expired).
 */
import { createHash } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { BeachballError } from "../../src/protocol/errors.ts";
import type { Envelope, PollResponse } from "../../src/protocol/agent.ts";
import { SchedulerWorker } from "../../src/scheduler/worker.ts";
import { devConnections, tokenDigest, type DeploymentManifest, type Identity } from "../../src/scheduler/manifest.ts";
import type { ConnectionsSection } from "../../src/scheduler/manifestSchema.ts";
import { FakeTimeline, settle, type FakeRequest } from "../../src/agent/fakePorts.ts";
import type { AgentDebug } from "../../src/agent/debug.ts";
import { SeededRandom } from "./rng.ts";
import { SimHost, type ExecutionRecord } from "./simHost.ts";
import { SimEndpoint } from "./simEndpoint.ts";
import { GRANT_EXPIRY_GRACE_MS } from "../../src/domain/grants.ts";

/** Options of one simulated run. */
export interface SimOptions {
  seed: number;
  /** Parent directory for the run's SQLite files (tmpfs recommended). */
  baseDir: string;
  /** Inject the scheduler bug "release capacity on lease expiry". */
  injectBug?: boolean;
  /** Inject the agent bug "start a VM whose execution lease expired". */
  injectAgentBug?: boolean;
  /** Inject the scheduler bug "replace without fencing the old generation's grants" (no CONNECTIONS_NOT_FENCED). */
  injectConnectionsBug?: boolean;
  /** Inject the scheduler bug "capacity not taken back on resume" (issue 21). */
  injectResumeBug?: boolean;
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
  stats: {
    steps: number;
    allocations: number;
    grants: number;
    schedulerCrashes: number;
    agentCrashes: number;
    reboots: number;
    stalls: number;
    vmmOutages: number;
    vmmFailingSteps: number;
    vmCrashes: number;
    fenced: number;
    replaced: number;
    executions: number;
    envelopes: number;
    pauses: number;
    suspends: number;
    resumes: number;
    forks: number;
  };
}

const CONTROLLER: Identity = { id: "controller:sim", role: "controller" };
const OPERATOR: Identity = { id: "operator:sim", role: "operator" };
const HOST_CAPACITY = { cpuMillis: 3000, memoryMiB: 1024, ephemeralDiskMiB: 8192, maxPlacements: 2 };

function manifest(connections: ConnectionsSection): DeploymentManifest {
  return {
    version: 1,
    region: "sim",
    principals: [
      { id: CONTROLLER.id, role: "controller", tokenSha256: tokenDigest("sim-controller") },
      { id: OPERATOR.id, role: "operator", tokenSha256: tokenDigest("sim-operator") },
    ],
    workloadClasses: {
      small: {
        cpuMillis: 1000,
        memoryMiB: 256,
        ephemeralDiskMiB: 1024,
        imageDigest: `sha256:${"0".repeat(64)}`,
        suspendable: true,
      },
      medium: { cpuMillis: 2000, memoryMiB: 512, ephemeralDiskMiB: 2048, imageDigest: `sha256:${"0".repeat(64)}` },
    },
    limits: {
      maxConcurrentAllocationsPerController: 1000,
      maxRegisteredHosts: 16,
      controllerRequestsPerSecond: 1000,
      deploymentRequestsPerSecond: 1000,
    },
    hostEnrollment: { autoActivate: true },
    connections,
  };
}

interface Delayed {
  at: number;
  req: FakeRequest;
  resp: PollResponse;
  host: SimHost;
  /** The agent process the response is for (a later process never sees it). */
  channel: SimHost["channel"];
}

/** Fake VM and image behaviour drawn from the seed: launch, boot and shutdown times, guests that never boot, images that fail or are slow. */
function behaviourFor(rng: SeededRandom, faults: () => boolean) {
  return {
    launchMs: () => 50 + rng.int(1_500),
    bootMs: () => (faults() && rng.chance(0.04) ? null : 500 + rng.int(6_000)),
    shutdownMs: () => 100 + rng.int(2_000),
    resolveMs: () =>
      faults() && rng.chance(0.04) ? null : faults() && rng.chance(0.05) ? 20_000 + rng.int(40_000) : rng.int(2_500),
  };
}

/** Runs one seed. Never throws for an invariant violation: it reports it. */
export async function runSimulation(opts: SimOptions): Promise<SimResult> {
  const rng = new SeededRandom(opts.seed);
  const schedRng = new SeededRandom(opts.seed ^ 0x5eed5eed);
  const timeline = new FakeTimeline(1_800_000_000_000);
  const stepMs = opts.stepMs ?? 3_000;
  const faultSteps = opts.faultSteps ?? 80;
  const healSteps = opts.healSteps ?? 100;
  const dir = join(opts.baseDir, `seed-${opts.seed}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const violations: string[] = [];
  const trace = createHash("sha256");
  const stats = {
    steps: 0,
    allocations: 0,
    grants: 0,
    schedulerCrashes: 0,
    agentCrashes: 0,
    reboots: 0,
    stalls: 0,
    vmmOutages: 0,
    vmmFailingSteps: 0,
    vmCrashes: 0,
    fenced: 0,
    replaced: 0,
    executions: 0,
    envelopes: 0,
    pauses: 0,
    suspends: 0,
    resumes: 0,
    forks: 0,
  };
  let faults = true;
  const timeouts = {
    leaseMs: 30_000,
    pendingTimeoutMs: 180_000,
    provisioningTimeoutMs: 120_000,
    hostCheckIntervalMs: 5_000,
    leaseGraceMs: 20_000,
    defaultTtlMs: 3_600_000,
  };
  // Private networking on: addresses at create, grants, their fencing across replacement (the key file lives in the seed's directory).
  const connections = devConnections(dir);
  const grantRng = new SeededRandom(opts.seed ^ 0x6a1170);
  const makeWorker = () => {
    const w = new SchedulerWorker({
      dataDir: join(dir, "scheduler"),
      manifest: manifest(connections),
      publicUrl: "http://sim",
      clock: timeline.clock,
      random: schedRng,
      timeouts,
      faultHook: () => faults && rng.chance(0.004),
      ...(opts.injectBug || opts.injectConnectionsBug || opts.injectResumeBug
        ? {
            debug: {
              ...(opts.injectBug ? { releaseCapacityOnLeaseExpiry: true } : {}),
              ...(opts.injectConnectionsBug ? { connectionsNotFenced: true } : {}),
              ...(opts.injectResumeBug ? { resumeWithoutCapacity: true } : {}),
            },
          }
        : {}),
    });
    w.runtime.recover();
    return w;
  };
  let worker = makeWorker();
  const restartIfCrashed = async () => {
    if (!worker.runtime.isCrashed) return;
    stats.schedulerCrashes++;
    trace.update(`crash@${timeline.clock.wallMs()}`);
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

  const agentDebug: AgentDebug | undefined = opts.injectAgentBug ? { startDespiteExpiredLease: true } : undefined;
  const hosts: SimHost[] = [];
  const endpoints = new Map<string, SimEndpoint>();
  const grants: { allocationId: string; grantId: string }[] = [];
  /** Each fork's allocation → the host its parent was suspended on when it was forked. */
  const forkHosts = new Map<string, string>();
  /** Per allocation, until when a grant it asked for may still be applied (expiry plus the grace). */
  const grantMayLive = new Map<string, number>();
  /** Allocations whose client asked for a grant before. */
  const returning: string[] = [];
  const fenced = new Set<string>();
  const downUntil = new Map<string, number>();
  const executions: ExecutionRecord[] = [];
  const behaviour = behaviourFor(rng, () => faults);
  for (let i = 0; i < (opts.hosts ?? 3); i++) {
    const hostId = `host-${i}`;
    const t = await sched((w) => w.createEnrollmentToken(OPERATOR, hostId, 3600));
    await sched((w) =>
      w.enroll({
        token: t!.token,
        capacity: HOST_CAPACITY,
        region: "sim",
        architecture: "x86_64",
        agentProtocolVersion: "1.0",
        vmmDriver: "fake",
      }),
    );
    const h = new SimHost(hostId, join(dir, hostId), timeline, rng, behaviour, (r) => executions.push(r), agentDebug);
    await h.boot();
    hosts.push(h);
    endpoints.set(hostId, new SimEndpoint(hostId, h.clock, 10 + i));
  }
  /** The agent process of `h` died: so did its endpoint's peers. */
  const lose = (h: SimHost) => endpoints.get(h.hostId)!.lose();
  const allocations: string[] = [];
  let createAttempts = 0;
  let pendingCreate: { clientRequestId: string; workloadClass: string } | null = null;
  const delayed: Delayed[] = [];
  const lastConsuming = new Map<string, Set<string>>();

  /** Carries every envelope the host's agent sent to the scheduler, with the network's faults. */
  const exchange = async (h: SimHost) => {
    if (!h.alive || !h.channel || h.stalled) return;
    for (const req of h.channel.take()) {
      if (h.partitioned || (faults && rng.chance(0.04))) {
        trace.update("drop-req");
        // Most failures are refused connections the agent sees at once; the rest vanish and its own timeout fails them.
        if (rng.chance(0.75)) req.reject(new Error("connection refused"));
        continue;
      }
      if (fenced.has(h.hostId)) {
        req.reject(new Error("scheduler answered 401: the host credential was revoked"));
        continue;
      }
      const env: Envelope = {
        protocolVersion: "1.0",
        messageId: rng.id("msg"),
        hostId: h.hostId,
        agentEpoch: req.agentEpoch,
        sentAt: new Date(h.clock.wallMs()).toISOString(),
        type: req.type,
        payload: { ...req.payload, ...(req.type === "poll" ? { waitMs: 0 } : {}) },
      };
      // The host endpoint rides in the agent's envelopes: its connectivity_update and its configure_connection acks.
      const ep = endpoints.get(h.hostId)!.outgoing(req.agentEpoch);
      env.payload = {
        ...env.payload,
        ...(ep.connectivity ? { connectivity: ep.connectivity } : {}),
        acks: [...env.payload.acks, ...ep.acks],
      };
      const copies = faults && rng.chance(0.05) ? 2 : 1;
      stats.envelopes += copies;
      let resp: PollResponse | null = null;
      let failure: Error | null = null;
      for (let c = 0; c < copies; c++) {
        try {
          resp = (await sched((w) => w.agentEnvelope(h.hostId, env))) ?? resp;
        } catch (e) {
          if (e instanceof BeachballError) failure = e;
          else throw e;
        }
      }
      if (!resp) {
        req.reject(failure ?? new Error("scheduler crashed mid-request"));
        continue;
      }
      if (faults && rng.chance(0.04)) {
        trace.update("drop-resp");
        if (rng.chance(0.75)) req.reject(new Error("connection reset"));
        continue;
      }
      if (faults && rng.chance(0.08)) {
        delayed.push({
          at: timeline.clock.wallMs() + stepMs * (1 + rng.int(5)),
          req,
          resp,
          host: h,
          channel: h.channel,
        });
        continue;
      }
      req.resolve(resp);
      endpoints.get(h.hostId)!.receive(resp);
    }
    await settle();
  };

  /** Checks each VMM launch against the scheduler's authority at the moment the agent decided it. */
  const checkExecutions = async (step: number) => {
    for (const r of executions.splice(0)) {
      stats.executions++;
      const v = await sched((w) => w.env.Allocation.get(r.allocationId).get(CONTROLLER.id));
      if (v && v.generation !== r.generation)
        violations.push(
          `step ${step}: ${r.hostId} started a VM for ${r.allocationId} generation ${r.generation}, but the allocation is at generation ${v.generation}`,
        );
      if (v && (v.state === "released" || v.state === "failed"))
        violations.push(`step ${step}: ${r.hostId} started a VM for ${r.allocationId}, which is ${v.state}`);
      const ps = await sched((w) => w.env.Host.get(r.hostId).placementStatus(r.placementId));
      // The scheduler's lease only grows, and the agent only learns leases from it: a correct agent launches only before it ends.
      if (ps?.exists && ps.leaseExpiresAtMs <= r.agentNowMs)
        violations.push(
          `step ${step}: ${r.hostId} started a VM for ${r.placementId} at ${r.agentNowMs} (its clock), but its execution lease ended at ${ps.leaseExpiresAtMs}`,
        );
    }
  };

  const totalSteps = faultSteps + healSteps;
  for (let step = 0; step < totalSteps; step++) {
    stats.steps++;
    if (step === faultSteps) {
      faults = false;
      for (const h of hosts) {
        h.partitioned = false;
        h.skewMs = 0;
        h.vmmBrokenUntilMs = 0;
      }
    }
    await timeline.advance(stepMs);
    await checkExecutions(step);
    worker.runtime.tick();
    await sched(async () => undefined);

    // Controller.
    if (faults && createAttempts < (opts.maxAllocations ?? 6) && rng.chance(0.15)) {
      // A controller retries with the same body after a failure; each new request gets a new clientRequestId.
      pendingCreate ??= {
        clientRequestId: `req-${createAttempts}`,
        workloadClass: rng.chance(0.7) ? "small" : "medium",
      };
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
      if (v && v.conditions.includes("replacement_blocked"))
        await sched((w) => w.authorizeReplacement(CONTROLLER, id, v.generation)).catch(() => null);
    }

    // Controller: pause, suspend and resume (issue 21). Refusals (INVALID_STATE while one is under way, NOT_SUSPENDABLE for the medium class) are expected.
    if (faults && allocations.length && rng.chance(0.3)) {
      const id = rng.pick(allocations);
      const v = await sched((w) => w.getAllocation(CONTROLLER, id));
      const expected = (e: unknown) => {
        if (e instanceof BeachballError) return null;
        throw e;
      };
      if (v?.state === "ready") {
        const suspend = rng.chance(0.5);
        const r = await sched((w) =>
          suspend ? w.suspendAllocation(CONTROLLER, id) : w.pauseAllocation(CONTROLLER, id),
        ).catch(expected);
        if (r) stats[suspend ? "suspends" : "pauses"]++;
      } else if (v?.state === "suspended" && v.hostId && rng.chance(0.5)) {
        // A fork of the suspended VM: new allocations on its host, restored from its snapshot (a retry reuses the request ID).
        const f = await sched((w) =>
          w.forkAllocation(CONTROLLER, id, {
            clientRequestId: `fork-${id.slice(-6)}-${v.generation}`,
            count: 1 + rng.int(2),
            allowConsumedPayload: true,
          }),
        ).catch(expected);
        if (f) {
          for (const child of f.items) {
            if (!allocations.includes(child.allocationId)) allocations.push(child.allocationId);
            forkHosts.set(child.allocationId, v.hostId!);
          }
          if (f.created) stats.forks += f.items.length;
          stats.allocations = allocations.length;
        }
      } else if (v?.state === "paused" || v?.state === "suspended") {
        if ((await sched((w) => w.resumeAllocation(CONTROLLER, id)).catch(expected)) !== null) stats.resumes++;
      }
    }

    // Controller: connection grants for ready allocations (CONNECTIVITY_UNAVAILABLE, INVALID_STATE and the like are expected refusals), and revocations.
    // Half the time a client that held a grant comes back (as `bb proxy` run again would, after a replacement too).
    if (faults && allocations.length && grantRng.chance(0.2)) {
      const id = returning.length > 0 && grantRng.chance(0.5) ? grantRng.pick(returning) : grantRng.pick(allocations);
      const v = await sched((w) => w.getAllocation(CONTROLLER, id));
      if (v?.state === "ready") {
        if (!returning.includes(id)) returning.push(id);
        const ttlSeconds = 120 + grantRng.int(480);
        // Asked for, so possibly issued even if the answer is lost: a replacement may wait for it until then.
        grantMayLive.set(
          id,
          Math.max(grantMayLive.get(id) ?? 0, timeline.clock.wallMs() + ttlSeconds * 1000 + GRANT_EXPIRY_GRACE_MS),
        );
        const g = await sched((w) =>
          w.createConnectionGrant(CONTROLLER, id, {
            clientPublicKey: Buffer.alloc(32, 200).toString("base64"),
            transport: "tcp",
            ports: [22],
            ttlSeconds,
          }),
        ).catch((e: unknown) => {
          if (e instanceof BeachballError) return null;
          throw e;
        });
        if (g) {
          grants.push({ allocationId: id, grantId: g.grant.payload.grantId });
          stats.grants++;
        }
      }
    }
    if (faults && grants.length && grantRng.chance(0.03)) {
      const g = grantRng.pick(grants);
      await sched((w) => w.revokeConnectionGrant(CONTROLLER, g.allocationId, g.grantId)).catch((e: unknown) => {
        if (!(e instanceof BeachballError)) throw e;
      });
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

    // Hosts.
    for (const h of hosts) {
      if (faults) {
        if (h.alive && rng.chance(0.01)) {
          if (rng.chance(0.2)) {
            h.reboot();
            stats.reboots++;
          } else h.crash();
          lose(h);
          stats.agentCrashes++;
          downUntil.set(h.hostId, timeline.clock.wallMs() + stepMs * (1 + rng.int(4)));
        }
        if (h.alive && !h.stalled && rng.chance(0.01)) {
          h.stall(timeline.clock.wallMs() + stepMs * (3 + rng.int(18)));
          stats.stalls++;
        }
        if (!h.vmmBroken && rng.chance(0.005)) {
          h.vmmBrokenUntilMs = timeline.clock.wallMs() + stepMs * (5 + rng.int(16));
          stats.vmmOutages++;
        }
        const vms = h.vmHost.running();
        if (vms.length && rng.chance(0.01)) {
          h.vmHost.exit(rng.pick(vms), "crashed");
          stats.vmCrashes++;
        }
        if (rng.chance(0.01)) h.partitioned = !h.partitioned;
        if (h.partitioned && rng.chance(0.02)) h.partitioned = false;
        if (rng.chance(0.02)) h.skewMs = rng.chance(0.5) ? 0 : (rng.int(17) - 8) * 1000;
      }
      if (!h.alive && timeline.clock.wallMs() >= (downUntil.get(h.hostId) ?? 0)) await h.boot();
      await exchange(h);
    }
    for (const d of delayed.filter((x) => x.at <= timeline.clock.wallMs())) {
      delayed.splice(delayed.indexOf(d), 1);
      d.req.resolve(d.resp); // ignored if the agent gave up on it (timeout) or died
      if (d.host.alive && d.host.channel === d.channel) endpoints.get(d.host.hostId)!.receive(d.resp);
    }
    await settle();
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
    // A replacement held for CONNECTIONS_NOT_FENCED may wait for its old grant's expiry (a fenced host never acknowledges a revoke), no longer.
    const held =
      v.state === "releasing" &&
      v.conditions.includes("CONNECTIONS_NOT_FENCED") &&
      timeline.clock.wallMs() < (grantMayLive.get(id) ?? 0) + stepMs * 20;
    const settled = ["ready", "paused", "suspended", "released", "failed"].includes(v.state);
    if (!settled && !held) {
      // The last events say where it got stuck.
      const events = (await sched((w) => w.events(CONTROLLER, id, 0, 200)))?.slice(-8) ?? [];
      const tail = events.map((e) => `${e.type}${e.reason ? `(${e.reason})` : ""}@g${e.generation}`).join(", ");
      const local = v.placementId
        ? hosts.map((h) => ({ host: h.hostId, ...h.local(v.placementId!) })).filter((x) => "observed" in x)
        : [];
      violations.push(
        `liveness: ${id} is still ${v.state} (gen ${v.generation}, reason ${v.reason}, conditions ${v.conditions.join("+") || "none"}) ${healSteps * stepMs} ms after the faults stopped; last events: ${tail}; on the agents: ${JSON.stringify(local)}`,
      );
    }
    if (v.generation > 1) stats.replaced++;
  }
  for (const h of hosts) h.close();
  await worker.close();
  rmSync(dir, { recursive: true, force: true });
  return { seed: opts.seed, violations, traceHash: trace.digest("hex").slice(0, 16), stats };

  async function checkStep(step: number): Promise<void> {
    const views = ((await sched((w) => w.hosts(OPERATOR))) ?? []) as Awaited<ReturnType<SchedulerWorker["hosts"]>>;
    const running = new Map<string, string[]>();
    for (const h of hosts) {
      if (fenced.has(h.hostId)) continue;
      let cpu = 0;
      let mem = 0;
      const vms = h.vmHost.running();
      for (const vm of vms) {
        // A paused VM holds its memory, not its CPU (issue 21).
        if (vm.state !== "paused") cpu += vm.spec.vcpus * 1000;
        mem += vm.spec.memoryMiB;
        running.set(vm.identity.allocationId, [
          ...(running.get(vm.identity.allocationId) ?? []),
          `${h.hostId}/g${vm.identity.generation}`,
        ]);
      }
      if (cpu > HOST_CAPACITY.cpuMillis || mem > HOST_CAPACITY.memoryMiB || vms.length > HOST_CAPACITY.maxPlacements)
        violations.push(`step ${step}: ${h.hostId} runs ${vms.length} VMs using ${cpu}m/${mem} MiB: over its capacity`);
    }
    for (const [alloc, where] of running)
      if (where.length > 1)
        violations.push(`step ${step}: allocation ${alloc} has ${where.length} running VMs (${where.join(", ")})`);
    // One private address is never routed through two hosts or two generations at once (fenced hosts included: their peers live until expiry).
    const routed = new Map<string, Set<string>>();
    for (const [hostId, ep] of endpoints)
      for (const [alloc, gens] of ep.applied())
        for (const g of gens) routed.set(alloc, new Set([...(routed.get(alloc) ?? []), `${hostId}/g${g}`]));
    for (const [alloc, where] of routed)
      if (where.size > 1)
        violations.push(
          `step ${step}: allocation ${alloc}'s address is routed through ${[...where].join(" and ")} at once`,
        );
    // An allocation never moves past a generation while a host still holds a grant for it (spec "Revocation and replacement": CONNECTIONS_NOT_FENCED).
    for (const [hostId, ep] of endpoints) {
      for (const [alloc, gens] of ep.applied()) {
        const v = await sched((w) => w.getAllocation(CONTROLLER, alloc));
        const stale = gens.filter((g) => v !== null && v.generation > g);
        if (stale.length)
          violations.push(
            `step ${step}: allocation ${alloc} moved to generation ${v!.generation} while ${hostId} still routes its address for generation ${stale.join(", ")}`,
          );
      }
    }
    // Capacity is taken back before a VM runs again (issue 21): a VM whose vCPUs run is never counted paused or suspended.
    for (const v of views) {
      if (fenced.has(v.hostId)) continue;
      const h = hosts.find((x) => x.hostId === v.hostId)!;
      for (const vm of h.executing()) {
        const p = v.placements.find((x) => x.placementId === vm.identity.placementId);
        if (p && (p.state === "paused" || p.state === "suspended"))
          violations.push(
            `step ${step}: ${v.hostId} runs the vCPUs of ${p.placementId} (gen ${vm.identity.generation}) while the scheduler counts it ${p.state}`,
          );
      }
    }
    // A fork runs only where its parent's snapshot is (issue 21): never a VM of it on another host.
    for (const h of hosts)
      for (const vm of h.executing()) {
        const home = forkHosts.get(vm.identity.allocationId);
        if (home !== undefined && home !== h.hostId)
          violations.push(
            `step ${step}: ${h.hostId} runs a VM of fork ${vm.identity.allocationId}, whose parent was suspended on ${home}`,
          );
      }
    for (const v of views) {
      trace.update(`${v.hostId}:${v.free.cpuMillis}:${v.placements.length}`);
      if (v.unschedulable.includes("VMM_START_FAILING")) stats.vmmFailingSteps++;
      if (v.free.cpuMillis < 0 || v.free.memoryMiB < 0 || v.free.ephemeralDiskMiB < 0 || v.free.slots < 0)
        violations.push(`step ${step}: ${v.hostId} accounting is overcommitted: free ${JSON.stringify(v.free)}`);
      const now = new Set(v.placements.map((p) => p.placementId));
      const before = lastConsuming.get(v.hostId) ?? new Set();
      const h = hosts.find((x) => x.hostId === v.hostId)!;
      for (const id of before) {
        if (now.has(id) || fenced.has(v.hostId)) continue;
        const local = h.observed(id);
        const vm = h.runsVmOf(id);
        if (vm || (local && local !== "absent"))
          violations.push(
            `step ${step}: ${v.hostId} freed the capacity of ${id} before the agent observed it absent (agent: ${local ?? "unknown"}, VM ${vm ? "running" : "gone"})`,
          );
      }
      lastConsuming.set(v.hostId, now);
    }
  }
}
