/**
 * Finds or builds the `bb` executable that goes into the dev image: --bb
 * PATH, else a fresh `dist/bb` compiled from this checkout, else the running
 * compiled executable itself.
 */
import { existsSync } from "node:fs";
import { basename, resolve } from "node:path";

/** Compiles bin/bb.ts into dist/bb with Bun; returns its absolute path. Throws with Bun's output when the build fails. */
export async function compileBb(): Promise<string> {
  const bun = Bun.which("bun") ?? resolve("node_modules/.bin/bun");
  const out = resolve("dist/bb");
  const p = Bun.spawn([bun, "build", "--compile", "bin/bb.ts", "--outfile", out], { stdout: "pipe", stderr: "pipe" });
  const [err, code] = await Promise.all([new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`bun build --compile bin/bb.ts failed (exit ${code}): ${err.trim().slice(-800)}`);
  return out;
}

/** The bb binary to install in an image. Throws when none can be found or built. */
export async function pickBb(flag: string | undefined, log: (m: string) => void = () => {}): Promise<string> {
  if (flag) return resolve(flag);
  if (existsSync("bin/bb.ts")) {
    log("compiling dist/bb");
    return compileBb();
  }
  if (basename(process.execPath) !== "bun") return process.execPath;
  throw new Error("no bb binary: pass --bb PATH or run from the source checkout");
}
