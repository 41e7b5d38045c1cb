/**
 * Placement benchmark (issue "Scheduler authority", Benchmark): the real
 * object runtime with SQLite files, 1,000 simulated hosts that have sent a
 * heartbeat, and N allocations created with C in flight. Reports
 * allocations per second admitted and reserved, p50/p99 create→reserved
 * latency, and, as the in-run baseline, raw SQLite commits per second on the
 * same disk (one insert + one update per transaction, WAL, synchronous=NORMAL),
 * so the figure reads as a ratio on a shared, noisy machine.
 *
 *   bun bench/placement.ts [--hosts 1000] [--allocations 3000] [--concurrency 32] [--checkpoint worker|main]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { SchedulerWorker } from "../src/scheduler/worker.ts";
import { tokenDigest, type DeploymentManifest, type Identity } from "../src/scheduler/manifest.ts";
import { openDb } from "../src/storage/sqlite.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/placement.ts", 600);

const { values } = parseArgs({
  options: {
    hosts: { type: "string", default: "1000" },
    allocations: { type: "string", default: "3000" },
    concurrency: { type: "string", default: "32" },
    checkpoint: { type: "string", default: "worker" },
  },
});
const HOSTS = Number(values.hosts);
const N = Number(values.allocations);
const C = Number(values.concurrency);
const dir = mkdtempSync(join(tmpdir(), "bb-bench-"));

function baselineCommitsPerSecond(): number {
  const db = openDb(join(dir, "baseline.db"));
  db.exec(
    "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); CREATE TABLE u (id INTEGER PRIMARY KEY, n INTEGER); INSERT INTO u VALUES (1, 0);",
  );
  const ins = db.query("INSERT INTO t (v) VALUES (?)");
  const upd = db.query("UPDATE u SET n = n + 1 WHERE id = 1");
  const tx = db.transaction((i: number) => {
    ins.run(`row-${i}`);
    upd.run();
  });
  const count = 20_000;
  const t = performance.now();
  for (let i = 0; i < count; i++) tx(i);
  const s = (performance.now() - t) / 1000;
  db.close();
  return count / s;
}

const controller: Identity = { id: "controller:bench", role: "controller" };
const operator: Identity = { id: "operator:bench", role: "operator" };
const manifest: DeploymentManifest = {
  version: 1,
  region: "bench",
  principals: [
    { id: controller.id, role: "controller", tokenSha256: tokenDigest("c") },
    { id: operator.id, role: "operator", tokenSha256: tokenDigest("o") },
  ],
  workloadClasses: {
    small: { cpuMillis: 1000, memoryMiB: 512, ephemeralDiskMiB: 2048, imageDigest: `sha256:${"0".repeat(64)}` },
  },
  limits: {
    maxConcurrentAllocationsPerController: 1_000_000,
    maxRegisteredHosts: HOSTS,
    controllerRequestsPerSecond: 1e9,
    deploymentRequestsPerSecond: 1e9,
    maxAllocations: 1_000_000,
  },
  hostEnrollment: { autoActivate: true },
};

const baseline = baselineCommitsPerSecond();
// WAL checkpoints on a worker thread, as `bb scheduler serve` runs them (`--checkpoint main` for SQLite's default).
const worker = new SchedulerWorker({
  dataDir: join(dir, "scheduler"),
  manifest,
  publicUrl: "http://bench",
  checkpointInBackground: values.checkpoint !== "main",
});
worker.runtime.recover();
let t = performance.now();
const epochs: string[] = [];
const heartbeat = async (i: number) => {
  const hostId = `h-${i}`;
  const r = await worker.agentEnvelope(hostId, {
    protocolVersion: "1.0",
    messageId: `m-${i}-${Date.now()}`,
    hostId,
    agentEpoch: epochs[i] ?? "",
    sentAt: new Date().toISOString(),
    type: "poll",
    payload: { bootId: `b-${i}`, updates: [], acks: [], deliveryAcks: [], waitMs: 0 },
  });
  epochs[i] = r.agentEpoch;
};
for (let i = 0; i < HOSTS; i++) {
  const hostId = `h-${i}`;
  const tok = await worker.createEnrollmentToken(operator, hostId, 3600);
  await worker.enroll({
    token: tok.token,
    capacity: { cpuMillis: 16_000, memoryMiB: 65_536, ephemeralDiskMiB: 1_000_000, maxPlacements: 16 },
    region: "bench",
    architecture: "x86_64",
    agentProtocolVersion: "1.0",
    vmmDriver: "bench",
  });
  await heartbeat(i);
}
await worker.runtime.idle();
// Agents heartbeat every 10 s (real ones poll at least every 20 s), so hosts stay healthy. Real agents are not
// synchronised: a tick every 100 ms beats the due hundredth (10 hosts), 100 heartbeats a second in all.
let beating = true;
const beats = (async () => {
  for (let tick = 0; beating; tick++) {
    await Promise.all(
      Array.from({ length: Math.ceil(HOSTS / 100) }, (_, k) => (tick % 100) + k * 100)
        .filter((i) => i < HOSTS)
        .map(heartbeat),
    );
    await Bun.sleep(100);
  }
})();
const setupMs = performance.now() - t;

const latencies: number[] = [];
let next = 0;
let reserved = 0;
const store = worker.runtime.store;
const before = { statements: store.statements, commits: store.commits };
t = performance.now();
await Promise.all(
  Array.from({ length: C }, async () => {
    while (next < N) {
      const i = next++;
      const s = performance.now();
      const r = await worker.createAllocation(controller, { clientRequestId: `r-${i}`, workloadClass: "small" });
      latencies.push(performance.now() - s);
      if (r.view.state === "provisioning") reserved++;
      // Object turns resolve as microtasks (SQLite is synchronous): yield so timers (the agents' heartbeats) run, as HTTP I/O would.
      await new Promise((r) => setImmediate(r));
    }
  }),
);
const elapsed = (performance.now() - t) / 1000;
// Work in the create loop (the heartbeats that ran meanwhile included): counts, so they do not depend on the machine's load.
const statements = store.statements - before.statements;
const commits = store.commits - before.commits;
beating = false;
await beats;
await worker.runtime.idle();
await worker.close();
rmSync(dir, { recursive: true, force: true });

latencies.sort((a, b) => a - b);
const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))]!;
const rate = N / elapsed;
console.log(
  `hosts ${HOSTS} (setup ${(setupMs / 1000).toFixed(1)} s), allocations ${N}, concurrency ${C}, checkpoints on ${values.checkpoint === "main" ? "the main thread" : "a worker thread"}`,
);
console.log(`admitted and reserved: ${reserved}/${N} in ${elapsed.toFixed(2)} s = ${rate.toFixed(0)} allocations/s`);
console.log(
  `create→reserved latency: p50 ${pct(50).toFixed(2)} ms, p99 ${pct(99).toFixed(2)} ms, max ${latencies[latencies.length - 1]!.toFixed(2)} ms`,
);
console.log(
  `SQL statements per allocation ${(statements / N).toFixed(1)} (transaction control included), ${commits} commits (${(N / Math.max(1, commits)).toFixed(1)} allocations per commit)`,
);
console.log(`baseline (same run): raw SQLite ${baseline.toFixed(0)} commits/s (1 insert + 1 update each)`);
console.log(
  `ratio: allocations/s ÷ baseline commits/s = ${(rate / baseline).toFixed(4)} (≈ ${(baseline / rate).toFixed(1)} commit-equivalents per allocation)`,
);
