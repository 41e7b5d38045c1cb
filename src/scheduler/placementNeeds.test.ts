/**
 * What a placement round asks the directory for beyond the stored spec
 * (src/scheduler/objects/allocationPlacement.ts): the architecture comes from
 * the allocation's workload class (default SUPPORTED_ARCHITECTURE) and the
 * agent protocol version from AGENT_PROTOCOL_VERSION (src/protocol/
 * platform.ts), never from a literal in the object (issue 19, "x86_64 and
 * 1.0 hard-coded in placement"). The last test drives the real objects: a
 * class that needs another architecture is never placed on an x86_64 host.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AGENT_PROTOCOL_VERSION, SUPPORTED_ARCHITECTURE } from "../protocol/platform.ts";
import { newAllocationRecord } from "../domain/reconcile.ts";
import { DEFAULT_TIMEOUTS } from "../domain/allocation.ts";
import { placementNeedsOf, placementRequestOf } from "./objects/allocationPlacement.ts";
import { SchedulerWorker } from "./worker.ts";
import type { DeploymentManifest } from "./manifest.ts";
import { FakeClock } from "../protocol/fakeClock.ts";
import { SeededRandom } from "../../test/sim/rng.ts";
import { InProcessAgent } from "../../test/support/inProcessAgent.ts";
import { TEST_CONTROLLER as C, TEST_OPERATOR as O, testManifest } from "../../test/support/testManifest.ts";

const SPEC = { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"0".repeat(64)}` };
const CAP = { cpuMillis: 4000, memoryMiB: 4096, ephemeralDiskMiB: 8192, maxPlacements: 8 };
const dirs: string[] = [];
const workers: SchedulerWorker[] = [];

afterEach(async () => {
  for (const w of workers.splice(0)) await w.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("placement needs: architecture and agent protocol version", () => {
  test("default: SUPPORTED_ARCHITECTURE and AGENT_PROTOCOL_VERSION (also for a class the manifest no longer lists)", () => {
    const want = { architecture: SUPPORTED_ARCHITECTURE, agentProtocolVersion: AGENT_PROTOCOL_VERSION };
    expect(placementNeedsOf({})).toEqual(want);
    expect(placementNeedsOf(undefined)).toEqual(want);
    expect(SUPPORTED_ARCHITECTURE).toBe("x86_64");
    expect(AGENT_PROTOCOL_VERSION).toBe("1.0");
  });

  test("a non-default architecture and protocol version flow into the directory request", () => {
    expect(placementNeedsOf({ architecture: "aarch64" }).architecture).toBe("aarch64");
    const r = newAllocationRecord(
      { allocationId: "a1", identity: C.id, clientRequestId: "r", workloadClass: "arm", ttlMs: 60_000, network: null },
      1_000,
      DEFAULT_TIMEOUTS,
    );
    const req = placementRequestOf(r, SPEC, { architecture: "aarch64", agentProtocolVersion: "2.3" }, DEFAULT_TIMEOUTS);
    expect(req.architecture).toBe("aarch64");
    expect(req.agentProtocolVersion).toBe("2.3");
    expect(req.resources).toEqual({ cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, slots: 1 });
    expect(req.waiter).toEqual({ createdAtMs: 1_000, untilMs: 1_000 + DEFAULT_TIMEOUTS.pendingTimeoutMs });
  });

  test("through the real objects: a class needing aarch64 waits for capacity while an x86_64 host takes the default class", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-needs-"));
    dirs.push(dir);
    const base = testManifest();
    const small = base.workloadClasses["small"]!;
    const manifest: DeploymentManifest = {
      ...base,
      workloadClasses: { small, arm: { ...small, architecture: "aarch64" } },
    };
    const clock = new FakeClock({ wallMs: 1_900_000_000_000 });
    const w = new SchedulerWorker({
      dataDir: dir,
      manifest,
      publicUrl: "http://t",
      clock,
      random: new SeededRandom(3),
    });
    workers.push(w);
    w.runtime.recover();
    const t = await w.createEnrollmentToken(O, "h1", 3600);
    await w.enroll({
      token: t.token,
      capacity: CAP,
      region: "t",
      architecture: SUPPORTED_ARCHITECTURE,
      agentProtocolVersion: AGENT_PROTOCOL_VERSION,
      vmmDriver: "t",
    });
    // The host heartbeats (a host that never did is not schedulable).
    await new InProcessAgent(w, "h1", clock, { inventory: CAP }).poll();
    const arm = await w.createAllocation(C, { clientRequestId: "arm-1", workloadClass: "arm" });
    const x86 = await w.createAllocation(C, { clientRequestId: "x86-1", workloadClass: "small" });
    w.runtime.tick();
    await w.runtime.idle();
    const armView = await w.getAllocation(C, arm.view.allocationId);
    expect(armView.state).toBe("pending");
    expect(armView.hostId).toBeNull();
    expect(armView.conditions).toContain("NO_CAPACITY");
    expect((await w.getAllocation(C, x86.view.allocationId)).hostId).toBe("h1");
  });
});
