/** Kept consoles of failed placements: named with their time, deleted once the retention passed, nothing else touched. */
import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { keptConsolePath, pruneKeptConsoles } from "./keptConsoles.ts";

const dir = mkdtempSync(join(tmpdir(), "bb-kept-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test("prunes by the time in the name", () => {
  mkdirSync(dir, { recursive: true });
  const old = keptConsolePath(dir, "bb-aaaa", 1_700_000_000_000);
  const fresh = keptConsolePath(dir, "bb-bbbb", 1_700_000_050_000);
  for (const p of [old, fresh, join(dir, "notes.txt")]) writeFileSync(p, "x");
  expect(pruneKeptConsoles(dir, 60_000, 1_700_000_070_000)).toBe(1);
  expect(existsSync(old)).toBe(false);
  expect(existsSync(fresh)).toBe(true);
  expect(existsSync(join(dir, "notes.txt"))).toBe(true);
  expect(pruneKeptConsoles(join(dir, "absent"), 1, 1)).toBe(0);
});
