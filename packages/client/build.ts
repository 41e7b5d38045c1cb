/**
 * Builds the installable client package `@beachball/client`
 * (packages/client/, issue 18 item 12): src/client/ bundled by `bun build`
 * into one ESM file for Node ≥ 20 (dist/index.js; @sinclair/typebox stays
 * an import, a dependency of the package), and its declarations emitted by
 * tsc (dist/types/, import specifiers rewritten from `.ts` to `.js` so any
 * TypeScript resolution mode finds them). `npm pack` runs it (prepack);
 * `bun packages/client/build.ts` runs it by hand. Throws (exit 1) when
 * either step fails or the bundle names a Bun-only API.
 * Must never: bundle scheduler, agent or CLI code (only what src/client/index.ts reaches).
 */
import { readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");
const OUT = join(ROOT, "packages/client/dist");
const BUN = join(ROOT, "node_modules/.bin/bun");
const TSC = join(ROOT, "node_modules/.bin/tsc");

function run(argv: string[]): void {
  const p = Bun.spawnSync(argv, { cwd: ROOT, stdout: "inherit", stderr: "inherit" });
  if (p.exitCode !== 0) throw new Error(`${argv.slice(0, 3).join(" ")} … failed (exit ${p.exitCode})`);
}

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => (statSync(join(dir, n)).isDirectory() ? files(join(dir, n)) : [join(dir, n)]));
}

rmSync(OUT, { recursive: true, force: true });
run([
  BUN,
  "build",
  "src/client/index.ts",
  "--target",
  "node",
  "--format",
  "esm",
  "--external",
  "@sinclair/typebox",
  "--outdir",
  OUT,
]);
const bundle = readFileSync(join(OUT, "index.js"), "utf8");
if (/\bBun\.|from\s+"bun(:[a-z]+)?"/.test(bundle)) throw new Error("the client bundle uses a Bun-only API");
run([TSC, "-p", "packages/client/tsconfig.build.json"]);
for (const f of files(join(OUT, "types"))) {
  writeFileSync(f, readFileSync(f, "utf8").replace(/(from\s+"\.{1,2}\/[^"]+)\.ts"/g, '$1.js"'));
}
console.log(`built ${OUT}`);
