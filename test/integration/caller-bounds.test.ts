/**
 * A burst from one caller is shed, not served at everyone's cost (issue 18
 * item 21): over HTTP on a real scheduler, one controller parks
 * MAX_FOLLOWS_PER_CALLER log follows (one per allocation); its next follow
 * is answered at once with 429 CONCURRENCY_LIMITED, `Retry-After` and a
 * problem body, while its ordinary requests, another caller and /healthz
 * are still served. No timing is asserted (bench/burst.ts measures health
 * latency under a burst).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FAKE_IMAGE_DIGEST, startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import { ensureDevManifest } from "../../src/scheduler/manifest.ts";
import { MAX_FOLLOWS_PER_CALLER } from "../../src/scheduler/callerLimits.ts";

let s: TestScheduler;
let dir = "";

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "bb-caller-bounds-"));
  // More active allocations than the development manifest's 16, so the follow bound is the one met.
  const dev = ensureDevManifest(dir, FAKE_IMAGE_DIGEST);
  const m = JSON.parse(readFileSync(dev.manifestPath, "utf8")) as { limits?: Record<string, number> };
  m.limits = { ...m.limits, maxConcurrentAllocationsPerController: 100 };
  writeFileSync(dev.manifestPath, JSON.stringify(m), { mode: 0o600 });
  s = await startTestScheduler({ dir });
});

afterAll(async () => {
  await s?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("per-caller concurrency bounds over HTTP", () => {
  test("one follow past the bound is 429 CONCURRENCY_LIMITED with Retry-After; the caller's other requests, other callers and health still answer", async () => {
    const ids: string[] = [];
    for (let i = 0; i <= MAX_FOLLOWS_PER_CALLER; i++)
      ids.push(
        (await s.controller.create({ clientRequestId: `burst-${i}`, workloadClass: "ci-small" })).view.allocationId,
      );
    const auth = { authorization: `Bearer ${s.tokens.token}` };
    const follow = (id: string) => fetch(`${s.url}/v1/allocations/${id}/logs?follow=1&offset=0`, { headers: auth });
    const parked = ids.slice(0, MAX_FOLLOWS_PER_CALLER).map((id) => follow(id).catch(() => null));
    // The parked follows are in flight once their allocations have been asked; wait for the shed to appear.
    let refused: Response | null = null;
    for (let i = 0; i < 20 && !refused; i++) {
      // A follow that is not shed parks (up to 20 s): give up on it after a second and try again.
      const r = await fetch(`${s.url}/v1/allocations/${ids[MAX_FOLLOWS_PER_CALLER]}/logs?follow=1&offset=0`, {
        headers: auth,
        signal: AbortSignal.timeout(1000),
      }).catch(() => null);
      if (r?.status === 429) refused = r;
      else {
        await r?.text().catch(() => "");
        await Bun.sleep(25);
      }
    }
    expect(refused).not.toBeNull();
    const p = (await refused!.json()) as { code: string; status: number; detail: string };
    expect([refused!.headers.get("retry-after"), refused!.headers.get("content-type"), p.code, p.status]).toEqual([
      "1",
      "application/problem+json",
      "CONCURRENCY_LIMITED",
      429,
    ]);
    expect(p.detail).toBe(`this caller already follows ${MAX_FOLLOWS_PER_CALLER} logs; retry when one has ended`);
    // The same caller's ordinary requests, another caller and the health check are not shed.
    expect((await fetch(`${s.url}/v1/allocations/${ids[0]}`, { headers: auth })).status).toBe(200);
    expect(
      (await fetch(`${s.url}/v1/hosts`, { headers: { authorization: `Bearer ${s.tokens.operatorToken}` } })).status,
    ).toBe(200);
    expect((await fetch(`${s.url}/healthz`)).status).toBe(200);
    // Stopping the scheduler ends the parked follows (afterAll); they answer or fail, nothing is left behind.
    void parked;
  }, 60_000);
});
