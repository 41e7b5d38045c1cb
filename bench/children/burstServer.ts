/**
 * Child process of bench/burst.ts: a real scheduler (`serveScheduler`, fresh
 * data directory, development manifest with room for many allocations)
 * holding `--allocations` pending allocations of one controller, with the
 * per-caller bounds on (`bounded`, the shipped constants) or lifted
 * (`unbounded`, the baseline); or (`floor`) no scheduler at all, a bare
 * `Bun.serve` that answers /healthz and refuses everything else with one
 * fixed 429: what Bun alone costs to accept and parse the burst's
 * connections, the floor no change of ours can go under. The scheduler
 * modes also start the health listener (`--health-listen`, its own thread
 * and port). Prints one JSON line with the URL, the health listener's URL
 * (none for `floor`), the controller token and the allocation IDs, then
 * runs until stdin closes.
 *
 *   bun bench/children/burstServer.ts bounded|unbounded|floor <allocations>
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureDevManifest } from "../../src/scheduler/manifest.ts";
import { serveScheduler } from "../../src/scheduler/serve.ts";

const mode = process.argv[2] ?? "bounded";
const count = Number(process.argv[3] ?? "10000");
if (mode === "floor") {
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: (req) =>
      new URL(req.url).pathname === "/healthz"
        ? Response.json({ ok: true })
        : new Response('{"code":"CONCURRENCY_LIMITED"}', { status: 429, headers: { "retry-after": "1" } }),
  });
  console.log(
    JSON.stringify({
      url: `http://127.0.0.1:${server.port}`,
      token: "floor",
      ids: Array.from({ length: count }, (_, i) => `a${i}`),
    }),
  );
  for await (const _ of console) {
    /* until stdin closes */
  }
  await server.stop(true);
  process.exit(0);
}
const dir = mkdtempSync(join(tmpdir(), "bb-bench-burst-"));
const dev = ensureDevManifest(join(dir, "m"), `sha256:${"ab".repeat(32)}`);
const m = JSON.parse(readFileSync(dev.manifestPath, "utf8")) as { limits?: Record<string, number> };
m.limits = {
  ...m.limits,
  maxConcurrentAllocationsPerController: count + 10,
  maxAllocations: count + 10,
  controllerRequestsPerSecond: 1e9,
  deploymentRequestsPerSecond: 1e9,
};
writeFileSync(dev.manifestPath, JSON.stringify(m), { mode: 0o600 });
const tokens = JSON.parse(readFileSync(dev.clientConfigPath, "utf8")) as { token: string };
const s = serveScheduler({
  dataDir: join(dir, "data"),
  manifestPath: dev.manifestPath,
  hostname: "127.0.0.1",
  port: 0,
  healthListen: { hostname: "127.0.0.1", port: 0 },
  ...(mode === "unbounded"
    ? { callerBounds: { maxInFlight: Number.POSITIVE_INFINITY, maxFollows: Number.POSITIVE_INFINITY } }
    : {}),
});
const who = s.worker.authenticate(`Bearer ${tokens.token}`);
const ids: string[] = [];
for (let i = 0; i < count; i += 100) {
  const batch = await Promise.all(
    Array.from({ length: Math.min(100, count - i) }, (_, j) =>
      s.worker.createAllocation(who, { clientRequestId: `burst-${i + j}`, workloadClass: "ci-small" }),
    ),
  );
  for (const r of batch) ids.push(r.view.allocationId);
}
const healthUrl = (await s.health!).url;
console.log(JSON.stringify({ url: s.url, healthUrl, token: tokens.token, ids }));
for await (const _ of console) {
  /* until stdin closes */
}
await s.stop();
rmSync(dir, { recursive: true, force: true });
process.exit(0);
