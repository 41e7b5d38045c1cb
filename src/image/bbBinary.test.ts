/**
 * Every full `bb` build uses the same flags: package.json's "build" script
 * spells BB_BUILD_FLAGS (ESM with bytecode, issue 19 "Fast start"), so
 * `npm run build`, compileBb and the packaging test cannot drift apart.
 */
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { BB_BUILD_FLAGS } from "./bbBinary.ts";

test("package.json's build script compiles bin/bb.ts with BB_BUILD_FLAGS", () => {
  const pkg = JSON.parse(readFileSync(join(import.meta.dir, "../../package.json"), "utf8")) as {
    scripts: Record<string, string>;
  };
  expect(pkg.scripts["build"]).toBe(`bun build ${BB_BUILD_FLAGS.join(" ")} bin/bb.ts --outfile dist/bb`);
});
