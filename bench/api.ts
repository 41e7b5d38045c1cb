/**
 * API benchmark (issue "The scheduler on the Durable Objects model",
 * bench/api.ts): a real `bb scheduler serve` process with no agent, N live
 * (pending) allocations created over HTTP, then GET by ID from R concurrent
 * readers, paging through every allocation, idle CPU while they all wait,
 * and RSS; the same work against a minimal Bun.serve + bun:sqlite route
 * (one table, same rows) measured in the same run as the baseline, so the
 * figures read as ratios on a shared, noisy machine. Both servers run as
 * child processes on loopback; this process is only the client.
 *
 *   bun bench/api.ts [--allocations 10000] [--readers 200] [--gets 20000] [--idle-seconds 10] [--bb other/bin/bb.ts]
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { ensureDevManifest } from "../src/scheduler/manifest.ts";
import { limitRunTime } from "./support/runLimit.ts";

const { values } = parseArgs({
  options: {
    allocations: { type: "string", default: "10000" },
    readers: { type: "string", default: "200" },
    gets: { type: "string", default: "20000" },
    "idle-seconds": { type: "string", default: "10" },
    /** The `bb` entry to serve (default this checkout's bin/bb.ts): another checkout's, to compare two trees. */
    bb: { type: "string", default: resolve(import.meta.dir, "../bin/bb.ts") },
  },
});
const N = Number(values.allocations);
const R = Number(values.readers);
const GETS = Number(values.gets);
const IDLE_S = Number(values["idle-seconds"]);
const dir = mkdtempSync(join(tmpdir(), "bb-bench-api-"));

limitRunTime("bench/api.ts", 600);

// The baseline runs from a temporary directory: it imports the run-time bound by its absolute path.
const BASELINE = `
import { Database } from "bun:sqlite";
import { limitRunTime } from ${JSON.stringify(resolve(import.meta.dir, "support", "runLimit.ts"))};

limitRunTime("bench/api.ts baseline", 600);
const db = new Database(process.argv[2], { create: true, strict: true });
db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; CREATE TABLE IF NOT EXISTS a (id TEXT PRIMARY KEY, owner TEXT NOT NULL, body TEXT NOT NULL)");
const ins = db.query("INSERT OR IGNORE INTO a (id, owner, body) VALUES (?, ?, ?)");
const one = db.query("SELECT body FROM a WHERE id = ? AND owner = ?");
const page = db.query("SELECT id, body FROM a WHERE owner = ? AND id > ? ORDER BY id LIMIT ?");
const server = Bun.serve({ hostname: "127.0.0.1", port: 0, async fetch(req) {
  const url = new URL(req.url);
  const owner = req.headers.get("authorization") ?? "";
  if (req.method === "POST") { const b = await req.json(); const id = "a_" + new Bun.CryptoHasher("sha256").update(owner + "\\0" + b.clientRequestId).digest("hex").slice(0, 32); const body = JSON.stringify({ allocationId: id, state: "pending", ...b }); ins.run(id, owner, body); return new Response(body, { status: 201, headers: { "content-type": "application/json" } }); }
  if (url.pathname === "/v1/allocations") { const rows = page.all(owner, url.searchParams.get("cursor") ?? "", Number(url.searchParams.get("limit") ?? 50)); return Response.json({ items: rows.map((r) => JSON.parse(r.body)), nextCursor: rows.length ? rows[rows.length - 1].id : null }); }
  const r = one.get(url.pathname.split("/").pop(), owner); return r ? new Response(r.body, { headers: { "content-type": "application/json" } }) : new Response("{}", { status: 404 });
} });
console.log("listening " + server.port);
`;

interface Target {
  name: string;
  url: string;
  token: string;
  pid: number;
  stop(): Promise<void>;
}

/** How long a server may take to print its port, ms. */
const START_TIMEOUT_MS = 20_000;

async function startProcess(
  name: string,
  cmd: string[],
  token: string,
  portOf: (line: string) => number | null,
): Promise<Target> {
  const proc = Bun.spawn(cmd, { stdout: "pipe", stderr: "pipe" });
  // One reader per stream, each draining its stream to the end: a race of two fresh reads per
  // turn drops the chunk the losing read receives (the port line, when stderr spoke first).
  let buf = "";
  let found: (port: number) => void = () => {};
  const portSeen = new Promise<number>((resolve) => (found = resolve));
  const drain = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) {
      buf += decoder.decode(chunk, { stream: true });
      for (const line of buf.split("\n")) {
        const p = portOf(line);
        if (p !== null) found(p);
      }
    }
  };
  void drain(proc.stdout);
  void drain(proc.stderr);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const port = await Promise.race([
    portSeen,
    new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), START_TIMEOUT_MS))),
    proc.exited.then(() => null),
  ]);
  clearTimeout(timer);
  if (port === null) {
    proc.kill("SIGTERM");
    throw new Error(`${name} did not start: ${buf}`);
  }
  return {
    name,
    url: `http://127.0.0.1:${port}`,
    token,
    pid: proc.pid,
    async stop() {
      proc.kill("SIGTERM");
      await proc.exited;
    },
  };
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

function cpuTicks(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return Number(f[11]) + Number(f[12]);
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

async function pool<T>(count: number, concurrency: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        const i = next++;
        out[i] = await fn(i);
      }
    }),
  );
  return out;
}

interface Result {
  createP50: number;
  createP99: number;
  createRate: number;
  getP50: number;
  getP99: number;
  pageAllMs: number;
  idleCpuPct: number;
  rss: number;
}

