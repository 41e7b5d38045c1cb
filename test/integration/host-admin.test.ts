/**
 * Admission's active-host count against the hosts' admin states (issue 7
 * item 14): activating a disabled host answered 200 with `disabled` while
 * Admission counted it as active, so a real host was later refused with
 * QUOTA_ACTIVE_HOSTS. A seeded property test drives random admin changes
 * (activate, drain, disable, enroll again), several at once, against the
 * real Worker and its SQLite objects, and checks after every batch that the
 * counted set is exactly the set of active hosts and within the cap.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BeachballError } from "../../src/protocol/errors.ts";
import type { EnrollBody } from "../../src/protocol/api.ts";
import { SchedulerWorker } from "../../src/scheduler/worker.ts";
import type { DeploymentManifest, Identity } from "../../src/scheduler/manifest.ts";
import { SeededRandom } from "../sim/rng.ts";
import { startTestScheduler } from "../support/scheduler.ts";

const OPERATOR: Identity = { id: "operator:t", role: "operator" };
const HOSTS = ["h0", "h1", "h2", "h3", "h4", "h5"];
const MAX_ACTIVE = 3;
/** Seeds per run and batches per seed; override with BB_ADMIN_SEEDS. */
const SEEDS = Number(process.env["BB_ADMIN_SEEDS"] ?? 15);
const BATCHES = 40;
/** Codes an admin change may legitimately be refused with. */
const EXPECTED = new Set(["QUOTA_ACTIVE_HOSTS", "HOST_DISABLED", "ENROLLMENT_CONFLICT"]);

const dirs = new Map<SchedulerWorker, string>();
afterAll(() => {
  for (const d of dirs.values()) rmSync(d, { recursive: true, force: true });
});

/** Closes a worker and removes its data directory. */
async function dispose(w: SchedulerWorker): Promise<void> {
  await w.close();
  rmSync(dirs.get(w)!, { recursive: true, force: true });
  dirs.delete(w);
}

function manifest(autoActivate: boolean): DeploymentManifest {
  return {
    version: 1,
    region: "local",
    principals: [],
    workloadClasses: {},
    limits: { maxConcurrentAllocationsPerController: 4, maxRegisteredHosts: HOSTS.length, maxActiveHosts: MAX_ACTIVE },
    hostEnrollment: { autoActivate },
  };
}

const enrollBody = (token: string, cpuMillis = 1000): EnrollBody => ({
  token,
  capacity: { cpuMillis, memoryMiB: 1024, ephemeralDiskMiB: 1024, maxPlacements: 2 },
  region: "local",
  architecture: "x86_64",
  agentProtocolVersion: "1.0",
  vmmDriver: "qemu-microvm",
});

async function enroll(w: SchedulerWorker, hostId: string, cpuMillis = 1000): Promise<void> {
  const t = await w.createEnrollmentToken(OPERATOR, hostId, 600);
  await w.enroll(enrollBody(t.token, cpuMillis));
}

/** The counted set and the set of hosts whose state is active, both sorted. */
async function counters(w: SchedulerWorker): Promise<{ counted: string[]; active: string[] }> {
  const active = (await w.hosts(OPERATOR))
    .filter((h) => h.adminState === "active")
    .map((h) => h.hostId)
    .sort();
  return { counted: await w.activeHostIds(), active };
}

function worker(autoActivate: boolean): SchedulerWorker {
  const dir = mkdtempSync(join(tmpdir(), "bb-admin-"));
  const w = new SchedulerWorker({ dataDir: dir, manifest: manifest(autoActivate), publicUrl: "http://127.0.0.1:1" });
  dirs.set(w, dir);
  w.start();
  return w;
}

describe("admission counters that disagree with host states", () => {
  test("activating a disabled host is HOST_DISABLED and leaves its slot free for another host", async () => {
    const w = worker(true);
    try {
      for (const h of ["a", "b", "c"]) await enroll(w, h);
      await w.setHostState(OPERATOR, "a", "disabled");
      const refused = await w.setHostState(OPERATOR, "a", "active").then(
        () => "OK",
        (e: unknown) => (e instanceof BeachballError ? e.code : String(e)),
      );
      expect(refused).toBe("HOST_DISABLED");
      expect(await w.setHostState(OPERATOR, "a", "draining").catch((e: BeachballError) => e.code)).toBe(
        "HOST_DISABLED",
      );
      expect((await w.setHostState(OPERATOR, "a", "disabled")).adminState).toBe("disabled");
      await enroll(w, "d");
      expect((await w.setHostState(OPERATOR, "d", "active")).adminState).toBe("active");
      const c = await counters(w);
      expect(c.counted).toEqual(c.active);
      expect(c.active).toEqual(["b", "c", "d"]);
    } finally {
      await dispose(w);
    }
  });

  test(`random admin changes, several at once (${SEEDS} seeds × ${BATCHES} batches): the counted set is the active set, within the cap`, async () => {
    for (let seed = 1; seed <= SEEDS; seed++) {
      const rng = new SeededRandom(seed);
      const w = worker(rng.chance(0.5));
      try {
        for (const h of HOSTS) await enroll(w, h);
        for (let b = 0; b < BATCHES; b++) {
          const ops = Array.from({ length: 1 + rng.int(4) }, () => {
            const host = rng.pick(HOSTS);
            const kind = rng.pick(["active", "active", "draining", "disabled", "enroll"] as const);
            if (kind === "enroll") return () => enroll(w, host, rng.chance(0.5) ? 1000 : 2000);
            return () => w.setHostState(OPERATOR, host, kind);
          });
          const results = await Promise.allSettled(ops.map((op) => op()));
          for (const r of results)
            if (r.status === "rejected") {
              const code = r.reason instanceof BeachballError ? r.reason.code : String(r.reason);
              expect({ seed, batch: b, code, known: EXPECTED.has(code) }).toMatchObject({ known: true });
            }
          const c = await counters(w);
          expect({ seed, batch: b, counted: c.counted }).toEqual({ seed, batch: b, counted: c.active });
          expect(c.active.length).toBeLessThanOrEqual(MAX_ACTIVE);
        }
      } finally {
        await dispose(w);
      }
    }
  }, 120_000);

  test("over HTTP, activating a disabled host answers 409 HOST_DISABLED as problem+json", async () => {
    const s = await startTestScheduler();
    try {
      const t = await s.operator.enrollmentToken("http-host");
      const r = await fetch(`${s.url}/v1/agents/enroll`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(enrollBody(t.token)),
      });
      expect(r.status).toBe(201);
      await s.operator.setHostState("http-host", "disable");
      const res = await fetch(`${s.url}/v1/hosts/http-host/activate`, {
        method: "POST",
        headers: { authorization: `Bearer ${s.tokens.operatorToken}` },
      });
      expect(res.status).toBe(409);
      expect(res.headers.get("content-type")).toBe("application/problem+json");
      expect(((await res.json()) as { code: string }).code).toBe("HOST_DISABLED");
    } finally {
      await s.stop();
    }
  });
});
