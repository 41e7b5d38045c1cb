/**
 * Issue 13, done when: `bb allocation logs --follow` shows the demo job's
 * output from a second terminal. The real demo (scheduler, agent, QEMU
 * guest) runs its sample job; as soon as it prints the allocation and the
 * command to follow it, a second process runs that command. It prints every
 * line the demo showed as the job's output, in order, and ends by itself
 * once the demo released the allocation.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { destroyPlacementNetwork, listPlacementNetworks } from "../../src/agent/isolation/placementNet.ts";
import { pidsMatching, vmTestSkipReason } from "../support/processes.ts";

const skip = vmTestSkipReason();
if (skip) console.log(`SKIP test/e2e/demo-logs.test.ts: ${skip}`);
const d = skip ? describe.skip : describe;

const BUN = resolve("node_modules/.bin/bun");
const BB = resolve("bin/bb.ts");
const work = mkdtempSync(join(tmpdir(), "bb-demo-logs-"));
const root = join(work, "root");
const allocations = join(root, "demo", "agent", "allocations");

afterAll(async () => {
  for (const pid of pidsMatching(root)) process.kill(pid, "SIGKILL");
  const ours = new Set(existsSync(allocations) ? readdirSync(allocations) : []);
  for (const n of await listPlacementNetworks()) if (ours.has(n)) await destroyPlacementNetwork(n);
  rmSync(work, { recursive: true, force: true });
}, 60_000);

d("the demo job's output from a second terminal", () => {
  test("bb allocation logs --follow prints what the demo printed as job output, then exits", async () => {
    // Share the dev image and kernel cache with the other VM tests (built once per checkout).
    mkdirSync(root, { recursive: true });
    for (const dir of ["images", "cache"]) {
      mkdirSync(resolve(".bb", dir), { recursive: true });
      symlinkSync(resolve(".bb", dir), join(root, dir));
    }
    const log = join(work, "demo.log");
    const fd = openSync(log, "a");
    const demo = Bun.spawn([BUN, BB, "dev", "demo", "--root", root], { stdout: fd, stderr: fd, stdin: "ignore", env: { ...process.env, NO_COLOR: "1" } });
    closeSync(fd);
    const killer = setTimeout(() => demo.kill("SIGKILL"), 540_000);
    try {
      let m: RegExpExecArray | null = null;
      for (let i = 0; i < 2_700 && !m && demo.exitCode === null; i++) {
        m = /BB_CONFIG=(\S+) bb allocation logs (alloc_[0-9a-f]{32}) --follow/.exec(readFileSync(log, "utf8"));
        if (!m) await Bun.sleep(200);
      }
      expect(m, readFileSync(log, "utf8").slice(-3000)).not.toBeNull();
      // The second terminal: the command the demo printed, as a separate process.
      const follower = Bun.spawn([BUN, BB, "allocation", "logs", m![2]!, "--follow"], { stdout: "pipe", stderr: "pipe", env: { ...process.env, NO_COLOR: "1", BB_CONFIG: m![1]! } });
      const [out, err, code] = await Promise.all([new Response(follower.stdout).text(), new Response(follower.stderr).text(), follower.exited]);
      expect(await demo.exited, readFileSync(log, "utf8").slice(-3000)).toBe(0);
      expect(code, err).toBe(0);
      const shown = readFileSync(log, "utf8").split("\n").filter((l) => l.startsWith("job  │ ")).map((l) => l.slice("job  │ ".length));
      expect(shown.length).toBeGreaterThanOrEqual(5);
      expect(shown).toContain("job: tests passed");
      const lines = out.replaceAll("\r", "").split("\n");
      const start = lines.indexOf("BEACHBALL_JOB_START");
      expect(start, out).toBeGreaterThanOrEqual(0);
      expect(lines.slice(start + 1, start + 1 + shown.length)).toEqual(shown);
      expect(lines[start + 1 + shown.length]).toBe("BEACHBALL_JOB_EXIT 0");
    } finally {
      clearTimeout(killer);
      if (demo.exitCode === null && demo.signalCode === null) demo.kill("SIGKILL");
    }
    expect(existsSync(allocations) ? readdirSync(allocations) : []).toEqual([]);
  }, 720_000);
});
