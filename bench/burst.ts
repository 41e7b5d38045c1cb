/**
 * Health latency under a burst from one caller (issue 18 item 21): against
 * a real scheduler in a child process holding `--allocations` pending
 * allocations, one controller opens `--burst` simultaneous
 * `GET /v1/allocations/{id}/logs?follow=1&offset=0` (raw sockets, one per
 * request, each to another allocation) from a second child process
 * (children/burstClient.ts), so the client's own work on its sockets is not
 * counted, while this process times /healthz every HEALTH_GAP_MS, each on a
 * fresh connection (never queued behind the burst in a client pool). Three
 * runs in the same process: `floor`, a bare Bun.serve that only answers
 * (what accepting and parsing the burst's connections costs, no scheduler);
 * the per-caller bounds lifted (baseline); and as shipped
 * (src/scheduler/callerLimits.ts); each meets two bursts, a first (cold
 * code) and a second (warm). The scheduler runs also time the health
 * listener (`--health-listen`: its own thread and port,
 * src/scheduler/health/) with each sample, in parallel with the main
 * port's /healthz, and keep the largest main-loop age it reported (how long
 * the main loop went without running: the stall the burst makes). Prints
 * health p50/p99 in ms before and during the burst, how many follows were
 * shed (429), and the ratios of health p99: bounded to baseline and to
 * floor on the main port, and the health listener's to the main port's and
 * to the floor's. Ends on its own; children are ended by their PID.
 *
 *   bun bench/burst.ts [--allocations 10000] [--burst 2000]
 */
import { connect } from "node:net";
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { limitRunTime, onRunLimit } from "./support/runLimit.ts";

limitRunTime("bench/burst.ts", 600);

const { values } = parseArgs({
  options: { allocations: { type: "string", default: "10000" }, burst: { type: "string", default: "2000" } },
});
const ALLOCATIONS = Number(values.allocations);
const BURST = Math.min(Number(values.burst), ALLOCATIONS);
/** Health samples before the burst and during it. */
const QUIET_SAMPLES = 50;
const BURST_SAMPLES = 100;
/** Pause between two health samples during the burst, ms. */
const HEALTH_GAP_MS = 5;
/** How long a burst request's socket is kept before it is closed, ms (parked follows answer after 20 s). */
const BURST_HOLD_MS = 3_000;

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
}

/** One GET /healthz on a fresh connection: ms from connecting to the answer's head, and the whole answer's text. */
function timeHealth(port: number): Promise<{ ms: number; text: string }> {
  return new Promise((done, fail) => {
    const t = performance.now();
    const s = connect({ port, host: "127.0.0.1" });
    let text = "";
    let ms = NaN;
    s.on("error", fail);
    s.on("data", (d: Buffer) => {
      text += d.toString("latin1");
      if (Number.isNaN(ms) && text.includes("\r\n\r\n")) ms = performance.now() - t;
    });
    s.on("close", () => {
      if (!text.startsWith("HTTP/1.1 200")) fail(new Error(`health answered ${text.slice(0, 40)}`));
      else done({ ms, text });
    });
    s.write("GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n");
  });
}

/** Health samples of one phase: the main port's, and (scheduler runs) the health listener's with its largest reported main-loop age. */
interface Samples {
  main: number[];
  listener: number[];
  maxLoopAgeMs: number;
}

/** One sample: the main port's /healthz and, when there is one, the health listener's, in parallel. */
async function sample(into: Samples, port: number, listenerPort: number | null): Promise<void> {
  const [m, l] = await Promise.all([timeHealth(port), listenerPort === null ? null : timeHealth(listenerPort)]);
  into.main.push(m.ms);
  if (l) {
    into.listener.push(l.ms);
    const age = (JSON.parse(l.text.slice(l.text.indexOf("\r\n\r\n") + 4)) as { mainLoopAgeMs: number }).mainLoopAgeMs;
    into.maxLoopAgeMs = Math.max(into.maxLoopAgeMs, age);
  }
}

/** Reads lines from a child's stdout. */
function lines(stream: ReadableStream<Uint8Array>): () => Promise<string> {
  const reader = stream.getReader();
  let text = "";
  return async () => {
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) throw new Error("a child ended before it answered");
      text += new TextDecoder().decode(value);
    }
    const line = text.slice(0, text.indexOf("\n"));
    text = text.slice(text.indexOf("\n") + 1);
    return line;
  };
}

async function ended(child: Bun.Subprocess): Promise<void> {
  const exited = await Promise.race([child.exited, Bun.sleep(10_000).then(() => null)]);
  if (exited === null) {
    child.kill("SIGKILL");
    await child.exited;
  }
}

type Mode = "floor" | "unbounded" | "bounded";

