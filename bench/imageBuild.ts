/**
 * `bb image build` speed (issue 18 item 10): in one run, on the same
 * layers,
 *
 * - bb: `buildOciImage` (what `bb image build` runs) at zstd level N,
 *   with the time of each phase from its progress lines;
 * - baseline: the same layers extracted with GNU tar into a directory, each
 *   layer's whiteouts applied with rm before it is extracted (OCI: a
 *   whiteout hides only what lower layers made), plus the two files bb adds
 *   (the guest binary and workload.json), then plain `mksquashfs DIR` of
 *   that merged tree at the same level (`-comp zstd -Xcompression-level N`):
 *   the same tree bb compresses, so both squashfs sizes are printed and
 *   should agree to within a few KiB (`-tar` mode always packs tail ends
 *   into fragments and writes no NFS export table).
 *
 * Prints the times and the ratios bb ÷ mksquashfs and bb ÷ (extract +
 * mksquashfs), in wall-clock time and in CPU time (user + system of this
 * process, its threads and its children: on a shared, loaded machine the
 * CPU ratio is the steadier one). The input is a seeded synthetic root (default: about
 * 400 MB in 3 layers, many small files and some large ones, the last layer
 * deleting files and a directory of the first) or, with `--debian`, the
 * Debian reference root (mmdebstrap, cached in .bb/cache) in the 3-layer
 * layout of test/support/debianOci.ts.
 *
 *   flock /tmp/bb-heavy.lock node_modules/.bin/bun bench/imageBuild.ts [--debian] [--mib 400] [--layers 3] [--level 3] [--runs 1]
 * Needs mksquashfs (squashfs-tools), GNU tar and the kernel cache
 * (downloaded once). Ends on its own; work files go to a temporary
 * directory that is removed at the end.
 */
import { parseArgs } from "node:util";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { buildOciImage } from "../src/image/oci/build.ts";
import { GUEST_BINARY_IN_IMAGE } from "../src/image/oci/ociInitrd.ts";
import { WORKLOAD_CONFIG_PATH } from "../src/protocol/guest.ts";
import { makeTar, writeOciLayout, type TestTarEntry } from "../src/image/oci/testLayout.ts";
import { generateSigningKey } from "../src/image/signing.ts";
import { ensureDebianRootfsTar } from "../src/image/debianRootfs.ts";
import { writeDebianOciLayout } from "../test/support/debianOci.ts";
import { SeededRandom } from "../test/sim/rng.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/imageBuild.ts", 1200);

const { values: args } = parseArgs({
  options: {
    debian: { type: "boolean", default: false },
    mib: { type: "string", default: "400" },
    layers: { type: "string", default: "3" },
    level: { type: "string", default: "3" },
    runs: { type: "string", default: "1" },
  },
});
const LEVEL = Number(args.level);
const RUNS = Math.max(1, Number(args.runs));
const CACHE = resolve(".bb/cache");
const work = mkdtempSync(join(tmpdir(), "bb-bench-image-"));
process.on("exit", () => rmSync(work, { recursive: true, force: true }));

/** A seeded generator of floats in [0, 1) (the simulation's), so every run is the same. */
function rng(seed: number): () => number {
  const random = new SeededRandom(seed);
  return () => random.float();
}

/**
 * A seeded root of about `mib` MiB in `layers` layers: file sizes like a
 * distribution's (most under 16 KiB, a few of megabytes), contents cut from
 * a pool of text-like and random bytes so zstd has real work; the last
 * layer whites out every 10th file and one directory of layer 0.
 */
