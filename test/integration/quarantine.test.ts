/**
 * Restart safety (spec "Agent runtime and local state"): a starting agent
 * inventories Beachball-owned namespaces, quarantines one it does not know
 * (reporting it, never deleting it), and the host turns unschedulable.
 * Needs root (network namespaces); skips with a printed reason otherwise.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import { vmTestSkipReason } from "../support/processes.ts";
import { joinScheduler } from "../../src/agent/join.ts";
import { AgentDaemon } from "../../src/agent/daemon.ts";
import { listPlacementNetworks } from "../../src/agent/isolation/placementNet.ts";

const skip = vmTestSkipReason();
if (skip) console.log(`SKIP test/integration/quarantine.test.ts: ${skip}`);
const d = skip ? describe.skip : describe;
const foreign = `bb-foreign${process.pid}`;
let s: TestScheduler | null = null;
let agent: AgentDaemon | null = null;
const dir = mkdtempSync(join(tmpdir(), "bb-quar-"));

d("quarantine on startup", () => {
  afterAll(async () => {
    await agent?.stop();
    await s?.stop();
    Bun.spawnSync(["ip", "netns", "delete", foreign]);
    rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  test("a foreign bb- namespace and a stray allocation directory are reported, kept, and make the host unschedulable", async () => {
    s = await startTestScheduler();
    const t = await s.operator.enrollmentToken("quar-host");
    await joinScheduler({ schedulerUrl: s.url, token: t.token, dataDir: join(dir, "agent"), imageDirs: [] });
    expect(Bun.spawnSync(["ip", "netns", "add", foreign]).exitCode).toBe(0);
    mkdirSync(join(dir, "agent", "allocations", "bb-strayfffffffffff"), { recursive: true });
    agent = await AgentDaemon.start({ dataDir: join(dir, "agent") });
    let host = null;
    for (let i = 0; i < 100; i++) {
      host = (await s.operator.hosts()).find((h) => h.hostId === "quar-host");
      if (host?.heartbeatAt && host.unschedulable.includes("ISOLATION_UNHEALTHY")) break;
      await Bun.sleep(100);
    }
    expect(host?.unschedulable).toContain("ISOLATION_UNHEALTHY");
    const { view } = await s.controller.create({ clientRequestId: "q-1", workloadClass: "ci-small" });
    await Bun.sleep(300);
    expect((await s.controller.get(view.allocationId)).state).toBe("pending");
    expect(await listPlacementNetworks()).toContain(foreign);
    expect(existsSync(join(dir, "agent", "allocations", "bb-strayfffffffffff"))).toBe(true);
    await s.controller.release(view.allocationId);
  }, 60_000);
});
