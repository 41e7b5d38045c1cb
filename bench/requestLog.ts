/**
 * What the request log and request IDs (src/scheduler/requestLog.ts) cost
 * per request: the real app (src/scheduler/app.ts) over a real scheduler
 * in a temporary data directory, called in-process (no sockets, so the
 * wrapper's share is not hidden by network time) for GET
 * /v1/allocations/{id} and an unauthenticated 401, three ways in the same
 * run, interleaved: the bare app (baseline), the wrapper with logging off
 * (level 0: IDs and headers only), and the wrapper writing JSON lines to a
 * sink that drops them. Prints µs per request and the ratio to the baseline.
 *
 *   bun bench/requestLog.ts [--requests 20000] [--rounds 5]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ensureDevManifest, loadManifest } from "../src/scheduler/manifest.ts";
import { SchedulerWorker } from "../src/scheduler/worker.ts";
import { buildApp } from "../src/scheduler/app.ts";
import { withRequestLog } from "../src/scheduler/requestLog.ts";
import { createLogger } from "../src/command/log.ts";
import { readFileSync } from "node:fs";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/requestLog.ts", 600);

const { values } = parseArgs({
  options: { requests: { type: "string", default: "20000" }, rounds: { type: "string", default: "5" } },
});
const N = Number(values.requests);
const ROUNDS = Number(values.rounds);
const dir = mkdtempSync(join(tmpdir(), "bb-bench-reqlog-"));
try {
  const dev = ensureDevManifest(join(dir, "m"), `sha256:${"ab".repeat(32)}`);
  const tokens = JSON.parse(readFileSync(dev.clientConfigPath, "utf8")) as { token: string };
  const worker = new SchedulerWorker({
    dataDir: join(dir, "data"),
    manifest: loadManifest(dev.manifestPath),
    publicUrl: "http://bench",
  });
  worker.start();
  const app = buildApp(worker, { health: () => worker.health() });
  const bare = (req: Request) => app.handle(req);
  const deps = { clock: worker.env.clock, random: worker.env.random };
  let lines = 0;
  const variants: [string, (req: Request) => Promise<Response>][] = [
    ["bare app (baseline)", bare],
    [
      "request IDs, log level 0",
      withRequestLog(bare, { ...deps, log: createLogger({ format: "json", level: 0, sink: () => {} }) }),
    ],
    [
      "request IDs + JSON lines",
      withRequestLog(bare, { ...deps, log: createLogger({ format: "json", level: 3, sink: () => void lines++ }) }),
    ],
  ];
  const created = (await (
    await bare(
      new Request("http://bench/v1/allocations", {
        method: "POST",
        headers: { authorization: `Bearer ${tokens.token}`, "content-type": "application/json" },
        body: JSON.stringify({ clientRequestId: "bench-1", workloadClass: "ci-small" }),
      }),
    )
  ).json()) as { allocationId: string };
  const requests = {
    "GET allocation": () =>
      new Request(`http://bench/v1/allocations/${created.allocationId}`, {
        headers: { authorization: `Bearer ${tokens.token}` },
      }),
    "401 refusal": () => new Request("http://bench/v1/allocations", { headers: { authorization: "Bearer nope" } }),
  };
  for (const [what, make] of Object.entries(requests)) {
    const totals = variants.map(() => 0);
    for (let round = 0; round < ROUNDS; round++) {
      for (const [i, [, handle]] of variants.entries()) {
        const t0 = performance.now();
        for (let k = 0; k < N; k++) await (await handle(make())).arrayBuffer();
        totals[i]! += performance.now() - t0;
      }
    }
    const base = totals[0]!;
    console.log(`${what}: ${N * ROUNDS} requests per variant`);
    for (const [i, [name]] of variants.entries())
      console.log(
        `  ${name.padEnd(26)} ${((totals[i]! * 1000) / (N * ROUNDS)).toFixed(1).padStart(6)} µs/request  ${(totals[i]! / base).toFixed(2)}x`,
      );
  }
  console.log(`(${lines} JSON lines formatted)`);
  await worker.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
