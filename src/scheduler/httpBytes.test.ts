/**
 * The front door's byte counters (httpBytes.ts): request body bytes the
 * guard read and every answer's body bytes, counted through the real app
 * (app.ts over a SchedulerWorker on a temporary directory) and on their
 * own: HEAD and body-less answers count nothing, an answer keeps its body.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildApp } from "./app.ts";
import { HttpByteCounters, REQUEST_BYTES_METRIC, RESPONSE_BYTES_METRIC } from "./httpBytes.ts";
import type { DeploymentManifest } from "./manifest.ts";
import { Metrics } from "./metrics.ts";
import { SchedulerWorker } from "./worker.ts";

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** The value of counter `name` in `m`'s exposition (0 when absent). */
function counter(m: Metrics, name: string): number {
  const line = m
    .render([])
    .split("\n")
    .find((l) => l.startsWith(`${name} `));
  return line ? Number(line.slice(name.length + 1)) : 0;
}

/** Lets the counting of answers already given finish (it reads a clone beside the send). */
const settle = () => Bun.sleep(0).then(() => Bun.sleep(0));

test("an answer's body is counted once, and stays whole for the client; HEAD, body-less answers and 0 request bytes count nothing", async () => {
  const m = new Metrics();
  const c = new HttpByteCounters(m);
  const res = c.response(new Response("x".repeat(1000), { headers: { "content-type": "text/plain" } }), "GET");
  expect(await res.text()).toBe("x".repeat(1000));
  c.response(new Response("y".repeat(50)), "HEAD");
  c.response(new Response(null, { status: 204 }), "GET");
  const streamed = c.response(
    new Response(
      new ReadableStream({
        start(ctl) {
          ctl.enqueue(new Uint8Array(300));
          ctl.enqueue(new Uint8Array(200));
          ctl.close();
        },
      }),
    ),
    "GET",
  );
  expect((await streamed.arrayBuffer()).byteLength).toBe(500);
  c.request(0);
  c.request(123);
  await settle();
  expect(counter(m, RESPONSE_BYTES_METRIC)).toBe(1500);
  expect(counter(m, REQUEST_BYTES_METRIC)).toBe(123);
});

test("through the front door: a request's body bytes read by the guard and every answer's body bytes (refusals included) are counted", async () => {
  const dir = mkdtempSync(join(tmpdir(), "bb-http-bytes-"));
  dirs.push(dir);
  const manifest: DeploymentManifest = {
    version: 1,
    region: "local",
    principals: [],
    workloadClasses: {},
    limits: { maxConcurrentAllocationsPerController: 4, maxRegisteredHosts: 4 },
    hostEnrollment: { autoActivate: false },
  };
  const w = new SchedulerWorker({ dataDir: dir, manifest, publicUrl: "http://127.0.0.1:1" });
  w.start();
  try {
    const app = buildApp(w);
    const m = w.env.metrics;
    const body = JSON.stringify({
      token: `bbe_${"0".repeat(48)}`,
      capacity: { cpuMillis: 1000, memoryMiB: 1024, ephemeralDiskMiB: 1024, maxPlacements: 2 },
      region: "local",
      architecture: "x86_64",
      agentProtocolVersion: "1.0",
      vmmDriver: "qemu-microvm",
    });
    const reqBefore = counter(m, REQUEST_BYTES_METRIC);
    const resBefore = counter(m, RESPONSE_BYTES_METRIC);
    const refused = await app.handle(
      new Request("http://127.0.0.1/v1/agents/enroll", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
      }),
    );
    const refusedText = await refused.text();
    expect(refused.status).toBeGreaterThanOrEqual(400);
    const unknown = await app.handle(new Request("http://127.0.0.1/no/such/route"));
    const unknownText = await unknown.text();
    const health = await app.handle(new Request("http://127.0.0.1/healthz"));
    const healthText = await health.text();
    await app.handle(new Request("http://127.0.0.1/healthz", { method: "HEAD" }));
    await settle();
    expect(counter(m, REQUEST_BYTES_METRIC) - reqBefore).toBe(Buffer.byteLength(body));
    expect(counter(m, RESPONSE_BYTES_METRIC) - resBefore).toBe(
      Buffer.byteLength(refusedText) + Buffer.byteLength(unknownText) + Buffer.byteLength(healthText),
    );
    expect(await w.metrics({ id: "operator:t", role: "operator" })).toContain(
      `# TYPE ${RESPONSE_BYTES_METRIC} counter`,
    );
  } finally {
    await w.close();
  }
});

test("a JSON answer is counted from its text once (UTF-8 bytes, not characters), not again by response(); HEAD counts 0", async () => {
  const m = new Metrics();
  const c = new HttpByteCounters(m);
  const text = JSON.stringify({ name: "é✓" });
  const res = c.response(c.json(text, 201, "GET"), "GET");
  expect(res.status).toBe(201);
  expect(res.headers.get("content-type")).toBe("application/json");
  expect(await res.text()).toBe(text);
  c.response(c.json(text, 200, "HEAD"), "HEAD");
  await settle();
  expect(counter(m, RESPONSE_BYTES_METRIC)).toBe(Buffer.byteLength(text, "utf8"));
});
