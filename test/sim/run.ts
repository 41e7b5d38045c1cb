/**
 * `bun run sim --seeds N [--from S] [--workers W]` runs N seeds (split over
 * W processes); `bun run sim --seed S` replays one seed exactly (same trace
 * hash). `--inject-bug` turns on the deliberately injected scheduler bug
 * ("release capacity on lease expiry"), `--inject-agent-bug` the agent bug
 * ("start a VM whose execution lease expired", src/agent/debug.ts),
 * `--inject-connections-bug` the scheduler bug "replace without fencing the
 * old generation's grants" (CONNECTIONS_NOT_FENCED switched off);
 * `--stop-on-violation` ends at the first violating seed (of any worker). Prints `N seeds,
 * V with violations`; exits 1 on any violation.
 */
import { tmpdir } from "node:os";
import { existsSync } from "node:fs";
import { parseArgs } from "node:util";
import { runSimulation } from "./world.ts";

const { values } = parseArgs({
  options: {
    seeds: { type: "string" },
    seed: { type: "string" },
    from: { type: "string", default: "1" },
    workers: { type: "string", default: "1" },
    "inject-bug": { type: "boolean", default: false },
    "inject-agent-bug": { type: "boolean", default: false },
    "inject-connections-bug": { type: "boolean", default: false },
    "inject-resume-bug": { type: "boolean", default: false },
    "stop-on-violation": { type: "boolean", default: false },
    verbose: { type: "boolean", default: false },
  },
});
const from = values.seed ? Number(values.seed) : Number(values.from);
const count = values.seed ? 1 : Number(values.seeds ?? 100);
const workers = Math.max(1, Math.min(Number(values.workers), count));
const started = performance.now();

if (workers > 1 && !values.seed) {
  const per = Math.ceil(count / workers);
  const procs = Array.from({ length: workers }, (_, i) => {
    const n = Math.min(per, count - i * per);
    const args = [process.argv[1]!, "--seeds", String(n), "--from", String(from + i * per)];
    if (values["inject-bug"]) args.push("--inject-bug");
    if (values["inject-agent-bug"]) args.push("--inject-agent-bug");
    if (values["inject-connections-bug"]) args.push("--inject-connections-bug");
    if (values["inject-resume-bug"]) args.push("--inject-resume-bug");
    if (values["stop-on-violation"]) args.push("--stop-on-violation");
    if (values.verbose) args.push("--verbose");
    return Bun.spawn([process.execPath, ...args], { stdout: "pipe", stderr: "inherit" });
  });
  let failed = 0;
  let ran = 0;
  let stopped = false;
  // With --stop-on-violation, the first violating worker ends the run: the others are stopped (by PID, ours).
  const outs = await Promise.all(
    procs.map(async (p) => {
      let text = "";
      const decoder = new TextDecoder();
      for await (const chunk of p.stdout as ReadableStream<Uint8Array>) {
        text += decoder.decode(chunk, { stream: true });
        if (values["stop-on-violation"] && !stopped && /^seed \d+: \d+ violation/m.test(text)) {
          stopped = true;
          for (const q of procs) if (q !== p) q.kill();
        }
      }
      return text;
    }),
  );
  await Promise.all(procs.map((p) => p.exited));
  for (const out of outs) {
    for (const line of out.split("\n")) {
      const m = /^(\d+) seeds, (\d+) with violations/.exec(line);
      if (m) {
        ran += Number(m[1]);
        failed += Number(m[2]);
      } else if (line.trim()) console.log(line);
    }
  }
  for (const out of outs)
    if (stopped && !/^\d+ seeds, \d+ with violations/m.test(out))
      failed += /^seed \d+: \d+ violation/m.test(out) ? 1 : 0;
  console.log(
    `${ran} seeds, ${failed} with violations, ${Math.round(performance.now() - started)} ms${stopped ? " (stopped at the first violation)" : ""}`,
  );
  process.exitCode = failed ? 1 : 0;
} else {
  const base = existsSync("/dev/shm") ? `/dev/shm/bb-sim-${process.pid}` : `${tmpdir()}/bb-sim-${process.pid}`;
  let failed = 0;
  let ran = 0;
  for (let seed = from; seed < from + count; seed++) {
    ran++;
    const r = await runSimulation({
      seed,
      baseDir: base,
      injectBug: values["inject-bug"],
      injectAgentBug: values["inject-agent-bug"],
      injectConnectionsBug: values["inject-connections-bug"],
      injectResumeBug: values["inject-resume-bug"],
    });
    if (r.violations.length) {
      failed++;
      console.log(`seed ${seed}: ${r.violations.length} violation(s), trace ${r.traceHash}`);
      for (const v of r.violations.slice(0, 5)) console.log(`  ${v}`);
      if (values["stop-on-violation"]) break;
    } else if (values.verbose || count === 1)
      console.log(`seed ${seed}: ok, trace ${r.traceHash}, ${JSON.stringify(r.stats)}`);
  }
  console.log(`${ran} seeds, ${failed} with violations, ${Math.round(performance.now() - started)} ms`);
  process.exitCode = failed ? 1 : 0;
}
