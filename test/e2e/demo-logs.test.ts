/**
 * Issue 13, done when: `bb allocation logs --follow` shows the demo job's
 * output from a second terminal. The real demo (scheduler, agent, QEMU
 * guest) runs its sample job; as soon as it prints the allocation and the
 * command to follow it, a second process runs that command. It prints every
 * line the demo showed as the job's output, in order, and ends by itself
 * once the demo released the allocation.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cleanUpPlacements, runRoleExit, sharedDemoRoot, startRole, vmTestSkipReason } from "../support/processes.ts";

const skip = vmTestSkipReason();
if (skip) console.log(`SKIP test/e2e/demo-logs.test.ts: ${skip}`);
const d = skip ? describe.skip : describe;

const work = mkdtempSync(join(tmpdir(), "bb-demo-logs-"));
const root = join(work, "root");
const allocations = join(root, "demo", "agent", "allocations");

afterAll(async () => {
  await cleanUpPlacements(allocations);
  rmSync(work, { recursive: true, force: true });
}, 60_000);

d("the demo job's output from a second terminal", () => {
  test("bb allocation logs --follow prints what the demo printed as job output, then exits", async () => {
    sharedDemoRoot(root);
    const log = join(work, "demo.log");
    const demo = startRole(["dev", "demo", "--root", root], log).proc;
    const killer = setTimeout(() => demo.kill("SIGKILL"), 540_000);
    try {
      let m: RegExpExecArray | null = null;
      for (let i = 0; i < 2_700 && !m && demo.exitCode === null; i++) {
        m = /BB_CONFIG=(\S+) bb allocation logs (alloc_[0-9a-f]{32}) --follow/.exec(readFileSync(log, "utf8"));
        if (!m) await Bun.sleep(200);
      }
      expect(m, readFileSync(log, "utf8").slice(-3000)).not.toBeNull();
      // The second terminal: the command the demo printed, as a separate process.
      const {
        code,
        stdout: out,
        out: both,
      } = await runRoleExit(["allocation", "logs", m![2]!, "--follow"], { BB_CONFIG: m![1]! });
      expect(await demo.exited, readFileSync(log, "utf8").slice(-3000)).toBe(0);
      expect(code, both).toBe(0);
      const shown = readFileSync(log, "utf8")
        .split("\n")
        .filter((l) => l.startsWith("job  │ "))
        .map((l) => l.slice("job  │ ".length));
      expect(shown.length).toBeGreaterThanOrEqual(5);
      expect(shown).toContain("job: tests passed");
      const lines = out.replaceAll("\r", "").split("\n");
      // The job's own lines, as the demo showed them, without the guest's markers.
      expect(lines.slice(0, shown.length), out).toEqual(shown);
      expect(out).not.toContain("BEACHBALL_JOB");
    } finally {
      clearTimeout(killer);
      if (demo.exitCode === null && demo.signalCode === null) demo.kill("SIGKILL");
    }
    expect(existsSync(allocations) ? readdirSync(allocations) : []).toEqual([]);
  }, 720_000);
});
