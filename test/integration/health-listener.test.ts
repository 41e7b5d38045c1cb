/**
 * The health listener (`--health-listen`, src/scheduler/health/): GET
 * /healthz served by a thread of its own answers while the scheduler's main
 * event loop is stalled, and says so (503 SCHEDULER_STALLED), then healthy
 * again once the loop runs; it refuses bad input with stable codes and
 * bounded reads; the main port's /healthz answers as before. The stall is a
 * real busy loop on this (the scheduler's) thread; the health requests come
 * from a child process, since this thread cannot send any meanwhile. No
 * timing is asserted: the stall (STALL_MS) is many times the test's bound
 * (MAX_STALL_MS); bench/burst.ts measures latency.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect } from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FAKE_IMAGE_DIGEST } from "../support/scheduler.ts";
import { ensureDevManifest } from "../../src/scheduler/manifest.ts";
import { serveScheduler, type RunningScheduler } from "../../src/scheduler/serve.ts";
import { HEALTH_MAX_HEAD_BYTES } from "../../src/scheduler/health/healthAnswer.ts";

/** The test's stall bound, ms (the shipped MAX_LOOP_STALL_MS is 2 s). */
const MAX_STALL_MS = 300;
/** How long the main loop is kept busy, ms. */
const STALL_MS = 2_000;

let dir = "";
let s: RunningScheduler;
let healthUrl = "";

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "bb-health-listener-"));
  const dev = ensureDevManifest(join(dir, "m"), FAKE_IMAGE_DIGEST);
  s = serveScheduler({
    dataDir: join(dir, "data"),
    manifestPath: dev.manifestPath,
    hostname: "127.0.0.1",
    port: 0,
    healthListen: { hostname: "127.0.0.1", port: 0, maxStallMs: MAX_STALL_MS },
  });
  healthUrl = (await s.health!).url;
});

