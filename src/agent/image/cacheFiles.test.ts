import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { copyBounded } from "./cacheFiles.ts";

const work = mkdtempSync(join(tmpdir(), "bb-cachefiles-test-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

async function* chunks(parts: Uint8Array[]) {
  yield* parts;
}

test("copyBounded writes a private, sparse, byte-identical copy and hashes it", async () => {
  const parts = [new Uint8Array(2 << 20), new Uint8Array(1000).fill(5), new Uint8Array(1 << 20)]; // 2 MiB zeros, data, 1 MiB zeros
  const all = Buffer.concat(parts);
  const r = await copyBounded(chunks(parts), work, all.length);
  expect(r.sizeBytes).toBe(all.length);
  expect(r.sha256).toBe(createHash("sha256").update(all).digest("hex"));
  expect(readFileSync(r.path).equals(all)).toBe(true);
  expect(statSync(r.path).mode & 0o777).toBe(0o600);
  expect(statSync(r.path).blocks * 512).toBeLessThan(1 << 20); // zero runs are holes (trailing one too)
});

test("copyBounded stops one byte past the bound", async () => {
  const r = await copyBounded(chunks([new Uint8Array(700).fill(1), new Uint8Array(700).fill(2)]), work, 1000);
  expect(r.sizeBytes).toBe(1001);
  expect(statSync(r.path).size).toBe(1001);
});