async function run(t: Target): Promise<Result> {
  const headers = { authorization: `Bearer ${t.token}`, "content-type": "application/json" };
  const ids: string[] = [];
  const createMs: number[] = [];
  let start = performance.now();
  await pool(N, 64, async (i) => {
    const s = performance.now();
    const r = await fetch(`${t.url}/v1/allocations`, {
      method: "POST",
      headers,
      body: JSON.stringify({ clientRequestId: `api-${i}`, workloadClass: "ci-small" }),
    });
    createMs.push(performance.now() - s);
    if (r.status !== 201) throw new Error(`${t.name}: create ${i} answered ${r.status} ${await r.text()}`);
    ids[i] = ((await r.json()) as { allocationId: string }).allocationId;
  });
  const createRate = N / ((performance.now() - start) / 1000);
  const getMs: number[] = [];
  await pool(GETS, R, async (i) => {
    const s = performance.now();
    const r = await fetch(`${t.url}/v1/allocations/${ids[(i * 7919) % N]}`, { headers });
    await r.arrayBuffer();
    getMs.push(performance.now() - s);
    if (r.status !== 200) throw new Error(`${t.name}: get answered ${r.status}`);
  });
  start = performance.now();
  let cursor: string | null = null;
  let seen = 0;
  do {
    const r = await fetch(`${t.url}/v1/allocations?limit=200${cursor ? `&cursor=${cursor}` : ""}`, { headers });
    const page = (await r.json()) as { items: unknown[]; nextCursor: string | null };
    seen += page.items.length;
    cursor = page.nextCursor;
  } while (cursor);
  const pageAllMs = performance.now() - start;
  if (seen !== N) throw new Error(`${t.name}: paging saw ${seen} of ${N}`);
  const ticks0 = cpuTicks(t.pid);
  await Bun.sleep(IDLE_S * 1000);
  const idleCpuPct = ((cpuTicks(t.pid) - ticks0) / 100 / IDLE_S) * 100;
  return {
    createP50: pct(createMs, 50),
    createP99: pct(createMs, 99),
    createRate,
    getP50: pct(getMs, 50),
    getP99: pct(getMs, 99),
    pageAllMs,
    idleCpuPct,
    rss: rssMiB(t.pid),
  };
}

const dev = ensureDevManifest(join(dir, "sched"), `sha256:${"ab".repeat(32)}`);
const m = JSON.parse(readFileSync(dev.manifestPath, "utf8")) as { limits: Record<string, number> };
m.limits = {
  ...m.limits,
  maxConcurrentAllocationsPerController: 1_000_000,
  controllerRequestsPerSecond: 1e9,
  deploymentRequestsPerSecond: 1e9,
  maxAllocations: 1_000_000,
  maxRetainedAllocations: 1_000_000,
};
writeFileSync(dev.manifestPath, JSON.stringify(m));
const token = (JSON.parse(readFileSync(dev.clientConfigPath, "utf8")) as { token: string }).token;
writeFileSync(join(dir, "baseline.ts"), BASELINE);

const results: [string, Result][] = [];
for (const which of ["baseline", "scheduler"] as const) {
  const t =
    which === "baseline"
      ? await startProcess(
          "baseline",
          [process.execPath, join(dir, "baseline.ts"), join(dir, "baseline.db")],
          token,
          (l) => Number(/listening (\d+)/.exec(l)?.[1]) || null,
        )
      : await startProcess(
          "scheduler",
          [
            process.execPath,
            resolve(values.bb),
            "scheduler",
            "serve",
            "--data-dir",
            join(dir, "sched", "data"),
            "--manifest",
            dev.manifestPath,
            "--listen",
            "127.0.0.1:0",
          ],
          token,
          // The text log says "listening on http://…", the JSON log {"msg":"scheduler listening","url":"http://…"}.
          (l) =>
            Number(
              /listening on http:\/\/[^:]+:(\d+)/.exec(l)?.[1] ??
                /listening".*"url":"http:\/\/[^"]+:(\d+)"/.exec(l)?.[1],
            ) || null,
        );
  try {
    results.push([which, await run(t)]);
  } finally {
    await t.stop();
  }
}
rmSync(dir, { recursive: true, force: true });

const [b, s] = [results[0]![1], results[1]![1]];
console.log(`${N} live allocations, ${R} concurrent readers, ${GETS} GETs, idle ${IDLE_S} s`);
for (const [name, r] of results) {
  console.log(
    `${name.padEnd(9)} create ${r.createRate.toFixed(0)}/s p50 ${r.createP50.toFixed(1)} ms p99 ${r.createP99.toFixed(1)} ms | get p50 ${r.getP50.toFixed(1)} ms p99 ${r.getP99.toFixed(1)} ms | page through all ${r.pageAllMs.toFixed(0)} ms | idle CPU ${r.idleCpuPct.toFixed(1)} % | RSS ${r.rss.toFixed(0)} MiB`,
  );
}
console.log(
  `ratios (scheduler ÷ baseline): get p99 ${(s.getP99 / b.getP99).toFixed(2)}×, get p50 ${(s.getP50 / b.getP50).toFixed(2)}×, create p99 ${(s.createP99 / b.createP99).toFixed(2)}×, paging ${(s.pageAllMs / b.pageAllMs).toFixed(2)}×, RSS ${(s.rss / b.rss).toFixed(2)}×`,
);
