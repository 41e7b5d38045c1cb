/**
 * Every full `bb` build uses the same flags: package.json's "build" script
 * spells BB_BUILD_FLAGS (ESM with bytecode, issue 19 "Fast start"), so
 * `npm run build`, compileBb and the packaging test cannot drift apart.
 */
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { BB_BUILD_FLAGS, BB_WORKER_ENTRIES } from "./bbBinary.ts";
import { HEALTH_WORKER_ENTRY } from "../scheduler/health/healthListener.ts";

test("package.json's build script compiles bin/bb.ts and BB_WORKER_ENTRIES with BB_BUILD_FLAGS", () => {
  const pkg = JSON.parse(readFileSync(join(import.meta.dir, "../../package.json"), "utf8")) as {
    scripts: Record<string, string>;
  };
  expect(pkg.scripts["build"]).toBe(
    `bun build ${BB_BUILD_FLAGS.join(" ")} bin/bb.ts ${BB_WORKER_ENTRIES.join(" ")} --outfile dist/bb`,
  );
  expect(BB_WORKER_ENTRIES).toContain(HEALTH_WORKER_ENTRY);
});