afterAll(async () => {
  await s?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A child process that GETs /healthz every 20 ms and prints `status code` per answer, until stdin closes. */
const POLLER = `
const url = process.argv[1];
let open = true;
(async () => { for await (const _ of console) {} open = false; })();
console.log("ready");
while (open) {
  try {
    const r = await fetch(url, { signal: AbortSignal.timeout(5000) });
    const b = await r.json();
    console.log(r.status + " " + (b.code ?? "ok"));
  } catch (e) { console.log("error " + e.message); }
  await Bun.sleep(20);
}
process.exit(0);
`;

/** Raw request to the health listener; answers the status line and the rest. */
function raw(port: number, request: string): Promise<string> {
  return new Promise((done, fail) => {
    const sock = connect({ port, host: "127.0.0.1" });
    let text = "";
    sock.on("error", fail);
    sock.on("data", (d: Buffer) => (text += d.toString("latin1")));
    sock.on("close", () => done(text));
    sock.write(request);
  });
}

describe("health listener", () => {
  test("reports healthy normally, and the main port's /healthz answers as before", async () => {
    const r = await fetch(`${healthUrl}/healthz`);
    expect(r.status).toBe(200);
    const body = (await r.json()) as { ok: boolean; mainLoopAgeMs: number };
    expect(body.ok).toBe(true);
    expect(typeof body.mainLoopAgeMs).toBe("number");
    const main = await fetch(`${s.url}/healthz`);
    expect(main.status).toBe(200);
    expect(await main.json()).toEqual({ ok: true });
    expect(new URL(healthUrl).port).not.toBe(new URL(s.url).port);
  });

  test("a stalled main loop: the health listener answers meanwhile with 503 SCHEDULER_STALLED, then healthy again", async () => {
    const child = Bun.spawn([process.execPath, "-e", POLLER, `${healthUrl}/healthz`], {
      stdin: "pipe",
      stdout: "pipe",
      stderr: "inherit",
    });
    try {
      const reader = child.stdout.getReader();
      let out = "";
      const decoder = new TextDecoder();
      const lines = () => out.split("\n").filter((l) => l !== "");
      while (!lines().some((l) => l.startsWith("200 "))) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`the poller ended: ${out}`);
        out += decoder.decode(value);
      }
      const before = lines().length;
      // The stall: this thread (the scheduler's main loop) runs nothing else for STALL_MS.
      const until = performance.now() + STALL_MS;
      while (performance.now() < until) {
        /* busy */
      }
      // Whatever the poller printed during the stall is in the pipe now; give it a moment after, then end it.
      await Bun.sleep(200);
      child.stdin.end();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        out += decoder.decode(value);
      }
      const during = lines().slice(before);
      expect(during).toContain("503 SCHEDULER_STALLED");
      expect(during.filter((l) => l.startsWith("error"))).toEqual([]);
    } finally {
      child.kill();
      await child.exited;
    }
    // The loop runs again: health says so (within a few beats).
    let status = 0;
    for (let i = 0; i < 100 && status !== 200; i++) {
      status = (await fetch(`${healthUrl}/healthz`)).status;
      if (status !== 200) await Bun.sleep(20);
    }
    expect(status).toBe(200);
  });

  test("a stalled answer is a problem body with the stable code, the age and the bound", async () => {
    const child = Bun.spawn(
      [
        process.execPath,
        "-e",
        `await Bun.sleep(Number(process.argv[2])); const r = await fetch(process.argv[1]); console.log(JSON.stringify({ status: r.status, retry: r.headers.get("retry-after"), type: r.headers.get("content-type"), body: await r.json() }));`,
        `${healthUrl}/healthz`,
        String(MAX_STALL_MS * 3),
      ],
      { stdout: "pipe", stderr: "inherit" },
    );
    const until = performance.now() + STALL_MS;
    while (performance.now() < until) {
      /* busy */
    }
    const got = JSON.parse(await new Response(child.stdout).text()) as {
      status: number;
      retry: string;
      type: string;
      body: { code: string; extra: { mainLoopAgeMs: number; maxStallMs: number } };
    };
    await child.exited;
    expect(got.status).toBe(503);
    expect(got.retry).toBe("1");
    expect(got.type).toBe("application/problem+json");
    expect(got.body.code).toBe("SCHEDULER_STALLED");
    expect(got.body.extra.maxStallMs).toBe(MAX_STALL_MS);
    expect(got.body.extra.mainLoopAgeMs).toBeGreaterThan(MAX_STALL_MS);
  });

  test("bad input: unknown path 404, other method 405, a query 400, a body 413, an oversized head refused, each with a stable code", async () => {
    const code = async (r: Response) => ((await r.json()) as { code: string }).code;
    const unknown = await fetch(`${healthUrl}/metrics`);
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get("content-type")).toBe("application/problem+json");
    expect(await code(unknown)).toBe("NOT_FOUND");
    const long = await fetch(`${healthUrl}/${"a".repeat(4000)}`);
    expect(long.status).toBe(404);
    expect(await code(long)).toBe("NOT_FOUND");
    const post = await fetch(`${healthUrl}/healthz`, { method: "POST" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
    expect(await code(post)).toBe("METHOD_NOT_ALLOWED");
    const query = await fetch(`${healthUrl}/healthz?x=1`);
    expect(query.status).toBe(400);
    expect(await code(query)).toBe("VALIDATION_FAILED");
    const port = Number(new URL(healthUrl).port);
    const withBody = await raw(
      port,
      "GET /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\nconnection: close\r\n\r\nx",
    );
    expect(withBody).toStartWith("HTTP/1.1 413");
    expect(withBody).toContain('"code":"BODY_TOO_LARGE"');
    for (const head of ["content-length: 1000000", "transfer-encoding: chunked"]) {
      const large = await raw(port, `GET /healthz HTTP/1.1\r\nhost: x\r\n${head}\r\nconnection: close\r\n\r\n`);
      expect(large).toStartWith("HTTP/1.1 413");
      expect(large).toContain('"code":"BODY_TOO_LARGE"');
    }
    const big = await raw(
      port,
      `GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: ${"a".repeat(HEALTH_MAX_HEAD_BYTES * 4)}\r\n\r\n`,
    );
    expect(big).toStartWith("HTTP/1.1 431");
    // The listener still answers after all of it.
    expect((await fetch(`${healthUrl}/healthz`)).status).toBe(200);
  });
  test("a taken health address: the listener's start rejects with Bun's message, and the scheduler still stops", async () => {
    const other = serveScheduler({
      dataDir: join(dir, "data2"),
      manifestPath: join(dir, "m", "manifest.json"),
      hostname: "127.0.0.1",
      port: 0,
      healthListen: { hostname: "127.0.0.1", port: Number(new URL(healthUrl).port) },
    });
    try {
      await expect(other.health!).rejects.toThrow(`health listener 127.0.0.1:${new URL(healthUrl).port}`);
    } finally {
      await other.stop();
    }
    expect((await fetch(`${healthUrl}/healthz`)).status).toBe(200);
  });
});
