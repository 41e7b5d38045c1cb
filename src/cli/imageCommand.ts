/**
 * `bb image …`: operator commands for images. Today only `dev-build`, which
 * builds the unsigned dev image from Debian packages and this repository's
 * `bb` binary, and prints its digest.
 *
 * Only translates arguments to buildDevImage (spec "Images"); exit codes per
 * STYLE: 0 ok, 1 error. Must never: print secrets (there are none here).
 */
import { existsSync } from "node:fs";
import { basename, resolve } from "node:path";
import { defineCommand } from "citty";
import { consola } from "consola";

/** Builds dist/bb from bin/bb.ts with Bun; returns its absolute path. Throws when the build fails. */
async function compileBb(): Promise<string> {
  const bun = Bun.which("bun") ?? resolve("node_modules/.bin/bun");
  const out = resolve("dist/bb");
  const p = Bun.spawn([bun, "build", "--compile", "bin/bb.ts", "--outfile", out], { stdout: "pipe", stderr: "pipe" });
  const [err, code] = await Promise.all([new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`bun build --compile bin/bb.ts failed (exit ${code}): ${err.trim().slice(-800)}`);
  return out;
}

/** The bb binary to install: --bb, else a fresh dist/bb in a source checkout, else this executable. */
async function pickBb(flag: string | undefined): Promise<string> {
  if (flag) return resolve(flag);
  if (existsSync("bin/bb.ts")) {
    consola.start("compiling dist/bb");
    return compileBb();
  }
  if (basename(process.execPath) !== "bun") return process.execPath;
  throw new Error("no bb binary: pass --bb PATH or run from the source checkout");
}

const devBuild = defineCommand({
  meta: { name: "dev-build", description: "Build the unsigned dev image (Debian kernel + busybox + bb) and print its digest" },
  args: {
    out: { type: "string", description: "Image output directory", default: ".bb/images/dev" },
    cache: { type: "string", description: "Cache directory for the kernel download", default: ".bb/cache" },
    bb: { type: "string", description: "bb binary to put in the image (default: compile dist/bb)" },
    json: { type: "boolean", description: "Print the result as JSON", default: false },
  },
  async run({ args }) {
    try {
      const { buildDevImage } = await import("../agent/image/devBuild.ts");
      const started = performance.now();
      const r = await buildDevImage({
        outDir: args.out, cacheDir: args.cache, bbBinaryPath: await pickBb(args.bb),
        log: args.json ? undefined : (m) => consola.info(m),
      });
      const ms = Math.round(performance.now() - started);
      if (args.json) console.log(JSON.stringify({ digest: r.digest, dir: r.dir, reused: r.reused, buildMs: ms }));
      else {
        consola.success(`${r.reused ? "reused" : "built"} ${r.dir} in ${ms} ms`);
        console.log(r.digest);
      }
    } catch (e) {
      consola.error((e as Error).message);
      process.exitCode = 1;
    }
  },
});

/** The `bb image` command group. */
export const imageCommand = defineCommand({
  meta: { name: "image", description: "Build and inspect Beachball images" },
  subCommands: { "dev-build": devBuild },
});
