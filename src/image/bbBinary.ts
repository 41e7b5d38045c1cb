/**
 * Finds or builds the guest binary that goes into an image: --bb PATH, else
 * a fresh guest-only build (`dist/bb-guest`, compiled from bin/bb-guest.ts
 * with bytecode) from this checkout, else the running compiled executable
 * itself (a full `bb` also runs `bb guest`).
 *
 * Must never: put anything but a Bun-compiled `bb` or `bb-guest` into an
 * image.
 */
import { existsSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";

async function bunBuild(args: string[], what: string): Promise<void> {
  const bun = Bun.which("bun") ?? resolve("node_modules/.bin/bun");
  const p = Bun.spawn([bun, "build", ...args], { stdout: "pipe", stderr: "pipe" });
  const [err, code] = await Promise.all([new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`bun build ${what} failed (exit ${code}): ${err.trim().slice(-800)}`);
}

/**
 * The flags every full `bb` build uses (package.json "build", compileBb,
 * test/packaging): ESM with bytecode, so the bundle is parsed at build time
 * and `bb --version` starts in about half the time (issue 19, "Fast
 * start"; bench/start.ts). test/cli-definitions.test.ts checks package.json
 * uses these.
 */
export const BB_BUILD_FLAGS = ["--compile", "--format=esm", "--bytecode"] as const;

/**
 * Worker entries every full `bb` embeds beside bin/bb.ts, relative to the
 * repository: the scheduler's health listener thread (equal to
 * src/scheduler/health/healthListener.ts's HEALTH_WORKER_ENTRY; the test
 * beside this file checks it). Bun bundles a Worker only when it is an
 * entry point of the build.
 */
export const BB_WORKER_ENTRIES = ["src/scheduler/health/health.worker.ts"] as const;

/** Compiles bin/bb.ts (with BB_WORKER_ENTRIES) into `out` (default dist/bb) with Bun and BB_BUILD_FLAGS; returns its absolute path. Throws with Bun's output when the build fails. */
export async function compileBb(out = resolve("dist/bb"), entry = resolve("bin/bb.ts")): Promise<string> {
  const root = resolve(dirname(entry), "..");
  const workers = BB_WORKER_ENTRIES.map((w) => join(root, w));
  await bunBuild([...BB_BUILD_FLAGS, entry, ...workers, "--outfile", out], "bin/bb.ts");
  return out;
}

/**
 * Compiles the guest-only entry bin/bb-guest.ts into `out` (default
 * dist/bb-guest) with `--bytecode --minify`: the guest's JavaScript is
 * parsed at build time, and nothing but src/guest and src/protocol is
 * loaded at start. Returns the absolute path. Throws with Bun's output.
 */
export async function compileGuest(
  out = resolve("dist/bb-guest"),
  entry = resolve("bin/bb-guest.ts"),
): Promise<string> {
  await bunBuild(["--compile", "--bytecode", "--minify", entry, "--outfile", out], "bin/bb-guest.ts");
  return out;
}

/** The guest binary to install in an image. Throws when none can be found or built. */
export async function pickBb(flag: string | undefined, log: (m: string) => void = () => {}): Promise<string> {
  if (flag) return resolve(flag);
  if (existsSync("bin/bb-guest.ts")) {
    log("compiling dist/bb-guest");
    return compileGuest();
  }
  if (basename(process.execPath) !== "bun") return process.execPath;
  throw new Error("no bb binary: pass --bb PATH or run from the source checkout");
}
