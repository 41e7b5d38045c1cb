/**
 * Builds the workerd bundle: deploy/workerd/entry.ts (the scheduler's front
 * and object classes) into dist/workerd/entry.js, one ES module with the
 * migrations' SQL inlined, and copies config.capnp beside it.
 *
 *   bun deploy/workerd/build.ts [--out dist/workerd]
 *   node_modules/.bin/workerd serve dist/workerd/config.capnp \
 *     --directory-path storage=<dir> --socket-addr http=127.0.0.1:8787   (env BB_MANIFEST = the manifest JSON)
 */
import { copyFileSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";

/** Builds into `out`; returns the config path. Throws with the bundler's messages on failure. */
export async function buildWorkerd(out: string): Promise<string> {
  mkdirSync(out, { recursive: true });
  const r = await Bun.build({
    entrypoints: [resolve(import.meta.dir, "entry.ts")],
    outdir: out,
    naming: "entry.js",
    target: "browser",
    format: "esm",
    external: ["cloudflare:workers", "node:*"],
    minify: false,
  });
  if (!r.success) throw new Error(`workerd bundle failed:\n${r.logs.map(String).join("\n")}`);
  const config = join(out, "config.capnp");
  copyFileSync(resolve(import.meta.dir, "config.capnp"), config);
  return config;
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { out: { type: "string", default: "dist/workerd" } } });
  console.log(await buildWorkerd(resolve(values.out!)));
}
