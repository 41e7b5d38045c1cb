/**
 * bench/support/runLimit.ts (a helper of the benchmarks, not one: it has no
 * ratio to print): a benchmark that hangs (kind: a benchmark with no bound
 * on its run time, as bench/proxy.ts --relay hung on a dead direct path) is
 * ended by its bound: its cleanups run and it exits 1 saying why; one that
 * finishes first exits as it would have.
 */
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const runLimit = join(import.meta.dir, "runLimit.ts");

async function run(script: string) {
  const p = Bun.spawn([process.execPath, "-e", script], {
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, BB_BENCH_MAX_SECONDS: "1" },
  });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { out, err, code };
}

test("a hanging benchmark is ended at its bound, after its cleanups, with exit 1 and a reason", async () => {
  const r = await run(
    `import { limitRunTime, onRunLimit } from ${JSON.stringify(runLimit)}; limitRunTime("hang", 600); onRunLimit(() => console.log("cleaned")); setInterval(() => {}, 1000);`,
  );
  expect(r.code).toBe(1);
  expect(r.out).toContain("cleaned");
  expect(r.err).toContain("hang: did not finish within 1 s");
});

test("a benchmark that finishes first is not held up by the bound", async () => {
  const r = await run(
    `import { limitRunTime } from ${JSON.stringify(runLimit)}; limitRunTime("quick", 600); console.log("done");`,
  );
  expect([r.code, r.out.trim()]).toEqual([0, "done"]);
});

test("every benchmark under bench/ bounds its own run time (kind: a benchmark added without a bound)", () => {
  const glob = new Bun.Glob("*.ts");
  const unbounded: string[] = [];
  const benchDir = join(import.meta.dir, "..");
  for (const name of glob.scanSync({ cwd: benchDir })) {
    if (name.endsWith(".test.ts")) continue;
    const text = readFileSync(join(benchDir, name), "utf8");
    if (!/^limitRunTime\(/m.test(text)) unbounded.push(name);
  }
  expect(unbounded).toEqual([]);
});