/** One burst's health samples (ms) and how the burst was answered. */
interface Burst {
  health: Samples;
  answered: number;
  shed: number;
}

async function run(mode: Mode): Promise<{ quiet: Samples; cold: Burst; warm: Burst }> {
  const child = Bun.spawn(
    [process.execPath, resolve(import.meta.dir, "children/burstServer.ts"), mode, String(ALLOCATIONS)],
    { stdin: "pipe", stdout: "pipe", stderr: "inherit" },
  );
  onRunLimit(() => child.kill("SIGKILL"));
  let client: Bun.Subprocess<"pipe", "pipe", "inherit"> | null = null;
  try {
    const info = JSON.parse(await lines(child.stdout)()) as {
      url: string;
      healthUrl?: string;
      token: string;
      ids: string[];
    };
    const port = Number(new URL(info.url).port);
    const listenerPort = info.healthUrl ? Number(new URL(info.healthUrl).port) : null;
    const quiet: Samples = { main: [], listener: [], maxLoopAgeMs: 0 };
    for (let i = 0; i < QUIET_SAMPLES; i++) await sample(quiet, port, listenerPort);
    const bursts: Burst[] = [];
    // Twice: the first burst meets code never run before (cold, as after a restart); the second, warm code (as on a server up for a while).
    for (let round = 0; round < 2; round++) {
      const c = Bun.spawn(
        [process.execPath, resolve(import.meta.dir, "children/burstClient.ts"), String(port), info.token],
        { stdin: "pipe", stdout: "pipe", stderr: "inherit" },
      );
      client = c;
      onRunLimit(() => c.kill("SIGKILL"));
      const fromClient = lines(c.stdout);
      const from = info.ids.length >= 2 * BURST ? round * BURST : 0;
      c.stdin.write(JSON.stringify(info.ids.slice(from, from + BURST)) + "\n");
      c.stdin.flush();
      const health: Samples = { main: [], listener: [], maxLoopAgeMs: 0 };
      for (let i = 0; i < BURST_SAMPLES; i++) {
        await sample(health, port, listenerPort);
        await Bun.sleep(HEALTH_GAP_MS);
      }
      if ((await fromClient()) !== "sent") throw new Error("the burst client did not send its burst");
      await Bun.sleep(BURST_HOLD_MS);
      c.stdin.end();
      bursts.push({ health, ...(JSON.parse(await fromClient()) as { answered: number; shed: number }) });
      await ended(c);
      client = null;
    }
    return { quiet, cold: bursts[0]!, warm: bursts[1]! };
  } finally {
    if (client) await ended(client);
    child.stdin.end();
    await ended(child);
  }
}

const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(1)} ms, p99 ${pct(xs, 99).toFixed(1)} ms`;
const fmtSamples = (s: Samples) =>
  s.listener.length === 0
    ? fmt(s.main)
    : `main port ${fmt(s.main)}, health listener ${fmt(s.listener)}, longest main-loop age seen ${s.maxLoopAgeMs} ms`;
const fmtBurst = (b: Burst) => `${fmtSamples(b.health)} (${b.answered} answered, ${b.shed} shed with 429)`;
console.log(
  `health latency (fresh connection per sample) under a burst of ${BURST} follows from one controller (another process), ${ALLOCATIONS} pending allocations`,
);
const results: Record<string, Awaited<ReturnType<typeof run>>> = {};
const names: Record<Mode, string> = {
  floor: "bare Bun.serve (floor)",
  unbounded: "bounds lifted (baseline)",
  bounded: "bounds as shipped",
};
for (const mode of ["floor", "unbounded", "bounded"] as const) {
  const r = await run(mode);
  results[mode] = r;
  console.log(
    `${names[mode]}: quiet ${fmtSamples(r.quiet)}; first (cold) burst ${fmtBurst(r.cold)}; second (warm) burst ${fmtBurst(r.warm)}`,
  );
}
const p99 = (mode: Mode, b: "cold" | "warm") => pct(results[mode]![b].health.main, 99);
const listenerP99 = (mode: Mode, b: "cold" | "warm") => pct(results[mode]![b].health.listener, 99);
for (const b of ["cold", "warm"] as const) {
  console.log(
    `${b} burst, ratio of health p99, main port: bounded / baseline ${(p99("bounded", b) / p99("unbounded", b)).toFixed(3)}, bounded / floor ${(p99("bounded", b) / p99("floor", b)).toFixed(3)}; ` +
      `health listener (bounded run): / main port ${(listenerP99("bounded", b) / p99("bounded", b)).toFixed(3)}, / floor ${(listenerP99("bounded", b) / p99("floor", b)).toFixed(3)}; ` +
      `(baseline run): / main port ${(listenerP99("unbounded", b) / p99("unbounded", b)).toFixed(3)}`,
  );
}
process.exit(0);
