/**
 * A VMM that cannot start makes the host unhealthy (issue 7, item 2), with
 * a `qemu-system-x86_64` placed first on PATH that prints an error and
 * exits 1 while a flag file exists and runs the real QEMU otherwise:
 * - `bb agent doctor` test-boots the VMM: its `vmm-boot` check fails with
 *   the fake's error (exit 1), and passes with the real QEMU;
 * - a running agent whose VMM starts fail turns the host unschedulable with
 *   VMM_START_FAILING and an alert, and clears it once its self-check (a
 *   real test boot) passes again; the host then takes work.
 * Needs root, qemu-system-x86_64 and `ip`; skips with a reason otherwise.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { buildDevImage } from "../../src/image/devBuild.ts";
import { compileGuest } from "../../src/image/bbBinary.ts";
import { joinScheduler } from "../../src/agent/join.ts";
import { agentPaths } from "../../src/agent/config.ts";
import { startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import {
  cleanUpPlacements,
  runRoleExit,
  startRole,
  stopRole,
  tail,
  vmTestSkipReason,
  waitUntil,
  type Role,
} from "../support/processes.ts";

const skip = vmTestSkipReason();
if (skip) console.log(`SKIP test/integration/vmm-health.test.ts: ${skip}`);
const d = skip ? describe.skip : describe;

const work = mkdtempSync(join(tmpdir(), "bb-vmmh-"));
const fakeBin = join(work, "bin");
const flag = join(work, "qemu-broken");
const dataDir = join(work, "agent");
const env = () => ({ PATH: `${fakeBin}:${process.env["PATH"] ?? ""}` });
let s: TestScheduler | null = null;
let agent: Role | null = null;

function until<T>(what: string, probe: () => Promise<T | null | undefined | false>, ms = 90_000): Promise<T> {
  return waitUntil(what, probe, ms, agent ? [agent.log] : []);
}

d("a VMM that cannot start", () => {
  beforeAll(async () => {
    const realQemu = Bun.which("qemu-system-x86_64")!;
    mkdirSync(fakeBin, { recursive: true });
    writeFileSync(
      join(fakeBin, "qemu-system-x86_64"),
      `#!/bin/sh\nif [ -e '${flag}' ]; then echo "qemu-system-x86_64: fake failure: cannot initialise the accelerator" >&2; exit 1; fi\nexec '${realQemu}' "$@"\n`,
    );
    chmodSync(join(fakeBin, "qemu-system-x86_64"), 0o755);
    const img = await buildDevImage({
      outDir: resolve(".bb/images/dev"),
      cacheDir: resolve(".bb/cache"),
      bbBinaryPath: await compileGuest(),
    });
    s = await startTestScheduler({ imageDigest: img.digest });
    const t = await s.operator.enrollmentToken("vmmh-host");
    await joinScheduler({
      schedulerUrl: s.url,
      token: t.token,
      dataDir,
      imageDirs: [img.dir],
      capacity: { maxPlacements: 2 },
    });
    const cfgPath = agentPaths(dataDir).config;
    writeFileSync(
      cfgPath,
      JSON.stringify({ ...JSON.parse(readFileSync(cfgPath, "utf8")), vmmSelfCheckIntervalMs: 1_000 }),
    );
  }, 600_000);

  afterAll(async () => {
    if (agent) await stopRole(agent);
    await s?.stop();
    await cleanUpPlacements(join(dataDir, "allocations"));
    rmSync(work, { recursive: true, force: true });
  }, 60_000);

  test("bb agent doctor test-boots the VMM: the fake's error fails it, the real QEMU passes", async () => {
    writeFileSync(flag, "");
    const broken = await runRoleExit(["agent", "doctor", "--data-dir", dataDir, "--json"], env());
    expect(broken.code).toBe(1);
    const bootOf = (out: string) =>
      (JSON.parse(out) as { id: string; status: string; detail: string }[]).find((c) => c.id === "vmm-boot")!;
    expect(bootOf(broken.stdout)).toMatchObject({ status: "fail" });
    expect(bootOf(broken.stdout).detail).toContain("fake failure: cannot initialise the accelerator");
    rmSync(flag);
    const fixed = await runRoleExit(["agent", "doctor", "--data-dir", dataDir, "--json"], env());
    expect(bootOf(fixed.stdout)).toMatchObject({ status: "pass" });
  }, 120_000);

  test("repeated start failures make the host unschedulable with VMM_START_FAILING and an alert, until a self-check passes", async () => {
    agent = startRole(["agent", "run", "--data-dir", dataDir], join(work, "agent.log"), env());
    const host = async () => (await s!.operator.hosts()).find((h) => h.hostId === "vmmh-host");
    await until("the host turning healthy and schedulable", async () => {
      const h = await host();
      return h?.health === "healthy" && h.unschedulable.length === 0;
    });
    writeFileSync(flag, "");
    // Two allocations (the host's capacity) fail their starts side by side, so
    // the three failures in a row come sooner on a loaded machine.
    const { view } = await s!.controller.create({ clientRequestId: "vmmh-1", workloadClass: "ci-small" });
    const { view: second } = await s!.controller.create({ clientRequestId: "vmmh-2", workloadClass: "ci-small" });
    const h = await until(
      "VMM_START_FAILING",
      async () => {
        const x = await host();
        return x?.unschedulable.includes("VMM_START_FAILING") ? x : null;
      },
      200_000,
    );
    expect(h.unschedulable).toEqual(["VMM_START_FAILING"]);
    const events = [
      ...(await s!.controller.events(view.allocationId)),
      ...(await s!.controller.events(second.allocationId)),
    ];
    expect(events.filter((e) => e.type === "placement.error").map((e) => e.reason)).toContain("VMM_START_FAILED");
    expect(
      (await s!.operator.alerts()).some(
        (a) => a.type === "host.vmm_start_failing" && a.subject === "vmmh-host" && a.reason === "VMM_START_FAILING",
      ),
    ).toBe(true);
    expect(tail(agent.log)).toContain("VMM_START_FAILING");
    rmSync(flag);
    await until(
      "the condition clearing after a passing self-check",
      async () => (await host())?.unschedulable.length === 0,
    );
    expect(tail(agent.log)).toContain("VMM test boot passed");
    for (const a of [view, second]) {
      await s!.controller.release(a.allocationId).catch(() => undefined);
      await until("the allocation ending", async () =>
        ["released", "failed"].includes((await s!.controller.get(a.allocationId)).state),
      );
    }
  }, 480_000);
});
