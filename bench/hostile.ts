/**
 * Hostile-input benchmark (issue 7 item 7 and its fuzz "done when"): what
 * malformed requests cost the scheduler, against a benign baseline measured
 * in the same run on the same server. The scheduler runs in its own process
 * (bench/children/hostileServer.ts) and samples its own event loop every 2 ms; this
 * process sends the requests and probes /healthz.
 *
 * Phases, each N requests with C in flight:
 *   baseline  authenticated GETs of an allocation, its events and the host list
 *   hostile   the fuzz generator's mix (test/support/hostileRequests.ts)
 *   then, per kind, N/10 requests of one worst case each: 60,000-deep
 *   nesting unauthenticated, the same authenticated, a 512 KiB bootstrap
 *   body of invalid JSON, a 64 KiB create body failing its schema at the end,
 *   a 3 MiB chunked body.
 * Prints, per phase: server CPU ms per request, server event-loop delay
 * p50/p99/max, /healthz latency p50/p99, and the ratios to the baseline.
 *
 *   bun bench/hostile.ts [--requests 2000] [--concurrency 12] [--seed 1]
 */
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { ROUTES } from "../src/scheduler/routes.ts";
import { SeededRandom } from "../test/sim/rng.ts";
import {
  HostileGenerator,
  outcomeProblem,
  percentile,
  probeHealth,
  sendHostile,
  type HostileRequest,
} from "../test/support/hostileRequests.ts";
import { filler } from "../test/support/rawHttp.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/hostile.ts", 600);

const { values } = parseArgs({
  options: {
    requests: { type: "string", default: "2000" },
    concurrency: { type: "string", default: "12" },
    seed: { type: "string", default: "1" },
  },
});
const N = Number(values.requests);
const C = Number(values.concurrency);

const child = Bun.spawn([resolve("node_modules/.bin/bun"), resolve("bench/children/hostileServer.ts")], {
  stdin: "pipe",
  stdout: "pipe",
  stderr: "inherit",
});
const lines = (async function* () {
  let buf = "";
  for await (const chunk of child.stdout) {
    buf += new TextDecoder().decode(chunk);
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.startsWith("{")) yield line;
    }
  }
})();
const nextJson = async <T>() => JSON.parse((await lines.next()).value as string) as T;
const ctx = await nextJson<{
  url: string;
  controllerToken: string;
  operatorToken: string;
  hostId: string;
  hostCredential: string;
  allocationId: string;
}>();
const tell = (cmd: string) => {
  child.stdin.write(`${cmd}\n`);
  child.stdin.flush();
};

interface PhaseResult {
  name: string;
  requests: number;
  cpuMsPerRequest: number;
  loop: { p50: number; p99: number; max: number };
  healthP50: number;
  healthP99: number;
  wrong: number;
}

async function phase(
  name: string,
  count: number,
  make: (i: number) => HostileRequest | (() => Promise<void>),
): Promise<PhaseResult> {
  tell("reset");
  await Bun.sleep(50);
  const health = probeHealth(ctx.url, 10);
  let i = 0;
  let wrong = 0;
  await Promise.all(
    Array.from({ length: C }, async () => {
      while (i < count) {
        const r = make(i++);
        if (typeof r === "function") await r();
        else {
          const o = await sendHostile(ctx.url, r);
          const why = outcomeProblem(o);
          if (why && wrong++ < 3) console.error(`${name}: ${r.category} ${r.method} ${r.path.slice(0, 60)}: ${why}`);
        }
      }
    }),
  );
  const probes = (await health.stop()).filter((p) => p.status === 200).map((p) => p.ms);
  tell("report");
  const rep = await nextJson<{ p50: number; p99: number; max: number; cpuMs: number }>();
  return {
    name,
    requests: count,
    cpuMsPerRequest: rep.cpuMs / count,
    loop: rep,
    healthP50: percentile(probes, 50),
    healthP99: percentile(probes, 99),
    wrong,
  };
}

