import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, appendFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { mapTrimmedOffset, trimConsoleLog, trimConsoleLogAt } from "./consoleLog.ts";

const dir = mkdtempSync(join(tmpdir(), "bb-console-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test("keeps head and tail under the budget and counts trimmed bytes across calls", async () => {
  const p = join(dir, "console.log");
  writeFileSync(p, "HEAD".repeat(100) + "x".repeat(10_000) + "TAIL".repeat(100));
  expect(await trimConsoleLog(p, 2000)).toBeGreaterThan(0);
  let text = readFileSync(p, "latin1");
  expect(statSync(p).size).toBeLessThanOrEqual(2000);
  expect(text.startsWith("HEAD".repeat(100))).toBe(true);
  expect(text.endsWith("TAIL".repeat(100))).toBe(true);
  const first = Number(/\[\.\.\. (\d+) bytes trimmed \.\.\.\]/.exec(text)?.[1]);
  expect(first).toBe(10_800 - statSync(p).size + /\n\[.*\]\n/.exec(text)![0].length);
  appendFileSync(p, "y".repeat(5000));
  const dropped = await trimConsoleLog(p, 2000);
  text = readFileSync(p, "latin1");
  expect(statSync(p).size).toBeLessThanOrEqual(2000);
  expect(Number(/\[\.\.\. (\d+) bytes trimmed \.\.\.\]/.exec(text)?.[1])).toBe(first + dropped);
  expect(text.match(/bytes trimmed/g)?.length).toBe(1);
});

test("is a no-op under budget or when absent", async () => {
  const p = join(dir, "small.log");
  writeFileSync(p, "hello");
  expect(await trimConsoleLog(p, 100)).toBe(0);
  expect(readFileSync(p, "utf8")).toBe("hello");
  expect(await trimConsoleLog(join(dir, "absent.log"), 100)).toBe(0);
});

test("console lines lost at a trim: bytes QEMU appends while the tail is copied are kept after it, where the offset map says", () => {
  const p = join(dir, "racing.log");
  const lines = (from: number, to: number) =>
    Array.from({ length: to - from }, (_, i) => `line ${from + i}\n`).join("");
  writeFileSync(p, lines(0, 2000));
  const before = statSync(p).size;
  const t = trimConsoleLogAt(p, 4000, () => appendFileSync(p, lines(2000, 2010)))!;
  const text = readFileSync(p, "latin1");
  expect(text.endsWith(lines(1900, 2010).slice(-2000))).toBe(true);
  expect(text.endsWith(lines(2000, 2010))).toBe(true);
  expect(text.slice(mapTrimmedOffset(t, before).offset)).toBe(lines(2000, 2010));
});
