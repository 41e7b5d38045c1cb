/**
 * Where a shed request's main-loop time goes (issue 18 item 21: what makes
 * a burst of 2,000 follows hold /healthz on the main port for about 110
 * ms): the scheduler's own per-request work for one
 * `GET /v1/allocations/{id}/logs?follow=1&offset=0` refused with 429
 * CONCURRENCY_LIMITED, layer by layer, in-process (no sockets: Bun's accept
 * and parse are bench/burst.ts's floor), over a real scheduler in a
 * temporary data directory: building the Request (baseline), the request
 * guard alone (edge.ts: route, framing, token digest, query), the limiter's
 * refusal, Elysia's dispatch of a fixed answer, the app (all three), the
 * request log alone, and the whole path serve.ts runs. Prints the least µs
 * per request over the rounds, the ratio to the baseline, and what 2,000 of
 * them cost the main loop in ms.
 *
 *   bun bench/shedPath.ts [--requests 2000] [--rounds 7]
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Elysia } from "elysia";
import { ensureDevManifest, loadManifest } from "../src/scheduler/manifest.ts";
import { SchedulerWorker } from "../src/scheduler/worker.ts";
import { buildApp } from "../src/scheduler/app.ts";
import { CallerLimiter } from "../src/scheduler/callerLimits.ts";
import { RequestGuard } from "../src/scheduler/edge.ts";
import { ROUTES } from "../src/scheduler/routes.ts";
import { withRequestLog } from "../src/scheduler/requestLog.ts";
import { silentLogger } from "../src/command/log.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/shedPath.ts", 300);

const { values } = parseArgs({
  options: { requests: { type: "string", default: "2000" }, rounds: { type: "string", default: "7" } },
});
const N = Number(values.requests);
const ROUNDS = Number(values.rounds);
const dir = mkdtempSync(join(tmpdir(), "bb-bench-shed-"));
try {
  const dev = ensureDevManifest(join(dir, "m"), `sha256:${"ab".repeat(32)}`);
  const token = (JSON.parse(readFileSync(dev.clientConfigPath, "utf8")) as { token: string }).token;
  const worker = new SchedulerWorker({
    dataDir: join(dir, "data"),
    manifest: loadManifest(dev.manifestPath),
    publicUrl: "http://bench",
  });
  worker.start();
  // No follow may park: every follow is shed, as past the bound in a burst.
  const limiter = new CallerLimiter({ maxInFlight: 256, maxFollows: 0 });
  const app = buildApp(worker, { limiter, health: () => worker.health() });
  const guard = new RequestGuard(ROUTES, {
    principal: (h) => worker.authenticate(h),
    host: (h) => worker.authenticateHost(h),
    endpoint: (h, c) => worker.authenticateEndpoint(h, c),
  });
  const shed = limiter.admit({ kind: "principal", identity: { id: "bench", role: "controller" } }, true);
  if (!(shed instanceof Response)) throw new Error("the limiter did not shed");
  const fixed = () => new Response("{}", { status: 429 });
  const bare = new Elysia({ normalize: false }).onRequest(() => fixed());
  const deps = { log: silentLogger, clock: worker.env.clock, random: worker.env.random };
  const logged = withRequestLog((r) => app.handle(r), deps);
  const logOnly = withRequestLog(() => fixed(), deps);
  const target = `http://127.0.0.1/v1/allocations/alloc_${"0".repeat(32)}/logs?follow=1&offset=0`;
  const request = () => new Request(target, { headers: { host: "127.0.0.1", authorization: `Bearer ${token}` } });
  const first = await logged(request());
  if (first.status !== 429) throw new Error(`the shed path answered ${first.status}`);
  const layers: Array<[string, () => unknown]> = [
    ["new Request (baseline)", () => request()],
    ["request guard (edge.ts)", () => guard.admit(request())],
    [
      "limiter refusal",
      () => (request(), limiter.admit({ kind: "principal", identity: { id: "bench", role: "controller" } }, true)),
    ],
    ["Elysia dispatch of a fixed answer", () => bare.handle(request())],
    ["app.handle (guard, limiter, Elysia)", () => app.handle(request())],
    ["request log of a fixed answer", () => logOnly(request())],
    ["whole shed path (serve.ts)", () => logged(request())],
  ];
  const best = new Map<string, number>();
  for (let round = 0; round < ROUNDS; round++)
    for (const [name, f] of layers) {
      const t = performance.now();
      for (let i = 0; i < N; i++) await f();
      const us = ((performance.now() - t) * 1000) / N;
      best.set(name, Math.min(best.get(name) ?? Infinity, us));
    }
  const base = best.get(layers[0]![0])!;
  console.log(`shed path per request, least of ${ROUNDS} rounds of ${N} (in-process, no sockets)`);
  for (const [name] of layers) {
    const us = best.get(name)!;
    console.log(
      `${name}: ${us.toFixed(1)} µs, ratio to baseline ${(us / base).toFixed(2)}, ${N} of them ${((us * N) / 1000).toFixed(1)} ms of main loop`,
    );
  }
  await worker.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
