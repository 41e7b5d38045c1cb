/**
 * Start-up benchmark (issue 19, "Fast start"): how long a compiled `bb`
 * takes to answer `bb --help`, `bb --version` and `bb allocation list`
 * (against a real `bb scheduler serve --dev` this bench starts on a
 * loopback port with a temporary data dir, and ends by its PID), each as a
 * ratio to `bun -e 0` measured in the same run, interleaved round by round
 * so a loaded machine slows both alike. Median of --runs rounds (≥ 10)
 * after one warm-up round. The goal is `bb --help` ≤ 3× `bun -e 0`.
 *
 *   flock /tmp/bb-heavy.lock bun bench/start.ts [--bb PATH]… [--runs 15]
 *
 * Without --bb it times dist/bb, compiling it first (BB_BUILD_FLAGS) when it
 * is missing or older than any file under bin/, src/, native/ or
 * package.json. Give --bb more than once to compare binaries (e.g. main's
 * build and this one) in the same run. Ends on its own.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { compileBb } from "../src/image/bbBinary.ts";
import { limitRunTime, onRunLimit } from "./support/runLimit.ts";

limitRunTime("bench/start.ts", 900);

/** Fewest rounds the median is taken over. */
const MIN_RUNS = 10;
/** How long the scheduler may take to write its client config, in ms. */
const SCHEDULER_START_MS = 30_000;

const ROOT = resolve(import.meta.dir, "..");
const { values } = parseArgs({
  options: { bb: { type: "string", multiple: true }, runs: { type: "string", default: "15" } },
});
const RUNS = Number(values.runs);
if (!Number.isInteger(RUNS) || RUNS < MIN_RUNS) throw new Error(`--runs must be an integer ≥ ${MIN_RUNS}`);

/** Newest modification time (ms) of the files `dist/bb` is built from. */
function newestSource(): number {
  let newest = statSync(join(ROOT, "package.json")).mtimeMs;
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else newest = Math.max(newest, statSync(p).mtimeMs);
    }
  };
  for (const d of ["bin", "src", "native"]) if (existsSync(join(ROOT, d))) walk(join(ROOT, d));
  return newest;
}

async function binaries(): Promise<string[]> {
  if (values.bb?.length) return values.bb.map((p) => resolve(p));
  const out = join(ROOT, "dist/bb");
  if (!existsSync(out) || statSync(out).mtimeMs < newestSource()) {
    console.error(`compiling ${out}`);
    await compileBb(out, join(ROOT, "bin/bb.ts"));
  }
  return [out];
}

/** Wall time (ms) of one run of `argv`; throws when it exits non-zero. */
function time(argv: string[], env: Record<string, string | undefined>): number {
  const t0 = performance.now();
  const p = Bun.spawnSync(argv, { env, stdout: "ignore", stderr: "pipe" });
  const ms = performance.now() - t0;
  if (p.exitCode !== 0) throw new Error(`${argv.join(" ")} exited ${p.exitCode}: ${p.stderr.toString().slice(-400)}`);
  return ms;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

const bins = await binaries();
const dir = mkdtempSync(join(tmpdir(), "bb-bench-start-"));
const clientConfig = join(dir, "client.json");
const scheduler = Bun.spawn(
  [
    bins[0]!,
    "scheduler",
    "serve",
    "--dev",
    "--listen",
    "127.0.0.1:0",
    "--data-dir",
    join(dir, "scheduler"),
    "--dev-image",
    join(dir, "no-image"),
    "--client-config",
    clientConfig,
  ],
  {
    stdout: "ignore",
    stderr: "ignore",
    env: { ...process.env, BB_LOG_LEVEL: "1" },
  },
);
onRunLimit(() => {
  scheduler.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});
try {
  const deadline = Date.now() + SCHEDULER_START_MS;
  for (;;) {
    try {
      if ((JSON.parse(readFileSync(clientConfig, "utf8")) as { schedulerUrl?: string }).schedulerUrl) break;
    } catch {
      /* not written yet */
    }
    if (scheduler.exitCode !== null) throw new Error(`bb scheduler serve exited ${scheduler.exitCode}`);
    if (Date.now() > deadline) throw new Error(`bb scheduler serve wrote no client config in ${SCHEDULER_START_MS} ms`);
    await Bun.sleep(100);
  }
  const env = { ...process.env, BB_CONFIG: clientConfig, NO_COLOR: "1" };
  const cases: { name: string; argv: string[] }[] = [{ name: "bun -e 0", argv: [process.execPath, "-e", "0"] }];
  for (const bb of bins) {
    const tag = bins.length > 1 ? `${bb} ` : "bb ";
    for (const args of [["--help"], ["--version"], ["allocation", "list"]])
      cases.push({ name: `${tag}${args.join(" ")}`, argv: [bb, ...args] });
  }
  const samples = cases.map(() => [] as number[]);
  for (let round = -1; round < RUNS; round++) {
    cases.forEach((c, i) => {
      const ms = time(c.argv, env);
      if (round >= 0) samples[i]!.push(ms);
    });
  }
  const base = median(samples[0]!);
  console.log(
    `start-up, median of ${RUNS} runs (interleaved, after one warm-up), as a ratio to bun -e 0 in the same run`,
  );
  cases.forEach((c, i) => {
    const m = median(samples[i]!);
    console.log(
      `  ${c.name.padEnd(Math.max(...cases.map((x) => x.name.length)))}  ${m.toFixed(0).padStart(6)} ms  ${(m / base).toFixed(2)}×`,
    );
  });
} finally {
  scheduler.kill("SIGTERM");
  await scheduler.exited;
  rmSync(dir, { recursive: true, force: true });
}
