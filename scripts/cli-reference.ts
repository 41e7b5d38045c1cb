#!/usr/bin/env bun
/**
 * Writes docs/cli.md from the command definitions (src/command/reference.ts).
 * `--check` writes nothing and exits 1 when the checked-in file differs.
 * Usage: bun scripts/cli-reference.ts [--check]
 */
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { walkCommands } from "../src/command/define.ts";
import { renderReference } from "../src/command/reference.ts";
import { bbCommand } from "../bin/root.ts";

const path = resolve(import.meta.dir, "../docs/cli.md");
const text = renderReference(await walkCommands(bbCommand));
if (process.argv.includes("--check")) {
  const same = readFileSync(path, "utf8") === text;
  if (!same) console.error("docs/cli.md is stale: run `bun scripts/cli-reference.ts`");
  process.exit(same ? 0 : 1);
}
writeFileSync(path, text);
console.error(`wrote ${path}`);