const auth = { authorization: `Bearer ${ctx.controllerToken}` };
const benign = [
  `/v1/allocations/${ctx.allocationId}`,
  `/v1/allocations/${ctx.allocationId}/events?after=0&limit=50`,
  "/v1/allocations?limit=10",
];
const results: PhaseResult[] = [];
results.push(
  await phase("baseline (benign GETs)", N, (i) => async () => {
    await (await fetch(`${ctx.url}${benign[i % benign.length]}`, { headers: auth })).arrayBuffer();
  }),
);
const gen = new HostileGenerator(new SeededRandom(Number(values.seed)), { routes: ROUTES, ...ctx });
results.push(await phase("hostile mix (fuzz generator)", N, () => gen.next()));

const enc = new TextEncoder();
const deep = enc.encode(`{"a":${"[".repeat(60_000)}${"]".repeat(60_000)}}`);
const worst: [string, Omit<HostileRequest, "category" | "route">][] = [
  [
    "60k-deep nesting, no credential",
    { method: "POST", path: "/v1/agents/poll", headers: {}, body: deep, expect: "UNAUTHENTICATED" },
  ],
  [
    "60k-deep nesting to enroll",
    {
      method: "POST",
      path: "/v1/agents/enroll",
      headers: { "content-type": "application/json" },
      body: deep.slice(0, 60_000),
      expect: "JSON_TOO_DEEP",
    },
  ],
  [
    "512 KiB invalid JSON to bootstrap",
    {
      method: "POST",
      path: `/v1/allocations/${ctx.allocationId}/bootstrap`,
      headers: { ...auth, "content-type": "application/json" },
      body: enc.encode(`{"payloadBase64":"${"A".repeat(512 * 1024 - 40)}"`),
      expect: "MALFORMED_JSON",
    },
  ],
  [
    "64 KiB create failing at its last field",
    {
      method: "POST",
      path: "/v1/allocations",
      headers: { ...auth, "content-type": "application/json" },
      body: enc.encode(
        JSON.stringify({
          clientRequestId: "c",
          workloadClass: "ci-small",
          labels: { a: "b" },
          pad: "x".repeat(60 * 1024),
        }),
      ),
      expect: "VALIDATION_FAILED",
    },
  ],
  [
    "3 MiB chunked to create",
    {
      method: "POST",
      path: "/v1/allocations",
      headers: { ...auth, "content-type": "application/json" },
      raw: { chunked: filler(3 * 1024 * 1024) },
      expect: "BODY_TOO_LARGE",
    },
  ],
];
for (const [name, req] of worst)
  results.push(await phase(name, Math.max(50, Math.floor(N / 10)), () => ({ ...req, category: name, route: "worst" })));

tell("quit");
await child.exited;

const base = results[0]!;
const f = (x: number) => x.toFixed(2).padStart(8);
console.log(
  `hostile-input benchmark: ${N} requests per phase, ${C} in flight; server in its own process, event loop sampled every 2 ms`,
);
console.log(
  `${"phase".padEnd(40)} ${"cpu ms/req".padStart(10)} ${"x base".padStart(7)} ${"loop p50".padStart(9)} ${"loop p99".padStart(9)} ${"loop max".padStart(9)} ${"healthz p50".padStart(11)} ${"healthz p99".padStart(11)} ${"x base".padStart(7)} wrong`,
);
for (const r of results)
  console.log(
    `${r.name.padEnd(40)} ${f(r.cpuMsPerRequest).padStart(10)} ${(r.cpuMsPerRequest / base.cpuMsPerRequest).toFixed(1).padStart(7)} ${f(r.loop.p50).padStart(9)} ${f(r.loop.p99).padStart(9)} ${f(r.loop.max).padStart(9)} ${f(r.healthP50).padStart(11)} ${f(r.healthP99).padStart(11)} ${(r.healthP99 / Math.max(base.healthP99, 0.01)).toFixed(1).padStart(7)} ${r.wrong}`,
  );
if (results.some((r) => r.wrong)) {
  console.error("some requests got an answer other than their expected problem code");
  process.exit(1);
}
