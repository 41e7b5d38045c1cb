/**
 * Fuzz: at least 5,000 malformed requests per run, seeded (BB_FUZZ_SEED,
 * default 1; BB_FUZZ_REQUESTS to change the count), across every route of
 * the route table, unauthenticated and authenticated (test/support/
 * hostileRequests.ts builds them, each invalid by construction with the
 * code it must get). Asserts: no 5xx and no dropped connection; every
 * answer is problem+json with the expected stable code; nothing was
 * created (objects, allocations, hosts, enrollment tokens); /healthz kept
 * answering 200 while hostile bodies were in flight. It prints the
 * event-loop delay and /healthz latency it saw (figures, not assertions;
 * bench/hostile.ts compares them with a benign baseline). The same run on
 * both hosts of the scheduler (embedded and workerd: one front door,
 * docs/adr/0161-one-front-door.md); what only the embedded host shows
 * (object instances, enrollment tokens in its store) is compared there.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ROUTES } from "../../src/scheduler/routes.ts";
import { SeededRandom } from "../sim/rng.ts";
import {
  HostileGenerator,
  outcomeProblem,
  percentile,
  probeHealth,
  sampleEventLoop,
  sendHostile,
  type HostileOutcome,
} from "../support/hostileRequests.ts";
import { enrollTestHost, openTestConnection, type TestConnection } from "../support/scheduler.ts";
import {
  SCHEDULER_HOSTS,
  SCHEDULER_OBJECT_CLASSES,
  startSchedulerOn,
  type SchedulerHostName,
  type SchedulerUnderTest,
} from "../support/schedulerHosts.ts";

const SEED = Number(process.env["BB_FUZZ_SEED"] ?? 1);
const REQUESTS = Number(process.env["BB_FUZZ_REQUESTS"] ?? 5200);
/** Requests in flight at once. */
const CONCURRENCY = 12;

let s: SchedulerUnderTest;
let hostCredential: string;
let allocationId: string;
let connection: TestConnection;

/**
 * Everything a malformed request could have created or changed, as
 * comparable data: object instances and enrollment tokens where the host
 * lets a test see them (embedded), and what the API shows on both.
 */
async function snapshot(): Promise<unknown> {
  const allocations = (await s.controller.list(undefined, 200)).items.map(
    (v) => `${v.allocationId}:${v.clientRequestId}:${v.generation}`,
  );
  const hosts = (await s.operator.hosts()).map(
    (h) => `${h.hostId}:${h.adminState}:${h.credentialVersion}:${h.heartbeatAt}`,
  );
  const rt = s.embedded?.server.worker.runtime;
  if (!rt) return { allocations, hosts };
  const names = Object.fromEntries(SCHEDULER_OBJECT_CLASSES.map((c) => [c, rt.listNames(c).sort()]));
  // Test-only peek at the Enrollment object's table: a refused request must mint no token.
  const tokens = rt.store.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM enrollment_tokens").one().n;
  return { names, allocations, hosts, tokens };
}

/** Starts the scheduler on `host` with an enrolled host, a live Connection and an allocation to aim at. */
async function setUp(host: SchedulerHostName): Promise<void> {
  s = await startSchedulerOn(host);
  hostCredential = (await enrollTestHost(s, "fuzz-host")).credential;
  connection = await openTestConnection(s, "fuzz-host", hostCredential, "fuzz-conn");
  allocationId = (await s.controller.create({ clientRequestId: "fuzz-target", workloadClass: "ci-small" })).view
    .allocationId;
}

for (const host of SCHEDULER_HOSTS)
  describe(host, () => {
    beforeAll(() => setUp(host));
    afterAll(async () => {
      await s.stop();
    });

    describe("hostile input across every route", () => {
      test(`${REQUESTS} seeded malformed requests (seed ${SEED}): no 5xx, a stable problem code each, nothing created, /healthz answering`, async () => {
        const gen = new HostileGenerator(new SeededRandom(SEED), {
          routes: ROUTES,
          controllerToken: s.tokens.token,
          operatorToken: s.tokens.operatorToken,
          hostId: "fuzz-host",
          hostCredential,
          allocationId,
          connection,
        });
        const before = await snapshot();
        const loop = sampleEventLoop();
        const health = probeHealth(s.url);
        const outcomes: HostileOutcome[] = [];
        const t0 = performance.now();
        let sent = 0;
        await Promise.all(
          Array.from({ length: CONCURRENCY }, async () => {
            while (sent < REQUESTS) {
              sent++;
              outcomes.push(await sendHostile(s.url, gen.next()));
            }
          }),
        );
        const elapsedMs = performance.now() - t0;
        const probes = await health.stop();
        const delays = loop.stop();

        const byCategory = new Map<string, number>();
        const byRoute = new Map<string, number>();
        for (const o of outcomes) {
          byCategory.set(o.req.category, (byCategory.get(o.req.category) ?? 0) + 1);
          byRoute.set(o.req.route, (byRoute.get(o.req.route) ?? 0) + 1);
        }
        const okProbes = probes.filter((p) => p.status === 200).map((p) => p.ms);
        console.log(
          `hostile-input: ${outcomes.length} requests (seed ${SEED}) in ${(elapsedMs / 1000).toFixed(1)} s; ` +
            `event-loop delay p50 ${percentile(delays, 50).toFixed(1)} ms, p99 ${percentile(delays, 99).toFixed(1)} ms, max ${percentile(delays, 100).toFixed(1)} ms; ` +
            `/healthz ${okProbes.length}/${probes.length} ok, p50 ${percentile(okProbes, 50).toFixed(1)} ms, p99 ${percentile(okProbes, 99).toFixed(1)} ms, max ${percentile(okProbes, 100).toFixed(1)} ms\n` +
            `  by category: ${[...byCategory].map(([k, v]) => `${k} ${v}`).join(", ")}`,
        );

        const wrong = outcomes.map((o) => ({ o, why: outcomeProblem(o) })).filter((x) => x.why);
        expect(
          wrong
            .slice(0, 10)
            .map(({ o, why }) => `${o.req.category} ${o.req.method} ${o.req.path.slice(0, 80)}: ${why}`),
        ).toEqual([]);
        expect(outcomes.length).toBeGreaterThanOrEqual(REQUESTS);
        expect(byRoute.size).toBe(Object.keys(ROUTES).length);
        expect(await snapshot()).toEqual(before);
        expect(probes.length).toBeGreaterThan(0);
        expect(probes.filter((p) => p.status !== 200)).toEqual([]);
      }, 120_000);
    });
  });
