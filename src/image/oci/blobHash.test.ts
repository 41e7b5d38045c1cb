/**
 * The shared hashing worker (blobHash.ts): requests made together are all
 * answered with their own file's digest, a failing one is rejected without
 * taking the others down, the size limit stops counting, and the worker is
 * ended once nothing is pending (no thread left behind by a build).
 */
import { afterAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hashFileOffThread, hashWorkerRunning } from "./blobHash.ts";

const work = mkdtempSync(join(tmpdir(), "bb-blob-hash-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** Files of 0, 1 byte, 1 MiB + 3 bytes (past one worker read) and 3 MiB, with distinct bytes. */
function files(): { path: string; data: Buffer }[] {
  return [0, 1, (1 << 20) + 3, 3 << 20].map((size, i) => {
    const data = Buffer.alloc(size, i + 1);
    if (size > 0) data[size - 1] = 0xee;
    const path = join(work, `f${i}`);
    writeFileSync(path, data);
    return { path, data };
  });
}

describe("hashFileOffThread", () => {
  test("concurrent requests share one worker, each gets its own digest, and the worker ends when idle", async () => {
    const fs = files();
    const all = Promise.all(fs.map((f) => hashFileOffThread(f.path, 1e9)));
    expect(hashWorkerRunning()).toBe(true);
    const got = await all;
    got.forEach((g, i) => {
      expect(g.size).toBe(fs[i]!.data.length);
      expect(g.hex).toBe(createHash("sha256").update(fs[i]!.data).digest("hex"));
    });
    expect(hashWorkerRunning()).toBe(false);
  });

  test("a missing file is rejected on its own; the requests beside it are answered", async () => {
    const fs = files();
    const results = await Promise.allSettled([
      hashFileOffThread(fs[2]!.path, 1e9),
      hashFileOffThread(join(work, "missing"), 1e9),
      hashFileOffThread(fs[3]!.path, 1e9),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect(String((results[1] as PromiseRejectedResult).reason)).toContain("missing");
    expect((results[2] as PromiseFulfilledResult<{ size: number }>).value.size).toBe(3 << 20);
    expect(hashWorkerRunning()).toBe(false);
  });

  test("past the limit the count stops and no digest is given", async () => {
    const f = files()[3]!;
    const r = await hashFileOffThread(f.path, 1 << 20);
    expect(r.hex).toBe("");
    expect(r.size).toBeGreaterThan(1 << 20);
    expect(hashWorkerRunning()).toBe(false);
  });
});