function syntheticLayers(mib: number, layers: number): Uint8Array[] {
  const r = rng(18);
  const words = Array.from({ length: 2000 }, () =>
    Array.from({ length: 2 + Math.floor(r() * 8) }, () => String.fromCharCode(97 + Math.floor(r() * 26))).join(""),
  );
  const text = Buffer.from(Array.from({ length: 1_200_000 }, () => words[Math.floor(r() * words.length)]).join(" "));
  const noise = Buffer.alloc(4 << 20);
  for (let i = 0; i < noise.length; i++) noise[i] = Math.floor(r() * 256);
  const pool = Buffer.concat([text, noise]);
  const size = () => {
    const x = r();
    return x < 0.7
      ? Math.floor(r() * 8192)
      : x < 0.95
        ? 8192 + Math.floor(r() * 65536)
        : x < 0.995
          ? 65536 + Math.floor((r() * 1) << 20)
          : (1 << 20) + Math.floor(r() * (6 << 20));
  };
  const out: TestTarEntry[][] = Array.from({ length: layers }, () => []);
  const files: string[] = [];
  let total = 0;
  const budget = mib * 2 ** 20;
  for (let d = 0; total < budget; d++) {
    const layer = d % 10 < 7 || layers === 1 ? 0 : 1 + (d % Math.max(1, layers - 1));
    const dir = `usr/lib/pkg${d}/${["share", "lib", "bin"][d % 3]}`;
    out[layer]!.push({ path: `usr/lib/pkg${d}/` }, { path: `${dir}/` });
    for (let f = 0, n = 5 + Math.floor(r() * 40); f < n && total < budget; f++) {
      const s = Math.min(size(), pool.length);
      const at = Math.floor(r() * (pool.length - s));
      const path = `${dir}/file${f}.${["so", "txt", "py", "h"][f % 4]}`;
      out[layer]!.push({ path, body: pool.subarray(at, at + s), mode: f % 4 === 0 ? 0o755 : 0o644 });
      files.push(path);
      total += s;
    }
  }
  if (layers > 1) {
    const last = out[layers - 1]!;
    for (let i = 0; i < files.length; i += 10) {
      const p = files[i]!;
      last.push({ path: `${p.slice(0, p.lastIndexOf("/"))}/.wh.${p.slice(p.lastIndexOf("/") + 1)}` });
    }
    last.push({ path: "usr/lib/.wh.pkg0" });
  }
  return out.map((l) => makeTar(l));
}

const sec = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

/** Clock ticks per second of /proc times (Linux's USER_HZ). */
const CLOCK_TICKS = Number(Bun.spawnSync(["getconf", "CLK_TCK"]).stdout.toString().trim()) || 100;

