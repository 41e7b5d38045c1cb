/**
 * Builds the binaries: the full `bb` (Bun, compileBb) and the guest that
 * goes into an image (`beachball-guest`, static Go from guest/,
 * compileGuest; docs/adr/0170-static-go-guest.md), and picks the guest for
 * an image build: --bb PATH, else a build of this checkout's guest/.
 *
 * Must never: download a Go module (GO_BUILD_ENV), or put a guest over
 * MAX_GUEST_BINARY_BYTES into an image.
 */
import { createHash } from "node:crypto";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  statSync,
} from "node:fs";
import { dirname, join, resolve } from "node:path";

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

/** Environment of every Go build and test (issue 20): no module download, no toolchain switch, no C (a static binary). */
export const GO_BUILD_ENV = { GOPROXY: "off", GOFLAGS: "-mod=mod", GOTOOLCHAIN: "local", CGO_ENABLED: "0" } as const;
/**
 * Packages net/http links for TLS that the guest never runs (the control
 * service is plain HTTP/1.1 on the private address): compiled without
 * inlining (`-gcflags=<pkg>=-l`), about 120 KB less, with no cost at run
 * time (docs/adr/0170-static-go-guest.md "Size").
 */
export const GUEST_UNUSED_TLS_PACKAGES = [
  "crypto/tls",
  "crypto/x509",
  "crypto/rsa",
  "crypto/ecdsa",
  "math/big",
] as const;
/** `go build` flags of the guest: reproducible, stripped, without net/http's HTTP/2 (the control service speaks HTTP/1.1 only) and no inlining in GUEST_UNUSED_TLS_PACKAGES (docs/adr/0170-static-go-guest.md). */
export const GUEST_GO_BUILD_ARGS = [
  "build",
  "-trimpath",
  "-tags",
  "nethttpomithttp2",
  ...GUEST_UNUSED_TLS_PACKAGES.map((p) => `-gcflags=${p}=-l`),
  "-ldflags",
  "-s -w -buildid=",
] as const;
/** Upper bound of the guest binary, bytes (issue 20: at most 5 MB); a bigger build is refused. */
export const MAX_GUEST_BINARY_BYTES = 5 * 1000 * 1000;
/** Where compileGuest keeps built guests, by hash of their sources, under the checkout. */
const GUEST_BUILD_CACHE = ".bb/guest-build";

/** The files under `dir` (recursively, sorted), skipping nothing but directories. */
function sourceFiles(dir: string, rel = ""): string[] {
  const out: string[] = [];
  for (const e of readdirSync(join(dir, rel), { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const r = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...sourceFiles(dir, r));
    else if (e.isFile()) out.push(r);
  }
  return out;
}

/** SHA-256 (hex) of the guest's Go sources under `guestDir` and the build flags: the cache key of compileGuest. */
export function guestSourceHash(guestDir: string): string {
  const h = createHash("sha256");
  h.update(`${JSON.stringify(GO_BUILD_ENV)}\0${GUEST_GO_BUILD_ARGS.join(" ")}\0`);
  for (const f of sourceFiles(guestDir)) {
    h.update(`${f}\0`);
    h.update(readFileSync(join(guestDir, f)));
    h.update("\0");
  }
  return h.digest("hex");
}

/**
 * Builds the static Go guest `beachball-guest` from `guestDir` (default
 * ./guest) into `out` (default dist/beachball-guest) with GO_BUILD_ENV and
 * GUEST_GO_BUILD_ARGS (docs/adr/0170-static-go-guest.md). A build is kept in
 * .bb/guest-build/<guestSourceHash> and reused while the sources are the
 * same. Returns the absolute path of `out`. Throws with Go's output when the
 * build fails or the binary is over MAX_GUEST_BINARY_BYTES.
 */
export async function compileGuest(
  out = resolve("dist/beachball-guest"),
  guestDir = resolve("guest"),
): Promise<string> {
  const cached = resolve(dirname(guestDir), GUEST_BUILD_CACHE, guestSourceHash(guestDir), "beachball-guest");
  if (!existsSync(cached)) {
    mkdirSync(dirname(cached), { recursive: true });
    const tmp = `${cached}.${process.pid}`;
    const go = Bun.which("go") ?? "/usr/bin/go";
    const p = Bun.spawn([go, ...GUEST_GO_BUILD_ARGS, "-o", tmp, "./cmd/beachball-guest"], {
      cwd: guestDir,
      env: { ...process.env, ...GO_BUILD_ENV },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [err, code] = await Promise.all([new Response(p.stderr).text(), p.exited]);
    if (code !== 0) throw new Error(`go build of the guest failed (exit ${code}): ${err.trim().slice(-800)}`);
    const size = statSync(tmp).size;
    if (size > MAX_GUEST_BINARY_BYTES)
      throw new Error(`the guest binary is ${size} bytes, over ${MAX_GUEST_BINARY_BYTES}`);
    renameSync(tmp, cached);
  }
  const dest = resolve(out);
  if (dest !== cached) {
    mkdirSync(dirname(dest), { recursive: true });
    copyFileSync(cached, `${dest}.${process.pid}`);
    chmodSync(`${dest}.${process.pid}`, 0o755);
    renameSync(`${dest}.${process.pid}`, dest);
  }
  return dest;
}

/** The guest binary to install in an image: `flag` when given, else a build of this checkout's guest/ (compileGuest). Throws when there is neither. */
export async function pickGuestBinary(flag: string | undefined, log: (m: string) => void = () => {}): Promise<string> {
  if (flag) return resolve(flag);
  if (existsSync("guest/go.mod")) {
    log("compiling dist/beachball-guest");
    return compileGuest();
  }
  throw new Error("no guest binary: pass --bb PATH (a beachball-guest build) or run from the source checkout");
}
