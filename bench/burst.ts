/**
 * Health latency under a burst from one caller (issue 18 item 21): against
 * a real scheduler in a child process holding `--allocations` pending
 * allocations, one controller opens `--burst` simultaneous
 * `GET /v1/allocations/{id}/logs?follow=1&offset=0` (raw sockets, one per
 * request, each to another allocation) while /healthz is timed one request
 * at a time. Two runs in the same process: the per-caller bounds lifted
 * (baseline) and as shipped (src/scheduler/callerLimits.ts). Prints health
 * p50/p99/max in ms before and during the burst, how many follows were
 * shed (429), and the ratio of the bounded run's health p99 to the
 * baseline's. Ends on its own; children are ended by their PID.
 *
 *   bun bench/burst.ts [--allocations 10000] [--burst 2000]
 */
import { connect, type Socket } from "node:net";
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { limitRunTime, onRunLimit } from "./runLimit.ts";

limitRunTime("bench/burst.ts", 600);

const { values } = parseArgs({ options: { allocations: { type: "string", default: "10000" }, burst: { type: "string", default: "2000" } } });
const ALLOCATIONS = Number(values.allocations);
const BURST = Math.min(Number(values.burst), ALLOCATIONS);
/** Health samples before the burst and during it. */
const QUIET_SAMPLES = 50;
const BURST_SAMPLES = 40;
/** How long a burst request's socket is kept before it is closed, ms (parked follows answer after 20 s). */
const BURST_HOLD_MS = 4_000;

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
}

async function timeHealth(url: string): Promise<number> {
  const t = performance.now();
  const r = await fetch(`${url}/healthz`);
  await r.text();
  return performance.now() - t;
}

async function run(mode: "unbounded" | "bounded"): Promise<{ quiet: number[]; burst: number[]; shed: number; answered: number }> {
  const child = Bun.spawn([process.execPath, resolve(import.meta.dir, "children/burstServer.ts"), mode, String(ALLOCATIONS)], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  onRunLimit(() => child.kill("SIGKILL"));
  try {
    const reader = child.stdout.getReader();
    let text = "";
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) throw new Error("the burst server ended before it was ready");
      text += new TextDecoder().decode(value);
    }
    const info = JSON.parse(text.slice(0, text.indexOf("\n"))) as { url: string; token: string; ids: string[] };
    const port = Number(new URL(info.url).port);
    const quiet: number[] = [];
    for (let i = 0; i < QUIET_SAMPLES; i++) quiet.push(await timeHealth(info.url));
    let shed = 0;
    let answered = 0;
    const sockets: Socket[] = [];
    for (let i = 0; i < BURST; i++) {
      const s = connect({ port, host: "127.0.0.1" });
      s.on("error", () => undefined);
      s.once("data", (d: Buffer) => {
        answered++;
        if (d.toString("latin1").startsWith("HTTP/1.1 429")) shed++;
      });
      s.write(`GET /v1/allocations/${info.ids[i]}/logs?follow=1&offset=0 HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${info.token}\r\n\r\n`);
      sockets.push(s);
    }
    const burst: number[] = [];
    for (let i = 0; i < BURST_SAMPLES; i++) {
      burst.push(await timeHealth(info.url));
      await Bun.sleep(20);
    }
    await Bun.sleep(Math.max(0, BURST_HOLD_MS - BURST_SAMPLES * 20));
    for (const s of sockets) s.destroy();
    return { quiet, burst, shed, answered };
  } finally {
    child.stdin.end();
    const exited = await Promise.race([child.exited, Bun.sleep(10_000).then(() => null)]);
    if (exited === null) {
      child.kill("SIGKILL");
      await child.exited;
    }
  }
}

const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(1)} ms, p99 ${pct(xs, 99).toFixed(1)} ms, max ${pct(xs, 100).toFixed(1)} ms`;
console.log(`health latency under a burst of ${BURST} follows from one controller, ${ALLOCATIONS} pending allocations`);
const results: Record<string, Awaited<ReturnType<typeof run>>> = {};
for (const mode of ["unbounded", "bounded"] as const) {
  const r = await run(mode);
  results[mode] = r;
  console.log(`${mode === "unbounded" ? "bounds lifted (baseline)" : "bounds as shipped"}: quiet ${fmt(r.quiet)}; during the burst ${fmt(r.burst)}; ${r.answered} burst answers before close, ${r.shed} shed with 429`);
}
const ratio = pct(results["bounded"]!.burst, 99) / pct(results["unbounded"]!.burst, 99);
console.log(`ratio of health p99 during the burst, bounded / baseline: ${ratio.toFixed(3)}`);
process.exit(0);
