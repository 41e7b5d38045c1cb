import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, appendFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { trimConsoleLog } from "./consoleLog.ts";

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
