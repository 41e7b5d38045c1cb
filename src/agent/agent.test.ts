/**
 * The agent (agent.ts) over its fake ports: commands drive a placement
 * through prepared, running and absent; a lease that expired before the
 * launch refuses the start; a graceful stop records nothing and leaves the
 * VM for the next agent, which adopts it.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AgentCommand, PlacementUpdate, PollResponse } from "../protocol/agent.ts";
import { Agent, type AgentPorts } from "./agent.ts";
import type { LogSink } from "./ports.ts";
import type { LogChunk, LogPushResponse } from "../protocol/logs.ts";
import { appendFileSync } from "node:fs";
import { JOB_START_MARKER } from "../protocol/guest.ts";
import { FakeControlChannel, FakeTimeline, FixedHostProbe, MemoryLog, type FakeRequest } from "./fakePorts.ts";
import { FakeVmHost, FakeVmmDriver, steadyBehaviour } from "./vmm/fakeDriver.ts";
import { FakeIsolation } from "./isolation/fakeIsolation.ts";
import { FakeImages } from "./image/fakeImages.ts";
import { AgentStore } from "./store.ts";
import type { AgentDebug } from "./debug.ts";

const work = mkdtempSync(join(tmpdir(), "bb-agent-test-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const EPOCH = "e".repeat(32);
const SPEC = { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"a".repeat(64)}` };

/** One agent process over fakes on a shared fake machine; `resolveMs` delays the n-th image resolve (0-based). */
function rig(
  name: string,
  resolveMs: (n: number) => number = () => 0,
  bootMs: number | null = 500,
  exitCodeOnShutdown?: number,
) {
  const dir = join(work, name);
  const tl = new FakeTimeline(1_800_000_000_000);
  const launches: string[] = [];
  const host = new FakeVmHost(
    tl.timers("host"),
    steadyBehaviour({
      launchMs: 20,
      bootMs,
      shutdownMs: 100,
      ...(exitCodeOnShutdown !== undefined ? { exitCodeOnShutdown } : {}),
    }),
    (vm) => launches.push(vm.instanceId),
  );
  let resolves = 0;
  const isolation = new FakeIsolation();
  let n = 0;
  const incarnation = async (debug?: AgentDebug, logSink?: LogSink) => {
    const timers = tl.timers(`agent-${++n}`);
    const channel = new FakeControlChannel(timers);
    const driver = new FakeVmmDriver(host, timers);
    const log = new MemoryLog();
    const ports: AgentPorts = {
      clock: tl.clock,
      timers,
      random: { bytes: (k) => new Uint8Array(k).fill(7) },
      log,
      probe: new FixedHostProbe(),
      channel,
      driver,
      isolation,
      images: new FakeImages(timers, join(dir, "image"), { resolveMs: () => resolveMs(resolves++) }),
      lock: () => () => {},
      selfChecks: async () => [],
      inventory: async () => [],
      vmmSelfCheck: async () => ({ status: "pass", detail: "fake" }),
      ...(logSink ? { logSink } : {}),
    };
    const agent = await Agent.start(
      {
        hostId: "h1",
        bootId: "boot-1",
        dbPath: join(dir, "agent.db"),
        allocationsDir: join(dir, "allocations"),
        guestBootTimeoutMs: 5_000,
        consoleBudgetBytes: 4096,
        ...(debug ? { debug } : {}),
      },
      ports,
    );
    return { agent, channel, driver, log };
  };
  return { tl, host, isolation, incarnation, dir, launches };
}

/** Stops an agent while fake time moves (its last flush waits on fake timers). */
async function stop(tl: FakeTimeline, agent: Agent): Promise<void> {
  const stopped = agent.stop();
  await tl.advance(10_000);
  await stopped;
}

function command(type: AgentCommand["type"], leaseExpiresAtMs: number, generation = 1): AgentCommand {
  const kind = type === "ensure_present" ? "present" : type === "ensure_running" ? "running" : "absent";
  return {
    commandId: `plc-1:${kind}:${generation}`,
    type,
    allocationId: "alc-1",
    placementId: "plc-1",
    generation,
    agentEpoch: EPOCH,
    leaseExpiresAt: new Date(leaseExpiresAtMs).toISOString(),
    spec: SPEC,
  };
}

/** Answers every waiting request: polls with `commands` (once), messages with nothing; returns the updates sent. */
async function exchange(
  tl: FakeTimeline,
  ch: FakeControlChannel,
  commands: AgentCommand[] = [],
  leases: Record<string, string> = {},
): Promise<PlacementUpdate[]> {
  const sent: PlacementUpdate[] = [];
  let pending = commands;
  for (let i = 0; i < 20; i++) {
    await tl.advance(10);
    const reqs: FakeRequest[] = ch.take();
    if (!reqs.length && !pending.length) break;
    for (const r of reqs) {
      sent.push(...r.payload.updates);
      const resp: PollResponse = {
        agentEpoch: EPOCH,
        commands: r.type === "poll" ? pending : [],
        deliveries: [],
        leases,
      };
      if (r.type === "poll") pending = [];
      r.resolve(resp);
    }
  }
  return sent;
}

