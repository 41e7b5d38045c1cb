/**
 * `control_config` (guestControlConfig.ts) from the agent to its guests,
 * through the real Agent, reconciler, placement ops and guest session over
 * the fake VMM host (a named double that speaks the real NDJSON protocol):
 * a guest gets the deployment's connection verification keys once it is
 * ready; a restarted agent with other keys hands them to the VM it adopts;
 * a deployment with no keys sends nothing; keys the schema refuses stop the
 * agent at start with a clear message. Also `clock` (GuestSession.keepClock):
 * sent to a ready guest and again to the VM a restarted agent adopts.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AgentCommand, PollResponse } from "../protocol/agent.ts";
import { MAX_CONTROL_VERIFICATION_KEYS } from "../protocol/control.ts";
import { GUEST_CLOCK_SYNC_INTERVAL_MS } from "../protocol/guest.ts";
import { connectionPublicKeyOf } from "../protocol/connectionSignature.ts";
import { Agent, type AgentPorts } from "./agent.ts";
import { controlConfigMessage, controlConfigProblem } from "./guestControlConfig.ts";
import { FakeControlChannel, FakeTimeline, FixedHostProbe, MemoryLog } from "./fakePorts.ts";
import { FakeVmHost, FakeVmmDriver, steadyBehaviour } from "./vmm/fakeDriver.ts";
import { FakeIsolation } from "./isolation/fakeIsolation.ts";
import { FakeImages } from "./image/fakeImages.ts";

const work = mkdtempSync(join(tmpdir(), "bb-control-config-test-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const EPOCH = "c".repeat(32);
const SPEC = { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"a".repeat(64)}` };
/** A verification key from a fixed seed (32 bytes of `b`). */
const key = (b: number) => connectionPublicKeyOf(Buffer.alloc(32, b).toString("base64"));

function rig(name: string) {
  const dir = join(work, name);
  const tl = new FakeTimeline(1_800_000_000_000);
  const host = new FakeVmHost(tl.timers("host"), steadyBehaviour({ launchMs: 20, bootMs: 500, shutdownMs: 100 }));
  const isolation = new FakeIsolation();
  let n = 0;
  const incarnation = async (keys?: Record<string, string>) => {
    const timers = tl.timers(`agent-${++n}`);
    const channel = new FakeControlChannel(timers);
    const log = new MemoryLog();
    const ports: AgentPorts = {
      clock: tl.clock,
      timers,
      random: { bytes: (k) => new Uint8Array(k).fill(7) },
      log,
      probe: new FixedHostProbe(),
      channel,
      driver: new FakeVmmDriver(host, timers),
      isolation,
      images: new FakeImages(timers, join(dir, "image")),
      lock: () => () => {},
      selfChecks: async () => [],
      inventory: async () => [],
      vmmSelfCheck: async () => ({ status: "pass", detail: "fake" }),
    };
    const agent = await Agent.start(
      {
        hostId: "h1",
        bootId: "boot-1",
        dbPath: join(dir, "agent.db"),
        allocationsDir: join(dir, "allocations"),
        guestBootTimeoutMs: 5_000,
        consoleBudgetBytes: 4096,
        ...(keys ? { controlVerificationKeys: keys } : {}),
      },
      ports,
    );
    return { agent, channel, log };
  };
  /** Answers every waiting poll with `commands` (once) until the agent goes quiet. */
  const exchange = async (ch: FakeControlChannel, commands: AgentCommand[] = []) => {
    let pending = commands;
    for (let i = 0; i < 20; i++) {
      await tl.advance(10);
      const reqs = ch.take();
      if (!reqs.length && !pending.length) break;
      for (const r of reqs) {
        const resp: PollResponse = {
          agentEpoch: EPOCH,
          commands: r.type === "poll" ? pending : [],
          deliveries: [],
          leases: {},
        };
        if (r.type === "poll") pending = [];
        r.resolve(resp);
      }
    }
  };
  const command = (type: AgentCommand["type"]): AgentCommand => ({
    commandId: `plc-1:${type}:1`,
    type,
    allocationId: "alc-1",
    placementId: "plc-1",
    generation: 1,
    agentEpoch: EPOCH,
    leaseExpiresAt: new Date(tl.clock.wallMs() + 60_000).toISOString(),
    spec: SPEC,
  });
  /** Brings plc-1 to running under `a`. */
  const run = async (a: { channel: FakeControlChannel }) => {
    await exchange(a.channel, [command("ensure_present")]);
    await exchange(a.channel, [command("ensure_running")]);
    await tl.advance(1_000);
    await exchange(a.channel);
  };
  const stop = async (agent: Agent) => {
    const stopped = agent.stop();
    await tl.advance(10_000);
    await stopped;
  };
  return { tl, host, incarnation, exchange, run, stop };
}

