/**
 * Runs in real VMs (issue 22, "Done when"): a scheduler and an agent as
 * separate `bb` processes, the dev image booted by QEMU (KVM or TCG), two
 * placement slots. Checked: `bb run JOB.sh --class ci-small --follow`
 * prints the job's output and exits with its exit code, and after the VM is
 * released `bb run logs` still prints it; a run over its budget ends
 * timed_out (exit 124) with its VM gone; the scheduler SIGKILLed while
 * runs are being dispatched and started again: every run ends exactly
 * once (one dispatch, one payload consumed), none is lost, and the host's
 * free capacity is all of it again afterwards. Needs root and QEMU.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { SchedulerClient } from "../../src/client/index.ts";
import { compileGuest } from "../../src/image/bbBinary.ts";
import { buildDevImage } from "../../src/image/devBuild.ts";
import {
  cleanUpPlacements,
  freePort,
  kill9,
  pidsMatching,
  publishImageSource,
  runHostId,
  runRole,
  runRoleExit,
  startRole,
  stopRole,
  tail,
  vmTestSkipReason,
  type Role,
  waitUntil,
} from "../support/processes.ts";

const skip = vmTestSkipReason();
if (skip) console.log(`SKIP test/e2e/runs.test.ts: ${skip}`);
const d = skip ? describe.skip : describe;

const HOST = runHostId("runs");
let work: string;
let imageDir: string;
let port: number;
let scheduler: Role;
let agent: Role;
let controller: SchedulerClient;
let operator: SchedulerClient;
const agentDir = () => join(work, "agent");
const startScheduler = () =>
  startRole(
    [
      "scheduler",
      "serve",
      "--data-dir",
      join(work, "scheduler"),
      "--listen",
      `127.0.0.1:${port}`,
      "--dev-image",
      imageDir,
      "--client-config",
      join(work, "client.json"),
    ],
    join(work, "scheduler.log"),
  );
const waitUp = () =>
  waitUntil("the scheduler's /healthz", () => fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok), 30_000, [
    scheduler.log,
  ]);
const bb = (args: string[]) => runRoleExit(args, { BB_CONFIG: join(work, "client.json") });
const logs = () => `agent:\n${tail(agent.log)}\nscheduler:\n${tail(scheduler.log)}`;

d("runs in real VMs", () => {
  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "bb-e2e-runs-"));
    imageDir = resolve(".bb/images/dev");
    const img = await buildDevImage({
      outDir: imageDir,
      cacheDir: resolve(".bb/cache"),
      bbBinaryPath: await compileGuest(),
    });
    port = await freePort();
    scheduler = startScheduler();
    await waitUp();
    const cfg = JSON.parse(readFileSync(join(work, "client.json"), "utf8")) as { token: string; operatorToken: string };
    controller = new SchedulerClient(`http://127.0.0.1:${port}`, cfg.token);
    operator = new SchedulerClient(`http://127.0.0.1:${port}`, cfg.operatorToken);
    publishImageSource(imageDir, img.digest, join(work, "source"));
    const t = await operator.enrollmentToken(HOST);
    await runRole([
      "agent",
      "join",
      "--scheduler",
      `http://127.0.0.1:${port}`,
      "--token",
      t.token,
      "--data-dir",
      agentDir(),
      "--image-dir",
      imageDir,
      "--image-source",
      join(work, "source"),
      "--max-placements",
      "2",
    ]);
    agent = startRole(["agent", "run", "--data-dir", agentDir()], join(work, "agent.log"));
    await waitUntil(
      `a healthy ${HOST}`,
      async () => (await operator.hosts()).some((h) => h.hostId === HOST && h.health === "healthy"),
      60_000,
      [agent.log],
    );
  }, 600_000);

  afterAll(async () => {
    if (agent) await stopRole(agent);
    if (scheduler) await stopRole(scheduler);
    if (!work) return;
    await cleanUpPlacements(join(agentDir(), "allocations"));
    rmSync(work, { recursive: true, force: true });
  }, 60_000);

  test("bb run --follow prints the job's output and exits with its code; the output outlives the VM", async () => {
    const job = join(work, "job.sh");
    // The run ID is a word of the payload that looks like a secret, so the agent redacts it from the output (docs/runs.md).
    writeFileSync(job, 'echo "hello with MODE=$MODE"\necho "id: $BEACHBALL_RUN_ID"\nexit 3\n');
    const r = await bb(["run", job, "--class", "ci-small", "--budget", "600", "-e", "MODE=e2e", "--follow"]);
    expect(r.code, `${r.out}\n${logs()}`).toBe(3);
    const runId = /run (run_[0-9a-f]{32}) queued/.exec(r.out)?.[1];
    expect(runId).toBeDefined();
    expect(r.stdout).toContain("hello with MODE=e2e");
    expect(r.stdout).toContain("id: [redacted]");
    const v = await controller.getRun(runId!);
    expect(v.state).toBe("failed");
    expect(v.exitCode).toBe(3);
    expect((await controller.get(v.allocationId!)).state).toBe("released");
    const again = await bb(["run", "logs", runId!]);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain("hello with MODE=e2e");
    const list = await bb(["run", "list", "--json"]);
    expect((JSON.parse(list.stdout) as { items: { runId: string }[] }).items.map((x) => x.runId)).toContain(runId!);
  }, 600_000);

  test("a run over its budget ends timed_out (exit 124) and its VM is gone", async () => {
    const job = join(work, "slow.sh");
    writeFileSync(job, "echo started\nsleep 100000\n");
    const r = await bb(["run", job, "--class", "ci-small", "--budget", "10", "--follow"]);
    // The budget counts from dispatch, so a slow boot under TCG may leave the job no time to start: either way it times out.
    expect(r.code, `${r.out}\n${logs()}`).toBe(124);
    const runId = /run (run_[0-9a-f]{32}) queued/.exec(r.out)![1]!;
    const v = await controller.getRun(runId);
    expect(v.state).toBe("timed_out");
    expect(v.reason).toBe("BUDGET_EXCEEDED");
    const a = await controller.get(v.allocationId!);
    expect(a.state).toBe("released");
    expect(pidsMatching(v.allocationId!.slice(6))).toEqual([]);
  }, 600_000);

  test("the scheduler SIGKILLed during dispatch: each run runs once, none is lost, capacity is whole again", async () => {
    const registered = (await operator.hosts()).find((h) => h.hostId === HOST)!;
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const { view } = await controller.submitRun({
        clientRequestId: `kill-${i}`,
        workloadClass: "ci-small",
        scriptBase64: Buffer.from(`echo run ${i}\nexit ${i}\n`).toString("base64"),
        budgetSeconds: 600,
      });
      ids.push(view.runId);
    }
    // Kill it while the first two are being placed and booted (the other two wait for a slot).
    await waitUntil("a dispatched run", async () => (await controller.getRun(ids[0]!)).state !== "queued", 30_000, [
      scheduler.log,
    ]);
    await kill9(scheduler);
    scheduler = startScheduler();
    await waitUp();
    for (const [i, id] of ids.entries()) {
      const v = await controller.waitRun(id, { timeoutMs: 480_000 }).catch((e: Error) => {
        throw new Error(`${e.message}\n${logs()}`);
      });
      expect(v.exitCode).toBe(i);
      const events = await controller.runEvents(id, 0, 200);
      expect(events.filter((e) => e.type === "run.dispatched")).toHaveLength(1);
      expect(events.filter((e) => e.type === "run.running")).toHaveLength(1);
      expect(events.filter((e) => e.type === "run.ended")).toHaveLength(1);
      const allocEvents = await controller.events(v.allocationId!, 0, 200);
      expect(allocEvents.filter((e) => e.type === "allocation.created")).toHaveLength(1);
      expect(allocEvents.filter((e) => e.type === "bootstrap.consumed").length).toBeLessThanOrEqual(1);
    }
    const after = await waitUntil(
      "the host's whole capacity free",
      async () => {
        const h = (await operator.hosts()).find((x) => x.hostId === HOST)!;
        return h.free.cpuMillis === registered.free.cpuMillis && h.free.memoryMiB === registered.free.memoryMiB
          ? h
          : null;
      },
      60_000,
      [agent.log],
    );
    expect(after.free).toEqual(registered.free);
  }, 900_000);
});