test("commands drive a placement to running and then absent, each transition reported once", async () => {
  const { tl, host, isolation, incarnation } = rig("lifecycle");
  const { agent, channel } = await incarnation();
  const lease = () => tl.clock.wallMs() + 30_000;
  const states: string[] = [];
  const seqs = new Set<number>();
  const record = (us: PlacementUpdate[]) => {
    for (const u of us) if (!seqs.has(u.seq)) seqs.add(u.seq), states.push(u.state);
  };
  record(await exchange(tl, channel, [command("ensure_present", lease())]));
  record(await exchange(tl, channel, [command("ensure_running", lease())]));
  await tl.advance(1_000);
  record(await exchange(tl, channel));
  expect(host.running()).toHaveLength(1);
  expect(states).toEqual(["preparing", "prepared", "starting", "running"]);
  record(await exchange(tl, channel, [command("ensure_absent", lease())]));
  await tl.advance(1_000);
  record(await exchange(tl, channel));
  expect(states.slice(4)).toEqual(["stopping", "absent"]);
  expect(host.running()).toHaveLength(0);
  expect(isolation.networks.size).toBe(0);
  await stop(tl, agent);
});

test("lost exit code: a workload that traps TERM and exits 5 during release has its code reported, before absent", async () => {
  const { tl, incarnation } = rig("exit-while-stopping", () => 0, 500, 5);
  const { agent, channel } = await incarnation();
  const lease = () => tl.clock.wallMs() + 30_000;
  const sent: PlacementUpdate[] = [];
  sent.push(...(await exchange(tl, channel, [command("ensure_present", lease())])));
  sent.push(...(await exchange(tl, channel, [command("ensure_running", lease())])));
  await tl.advance(1_000);
  sent.push(...(await exchange(tl, channel, [command("ensure_absent", lease())])));
  await tl.advance(1_000);
  sent.push(...(await exchange(tl, channel)));
  const seen = [...new Map(sent.map((u) => [u.seq, u])).values()];
  const exited = seen.findIndex((u) => u.workloadExitCode !== undefined);
  expect(seen[exited]).toMatchObject({ state: "stopping", workloadExitCode: 5 });
  expect(exited).toBeLessThan(seen.findIndex((u) => u.state === "absent"));
  await stop(tl, agent);
});

test("a lease that expires while Start resolves the image refuses the launch", async () => {
  // The second resolve (Start's) takes 40 s while the scheduler is unreachable, outlasting the 30 s lease.
  const { tl, incarnation, launches } = rig("lease", (n) => (n === 0 ? 0 : 40_000));
  const { agent, channel } = await incarnation();
  await exchange(tl, channel, [command("ensure_present", tl.clock.wallMs() + 30_000)]);
  await exchange(tl, channel, [command("ensure_running", tl.clock.wallMs() + 30_000)]);
  await tl.advance(45_000);
  const sent = await exchange(tl, channel);
  expect(launches).toEqual([]);
  expect(sent.find((u) => u.state === "error")?.errorCode).toBe("LEASE_EXPIRED");
  await stop(tl, agent);
});

test("a VMM left running after a failed start is stopped once its lease ends (found by the simulation, seed 946)", async () => {
  const { tl, host, incarnation } = rig("boot-timeout", () => 0, null);
  const { agent, channel } = await incarnation();
  await exchange(tl, channel, [command("ensure_present", tl.clock.wallMs() + 30_000)]);
  await exchange(tl, channel, [command("ensure_running", tl.clock.wallMs() + 30_000)]);
  await tl.advance(6_000); // the guest never sends GuestReady: GUEST_BOOT_TIMEOUT, the VMM still runs
  const sent = await exchange(tl, channel);
  expect(sent.find((u) => u.state === "error")?.errorCode).toBe("GUEST_BOOT_TIMEOUT");
  expect(host.running()).toHaveLength(1);
  await tl.advance(30_000); // no renewal reaches the agent (the scheduler is unreachable)
  expect(host.running()).toHaveLength(0);
  await stop(tl, agent);
});

test("a graceful stop records nothing, leaves the VM running, and the next agent adopts it", async () => {
  const { tl, host, incarnation, dir } = rig("graceful");
  const first = await incarnation();
  await exchange(tl, first.channel, [command("ensure_present", tl.clock.wallMs() + 60_000)]);
  await exchange(tl, first.channel, [command("ensure_running", tl.clock.wallMs() + 60_000)]);
  await tl.advance(1_000);
  await exchange(tl, first.channel);
  expect(host.running()).toHaveLength(1);
  const stopped = first.agent.stop();
  await tl.advance(10_000);
  await stopped;
  expect(host.running()).toHaveLength(1);
  const store = new AgentStore(join(dir, "agent.db"));
  expect(store.pendingUpdates(100)).toEqual([]);
  expect(store.placement("plc-1")?.observed).toBe("running");
  store.close();
  const second = await incarnation();
  const sent = await exchange(tl, second.channel);
  await tl.advance(1_000);
  sent.push(...(await exchange(tl, second.channel)));
  expect(sent.filter((u) => u.state === "error")).toEqual([]);
  expect(second.log.lines.some((l) => l.includes("adopted a running VM"))).toBe(true);
  expect(host.running()).toHaveLength(1);
  await stop(tl, second.agent);
});