test("a ready guest is sent the deployment's connection verification keys, exactly once", async () => {
  const { host, incarnation, run, stop } = rig("ready");
  const keys = { "conn-1": key(1), "conn-2": key(2) };
  const a = await incarnation(keys);
  await run(a);
  const [vm] = host.running();
  expect(vm?.state).toBe("ready");
  expect(vm!.controlConfigs).toEqual([keys]);
  await stop(a.agent);
});

test("keys that change with an agent restart reach the VM the new agent adopts", async () => {
  const { tl, host, incarnation, exchange, run, stop } = rig("adopt");
  const first = await incarnation({ "conn-1": key(1) });
  await run(first);
  await stop(first.agent); // a graceful stop leaves the VM running
  const rotated = { "conn-1": key(1), "conn-3": key(3) };
  const second = await incarnation(rotated);
  await exchange(second.channel);
  await tl.advance(1_000);
  await exchange(second.channel);
  expect(second.log.lines.some((l) => l.includes("adopted a running VM"))).toBe(true);
  const [vm] = host.running();
  expect(vm!.controlConfigs).toEqual([{ "conn-1": key(1) }, rotated]);
  await stop(second.agent);
});

test("the agent's wall clock reaches a ready guest and, after a restart, the VM the new agent adopts (clock)", async () => {
  const { tl, host, incarnation, exchange, run, stop } = rig("clock");
  const first = await incarnation();
  await run(first);
  const [vm] = host.running();
  expect(vm!.clocks).toHaveLength(1);
  expect(Math.abs(vm!.clocks[0]! - tl.clock.wallMs())).toBeLessThan(5_000);
  await tl.advance(GUEST_CLOCK_SYNC_INTERVAL_MS);
  expect(vm!.clocks).toHaveLength(2);
  await stop(first.agent); // a graceful stop leaves the VM running
  const sentByFirst = vm!.clocks.length;
  const second = await incarnation();
  await exchange(second.channel);
  await tl.advance(1_000);
  await exchange(second.channel);
  expect(second.log.lines.some((l) => l.includes("adopted a running VM"))).toBe(true);
  expect(vm!.clocks.length).toBeGreaterThan(sentByFirst);
  const age = tl.clock.wallMs() - vm!.clocks.at(-1)!;
  expect(age).toBeGreaterThanOrEqual(0);
  expect(age).toBeLessThan(GUEST_CLOCK_SYNC_INTERVAL_MS);
  await stop(second.agent);
});

test("without keys (no private networking) no control_config is sent", async () => {
  const { host, incarnation, run, stop } = rig("none");
  const a = await incarnation();
  await run(a);
  expect(host.running()[0]!.controlConfigs).toEqual([]);
  await stop(a.agent);
});

test("unbounded control_config: more keys than MAX_CONTROL_VERIFICATION_KEYS, or a malformed one, stop the agent at start", async () => {
  const many = Object.fromEntries(
    Array.from({ length: MAX_CONTROL_VERIFICATION_KEYS + 1 }, (_, i) => [`k${i}`, key(i + 1)]),
  );
  expect(controlConfigProblem(many)).toContain("MAX_CONTROL_VERIFICATION_KEYS");
  expect(controlConfigProblem({ "bad id!": key(1) })).toContain("verificationKeys");
  expect(controlConfigProblem({ k: "A".repeat(43) })).toContain("Ed25519");
  expect(controlConfigProblem({})).toContain("no connection verification key");
  expect(() => controlConfigMessage(many)).toThrow(expect.objectContaining({ code: "INTERNAL" }));
  const { incarnation } = rig("many");
  await expect(incarnation(many)).rejects.toThrow("MAX_CONTROL_VERIFICATION_KEYS");
  const max = Object.fromEntries(
    Array.from({ length: MAX_CONTROL_VERIFICATION_KEYS }, (_, i) => [`k${i}`, key(i + 1)]),
  );
  expect(controlConfigMessage(max)).toEqual({ type: "control_config", verificationKeys: max });
});