/** CPU time used so far by this process (all threads) and its waited-for children, ms (/proc/self/stat). */
function cpuMs(): number {
  const stat = readFileSync("/proc/self/stat", "latin1");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // After the command: state is field 3, so utime, stime, cutime and cstime (fields 14–17) are at 11–14.
  return ((Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / CLOCK_TICKS) * 1000;
}

async function run(cmd: string[], opts: { cwd?: string } = {}): Promise<number> {
  const t0 = performance.now();
  const p = Bun.spawn(cmd, { stdout: "ignore", stderr: "pipe", cwd: opts.cwd });
  const [err, code] = await Promise.all([new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`${cmd.join(" ")} exited ${code}: ${err.slice(-400)}`);
  return performance.now() - t0;
}

/**
 * The baseline: each layer's whiteouts applied with rm to the tree the
 * lower layers made (an opaque marker empties its directory), then the
 * layer extracted with GNU tar without its whiteout entries; then `extra`
 * (what bb adds to the root) copied in; then mksquashfs of the directory.
 */
async function baseline(
  layerTars: string[],
  extra: { from: string; to: string }[],
  n: number,
): Promise<{ extractMs: number; mksquashfsMs: number; mksquashfsCpuMs: number; bytes: number }> {
  const root = join(work, `merged-${n}`);
  mkdirSync(root);
  const t0 = performance.now();
  const inRoot = (name: string) => Buffer.from(join(root, name), "latin1");
  for (const t of layerTars) {
    const names = Bun.spawnSync(["tar", "-tf", t]).stdout.toString("latin1").split("\n").filter(Boolean);
    for (const w of names) {
      const name = w.slice(w.lastIndexOf("/") + 1);
      if (!name.startsWith(".wh.")) continue;
      const dir = w.slice(0, w.lastIndexOf("/") + 1);
      const hidden =
        name !== ".wh..wh..opq"
          ? [dir + name.slice(4)]
          : existsSync(inRoot(dir))
            ? readdirSync(inRoot(dir), "latin1").map((c) => dir + c)
            : [];
      for (const h of hidden) rmSync(inRoot(h), { recursive: true, force: true });
    }
    await run(["tar", "-xpf", t, "-C", root, "--numeric-owner", "--exclude=.wh.*"]);
  }
  for (const e of extra) {
    mkdirSync(join(root, dirname(e.to)), { recursive: true });
    copyFileSync(e.from, join(root, e.to));
  }
  const extractMs = performance.now() - t0;
  const out = join(work, `baseline-${n}.squashfs`);
  const cpu0 = cpuMs();
  const mksquashfsMs = await run([
    "mksquashfs",
    root,
    out,
    "-noappend",
    "-no-progress",
    "-quiet",
    "-comp",
    "zstd",
    "-Xcompression-level",
    String(LEVEL),
  ]);
  const mksquashfsCpuMs = cpuMs() - cpu0;
  const bytes = statSync(out).size;
  rmSync(root, { recursive: true, force: true });
  rmSync(out, { force: true });
  return { extractMs, mksquashfsMs, mksquashfsCpuMs, bytes };
}

const key = generateSigningKey();
/** The guest binary bb puts under /.beachball/ (any static binary will do for timing). */
const GUEST_BINARY = "/bin/busybox";
let layoutDir: string;
let layerTars: string[];
if (args.debian) {
  const rootfs = await ensureDebianRootfsTar(CACHE, undefined, console.log);
  const l = await writeDebianOciLayout(join(work, "layout"), rootfs);
  layoutDir = l.dir;
  layerTars = l.layerPaths;
} else {
  const layers = syntheticLayers(Number(args.mib), Number(args.layers));
  const l = writeOciLayout(join(work, "layout"), layers, { gzip: false });
  layoutDir = l.dir;
  layerTars = l.layerPaths;
}
const inputBytes = layerTars.reduce((s, p) => s + statSync(p).size, 0);
console.log(
  `input: ${args.debian ? "Debian reference root" : "synthetic root"}, ${layerTars.length} layers, ${(inputBytes / 2 ** 20).toFixed(0)} MiB of tar; zstd level ${LEVEL}; ${RUNS} run(s)`,
);

const rows: { bb: number; extract: number; mksquashfs: number; bbCpu: number; mksquashfsCpu: number }[] = [];
for (let i = 0; i < RUNS; i++) {
  const phases: [string, number][] = [];
  const cpu0 = cpuMs();
  const t0 = performance.now();
  let last = t0;
  const r = await buildOciImage({
    input: { kind: "oci-layout", dir: layoutDir },
    outDir: join(work, `bb-${i}`),
    cacheDir: CACHE,
    guestBinaryPath: GUEST_BINARY,
    privateKey: key.privateKey,
    compressionLevel: LEVEL,
    log: (m) => {
      const now = performance.now();
      phases.push([m.slice(0, 60), now - last]);
      last = now;
    },
  });
  const bb = performance.now() - t0;
  const bbCpu = cpuMs() - cpu0;
  phases.push(["(signing, rename)", performance.now() - last]);
  const bbBytes = r.manifest.rootfs.sizeBytes;
  const workload = join(work, "workload.json");
  copyFileSync(join(r.dir, "workload.json"), workload);
  rmSync(r.dir, { recursive: true, force: true });
  const b = await baseline(
    layerTars,
    [
      { from: GUEST_BINARY, to: GUEST_BINARY_IN_IMAGE },
      { from: workload, to: WORKLOAD_CONFIG_PATH.slice(1) },
    ],
    i,
  );
  rows.push({ bb, extract: b.extractMs, mksquashfs: b.mksquashfsMs, bbCpu, mksquashfsCpu: b.mksquashfsCpuMs });
  console.log(
    `run ${i + 1}: bb image build ${sec(bb)} (CPU ${sec(bbCpu)}; squashfs ${(bbBytes / 2 ** 20).toFixed(1)} MiB); tar -x ${sec(b.extractMs)} + mksquashfs ${sec(b.mksquashfsMs)} (CPU ${sec(b.mksquashfsCpuMs)}; squashfs ${(b.bytes / 2 ** 20).toFixed(1)} MiB; bb − mksquashfs ${((bbBytes - b.bytes) / 1024).toFixed(0)} KiB)`,
  );
  for (const [m, ms] of phases) console.log(`  ${sec(ms).padStart(8)}  until: ${m}`);
}
const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const bb = med(rows.map((x) => x.bb));
const sq = med(rows.map((x) => x.mksquashfs));
const ex = med(rows.map((x) => x.extract + x.mksquashfs));
const bbCpu = med(rows.map((x) => x.bbCpu));
const sqCpu = med(rows.map((x) => x.mksquashfsCpu));
const load = readFileSync("/proc/loadavg", "latin1").split(" ").slice(0, 3).join(" ");
console.log(
  `CPU ratio bb ÷ mksquashfs: ${(bbCpu / sqCpu).toFixed(2)}×   (medians: bb ${sec(bbCpu)}, mksquashfs ${sec(sqCpu)} of CPU; load average ${load} on ${navigator.hardwareConcurrency} CPUs)`,
);
console.log(
  `ratio bb ÷ mksquashfs: ${(bb / sq).toFixed(2)}×   bb ÷ (tar -x + mksquashfs): ${(bb / ex).toFixed(2)}×   (medians: bb ${sec(bb)}, mksquashfs ${sec(sq)}, tar -x + mksquashfs ${sec(ex)})`,
);