test("silent placements: one structured line per placement transition with the IDs as fields, and metrics by state, time in state and failure code", async () => {
  const { tl, incarnation } = rig("transitions");
  const { agent, channel, log } = await incarnation();
  const lease = () => tl.clock.wallMs() + 30_000;
  await exchange(tl, channel, [command("ensure_present", lease())]);
  await exchange(tl, channel, [command("ensure_running", lease())]);
  await tl.advance(1_000);
  await exchange(tl, channel);
  const running = await agent.metrics.text();
  expect(running).toContain('bb_agent_placements{state="running"} 1');
  await exchange(tl, channel, [command("ensure_absent", lease())]);
  await tl.advance(1_000);
  await exchange(tl, channel);
  const lines = log.records.filter((r) => r.msg === "placement transition");
  expect(lines.map((r) => `${r.fields["from"]}>${r.fields["state"]}`)).toEqual([
    "accepted>preparing",
    "preparing>prepared",
    "prepared>starting",
    "starting>running",
    "running>stopping",
    "stopping>absent",
  ]);
  for (const r of lines) {
    expect(r.fields).toMatchObject({ allocationId: "alc-1", placementId: "plc-1", generation: 1 });
    expect(typeof r.fields["durationMs"]).toBe("number");
  }
  // No message of the agent embeds a variable: every line's text is one of a closed set, the rest is fields.
  for (const r of log.records) expect(r.msg).not.toContain("plc-1");
  const text = await agent.metrics.text();
  expect(text).toContain('bb_agent_placement_transitions_total{from="starting",state="running"} 1');
  expect(text).toContain('bb_agent_placement_state_seconds_count{state="starting"} 1');
  expect(text).not.toContain('bb_agent_placements{state="running"}');
  await stop(tl, agent);
});

test("silent failures: a placement that turns error is one warning line with its code and a failure counted by code", async () => {
  const { tl, incarnation } = rig("failure-metrics", (n) => (n === 0 ? 0 : 40_000));
  const { agent, channel, log } = await incarnation();
  await exchange(tl, channel, [command("ensure_present", tl.clock.wallMs() + 30_000)]);
  await exchange(tl, channel, [command("ensure_running", tl.clock.wallMs() + 30_000)]);
  await tl.advance(45_000);
  await exchange(tl, channel);
  const err = log.records.find((r) => r.msg === "placement transition" && r.fields["state"] === "error");
  expect(err).toMatchObject({
    level: "warn",
    fields: { from: "prepared", errorCode: "LEASE_EXPIRED", placementId: "plc-1" },
  });
  expect(await agent.metrics.text()).toContain('bb_agent_placement_failures_total{code="LEASE_EXPIRED"} 1');
  await stop(tl, agent);
});

/** The scheduler's log intake as a test double: each placement's stream by offset. */
class StreamSink implements LogSink {
  streams = new Map<string, string>();
  async push(chunks: LogChunk[]): Promise<LogPushResponse> {
    return {
      results: chunks.map((c) => {
        const cur = this.streams.get(c.placementId) ?? "";
        const off = c.offset ?? Buffer.byteLength(cur);
        const next = Buffer.concat([Buffer.from(cur).subarray(0, off), Buffer.from(c.text)]).toString();
        this.streams.set(c.placementId, next);
        return { placementId: c.placementId, streamEnd: Buffer.byteLength(next) };
      }),
    };
  }
}

test("output lost across an agent restart: what the job printed while no agent ran is shipped by the next agent", async () => {
  const { tl, host, incarnation } = rig("logs-restart");
  const sink = new StreamSink();
  const first = await incarnation(undefined, sink);
  await exchange(tl, first.channel, [command("ensure_present", tl.clock.wallMs() + 60_000)]);
  await exchange(tl, first.channel, [command("ensure_running", tl.clock.wallMs() + 60_000)]);
  await tl.advance(1_000);
  await exchange(tl, first.channel);
  const console = host.running()[0]!.spec.consoleLogPath;
  appendFileSync(console, `[    1.000000] booted\n${JOB_START_MARKER}\nbefore the restart\n`);
  await tl.advance(3_000);
  expect(sink.streams.get("plc-1")).toEndWith("before the restart\n");
  await stop(tl, first.agent);
  appendFileSync(console, "while no agent ran\n");
  const second = await incarnation(undefined, sink);
  await exchange(tl, second.channel);
  appendFileSync(console, "after the restart\n");
  await tl.advance(3_000);
  await exchange(tl, second.channel);
  expect(sink.streams.get("plc-1")).toEndWith("before the restart\nwhile no agent ran\nafter the restart\n");
  await stop(tl, second.agent);
});
