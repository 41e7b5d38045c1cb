/**
 * Two agents on one machine (issue 18, item 18): host-a and host-b, each
 * with its own data dir, against one scheduler. host-a's placement
 * resources (a real network namespace and cgroup, and a VMM process: a
 * stand-in whose command line carries QEMU's `-name` marker, because
 * booting a guest needs a built image that is not available to this test)
 * are named with host-a's tag, so host-b reports them and stays healthy.
 * A resource of host-b's own that nobody owns is quarantined and, once it
 * is gone, the quarantine clears without a restart. host-b's endpoint on
 * host-a's UDP port fails with a startup error naming the port and the fix.
 * Needs root (namespaces, cgroups); skips with a printed reason otherwise.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import { vmTestSkipReason } from "../support/processes.ts";
import { joinScheduler } from "../../src/agent/join.ts";
import { AgentDaemon } from "../../src/agent/daemon.ts";
import { agentPaths } from "../../src/agent/config.ts";
import { MemoryLog } from "../../src/agent/fakePorts.ts";
import { placementDirName } from "../../src/agent/resourceNames.ts";
import {
  createPlacementCgroup,
  removePlacementCgroup,
  type PlacementCgroup,
} from "../../src/agent/isolation/cgroups/placementCgroup.ts";
import { DEFAULT_CGROUP_POLICY } from "../../src/agent/isolation/cgroups/policy.ts";
import { placementLimits } from "../../src/agent/isolation/cgroups/limits.ts";

const skip = vmTestSkipReason();
if (skip) console.log(`SKIP test/integration/two-agents.test.ts: ${skip}`);
const d = skip ? describe.skip : describe;
const tag = `${process.pid}`;
/** host-a's placement name, as host-a's agent names it. */
const nameA = placementDirName(`host-a-${tag}`, "alloc-a", "pl-a", 1);
/** An orphan of host-b's own (named as host-b's agent would name it). */
const orphanB = placementDirName(`host-b-${tag}`, "alloc-gone", "pl-gone", 1);
const dir = mkdtempSync(join(tmpdir(), "bb-two-"));
let s: TestScheduler | null = null;
let agentB: AgentDaemon | null = null;
let vmmStandIn: ReturnType<typeof Bun.spawn> | null = null;
let cgroupA: PlacementCgroup | null = null;
let udpA: { port: number; close(): void } | null = null;
const logB = new MemoryLog(5_000);

async function hostB() {
  return (await s!.operator.hosts()).find((h) => h.hostId === `host-b-${tag}`);
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined | null | false>, ms: number): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}\nagent log:\n${logB.lines.slice(-30).join("\n")}`);
    await Bun.sleep(200);
  }
}

d("two agents on one machine", () => {
  afterAll(async () => {
    await agentB?.stop();
    await s?.stop();
    vmmStandIn?.kill(9);
    if (cgroupA) removePlacementCgroup(cgroupA);
    udpA?.close();
    for (const n of [nameA, orphanB]) Bun.spawnSync(["ip", "netns", "delete", n]);
    rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  test("another host's VMM, namespace and cgroup are ignored (reported, not counted), an emptied quarantine clears without a restart, and the endpoint's port clash names the port", async () => {
    s = await startTestScheduler();
    // host-a's running VM, as its agent leaves it on the machine.
    expect(Bun.spawnSync(["ip", "netns", "add", nameA]).exitCode).toBe(0);
    cgroupA = createPlacementCgroup(
      nameA,
      placementLimits({ cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 64 }, DEFAULT_CGROUP_POLICY),
      DEFAULT_CGROUP_POLICY,
    );
    vmmStandIn = Bun.spawn(
      [
        "bash",
        "-c",
        `exec -a qemu-system-x86_64 /usr/bin/python3 -c 'import time; time.sleep(600)' -M microvm -name ${nameA}`,
      ],
      { stdout: "ignore", stderr: "ignore" },
    );
    // host-a's endpoint holds its UDP port.
    const held = await Bun.udpSocket({ hostname: "127.0.0.1", port: 0 });
    udpA = held;
    // host-b's own orphan: quarantined until it is gone.
    expect(Bun.spawnSync(["ip", "netns", "add", orphanB]).exitCode).toBe(0);
    await Bun.sleep(100); // the stand-in's exec has replaced bash's command line

    const dataB = join(dir, "b");
    const t = await s.operator.enrollmentToken(`host-b-${tag}`);
    await joinScheduler({ schedulerUrl: s.url, token: t.token, dataDir: dataB, imageDirs: [] });
    const cfgPath = agentPaths(dataB).config;
    const cfg = JSON.parse(readFileSync(cfgPath, "utf8")) as Record<string, unknown>;
    cfg["connections"] = {
      verificationKeys: { k1: Buffer.alloc(32, 7).toString("base64") },
      listenAddress: "127.0.0.1",
      listenPort: held.port,
    };
    writeFileSync(cfgPath, JSON.stringify(cfg));
    agentB = await AgentDaemon.start({ dataDir: dataB, log: logB });

    // The port clash: one startup error naming the port and what to do.
    const clash = logB.records.find((r) => r.msg.startsWith("host endpoint not started"));
    expect(String(clash?.fields["error"])).toContain(`UDP port ${held.port} on 127.0.0.1 is already in use`);
    expect(String(clash?.fields["error"])).toContain("its own connections.listenPort");

    // host-a's resources: reported as another host's, never quarantined.
    const others = logB.records
      .filter((r) => r.msg.startsWith("resource of another host"))
      .map((r) => `${r.fields["kind"]} ${r.fields["name"]}`);
    expect(others).toContain(`netns ${nameA}`);
    expect(others).toContain(`cgroup ${nameA}`);
    expect(others.some((o) => o.startsWith(`process ${nameA} (pid `))).toBe(true);
    const quarantined = logB.records
      .filter((r) => r.msg.startsWith("foreign resource quarantined"))
      .map((r) => `${r.fields["kind"]} ${r.fields["name"]}`);
    expect(quarantined).toContain(`netns ${orphanB}`);
    expect(quarantined.filter((q) => q.includes(nameA))).toEqual([]);
    // Other developers' VMs on a shared machine, named the old way (untagged), count as this host's: noted, not asserted.
    const noise = quarantined.filter((q) => q !== `netns ${orphanB}`);
    if (noise.length)
      console.log(`two-agents: untagged resources of others on this machine are quarantined too: ${noise.join(", ")}`);
    const first = await waitFor(
      "host-b's first heartbeat",
      async () => ((await hostB())?.heartbeatAt ? hostB() : null),
      20_000,
    );
    expect(first!.unschedulable).toContain("ISOLATION_UNHEALTHY");

    // The operator resolves the orphan: host-b turns healthy without a restart; host-a's VM is still there.
    expect(Bun.spawnSync(["ip", "netns", "delete", orphanB]).exitCode).toBe(0);
    await waitFor(
      "the orphan leaving the quarantine",
      async () =>
        logB.records.some((r) => r.msg === "quarantined resource gone" && r.fields["resource"] === `netns ${orphanB}`),
      60_000,
    );
    if (noise.length) return; // the rest of the quarantine is someone else's, still there
    const healthy = await waitFor(
      "host-b healthy again",
      async () => {
        const h = await hostB();
        return h && !h.unschedulable.includes("ISOLATION_UNHEALTHY") ? h : null;
      },
      60_000,
    );
    expect(healthy.unschedulable).toEqual([]);
    expect(logB.records.some((r) => r.msg.startsWith("quarantine cleared"))).toBe(true);
    expect(vmmStandIn.exitCode).toBeNull();
  }, 120_000);
});
