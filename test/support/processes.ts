/**
 * Test support for end-to-end runs: `bb` roles as real subprocesses (from
 * source, through Bun), their logs in files, and a leak check that finds any
 * VMM process, namespace or allocation directory of a placement.
 */
import { closeSync, existsSync, linkSync, mkdirSync, openSync, readdirSync, readFileSync, symlinkSync } from "node:fs";
import { join, resolve } from "node:path";
import { randomUUID } from "node:crypto";
import { destroyPlacementNetwork, listPlacementNetworks } from "../../src/agent/isolation/placementNet.ts";
import { detectControllers } from "../../src/agent/isolation/cgroups/hierarchy.ts";
import { placementCgroupOf, removePlacementCgroup } from "../../src/agent/isolation/cgroups/placementCgroup.ts";
import { DEFAULT_CGROUP_POLICY } from "../../src/agent/isolation/cgroups/policy.ts";

const BUN = resolve("node_modules/.bin/bun");
const BB = resolve("bin/bb.ts");

/** A `bb` subprocess with its log file. */
export interface Role {
  proc: ReturnType<typeof Bun.spawn>;
  log: string;
}

/** Starts `bb ARGS…` with output appended to `log` (`env` overrides variables, e.g. PATH); `prefix` goes before the command (e.g. `ip netns exec NAME`, so that the PID is still bb's: ip execs it). */
export function startRole(
  args: string[],
  log: string,
  env: Record<string, string> = {},
  prefix: readonly string[] = [],
): Role {
  const fd = openSync(log, "a");
  const proc = Bun.spawn([...prefix, BUN, BB, ...args], {
    stdout: fd,
    stderr: fd,
    stdin: "ignore",
    env: { ...process.env, NO_COLOR: "1", ...env },
  });
  closeSync(fd);
  return { proc, log };
}

/** Runs `bb ARGS…` to completion; throws with its output when it fails. */
export async function runRole(args: string[]): Promise<string> {
  const r = await runRoleExit(args);
  if (r.code !== 0) throw new Error(`bb ${args.join(" ")} exited ${r.code}: ${r.out}`);
  return r.out;
}

/** Runs `bb ARGS…` to completion and returns its exit code and output (stdout, then stderr). */
export async function runRoleExit(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; out: string }> {
  const p = Bun.spawn([BUN, BB, ...args], {
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, NO_COLOR: "1", ...env },
  });
  const [stdout, err, code] = await Promise.all([
    new Response(p.stdout).text(),
    new Response(p.stderr).text(),
    p.exited,
  ]);
  return { code, stdout, out: stdout + err };
}

/** SIGKILLs a role and waits for it to be reaped. */
export async function kill9(r: Role): Promise<void> {
  r.proc.kill("SIGKILL");
  await r.proc.exited;
}

/** SIGTERMs a role and waits (SIGKILL after `graceMs`). */
export async function stopRole(r: Role, graceMs = 10_000): Promise<void> {
  if (r.proc.exitCode !== null || r.proc.signalCode !== null) return;
  r.proc.kill("SIGTERM");
  const t = setTimeout(() => r.proc.kill("SIGKILL"), graceMs);
  await r.proc.exited;
  clearTimeout(t);
}

/** The last `n` characters of a log, for failure messages. */
export function tail(path: string, n = 3000): string {
  return existsSync(path) ? readFileSync(path, "utf8").slice(-n) : "";
}

/** PIDs whose command line contains `needle` (excluding pgrep itself). */
export function pidsMatching(needle: string): number[] {
  const r = Bun.spawnSync(["pgrep", "-f", "--", needle]);
  return r.stdout
    .toString()
    .split("\n")
    .map(Number)
    .filter((n) => n > 0 && n !== process.pid);
}

/** Everything of placement directory `dirName` still present under `allocationsDir`. */
export async function leftoversOf(allocationsDir: string, dirName: string): Promise<string[]> {
  const left: string[] = [];
  if (existsSync(join(allocationsDir, dirName))) left.push(`directory ${dirName}`);
  if ((await listPlacementNetworks()).includes(dirName)) left.push(`netns ${dirName}`);
  const pids = pidsMatching(dirName);
  if (pids.length) left.push(`processes ${pids.join(",")}`);
  return left;
}

/**
 * leftoversOf once the agent has had up to `ms` to clean up: an allocation
 * can read failed or released a moment before its placement's VM, network
 * namespace and directory are gone, so the check polls (every 250 ms) until
 * nothing is left or the time is up, and returns what is left then.
 */
export async function settledLeftoversOf(allocationsDir: string, dirName: string, ms = 60_000): Promise<string[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const left = await leftoversOf(allocationsDir, dirName);
    if (!left.length || Date.now() > deadline) return left;
    await Bun.sleep(250);
  }
}

/** Why root-only VM tests cannot run here, or null if they can. */
export function vmTestSkipReason(): string | null {
  if (process.getuid?.() !== 0) return "needs root (network namespaces, TAP devices)";
  if (!Bun.which("qemu-system-x86_64"))
    return "qemu-system-x86_64 is not installed (apt-get install -y qemu-system-x86)";
  if (!Bun.which("ip")) return "iproute2 is not installed";
  return null;
}

/** A TCP port on 127.0.0.1 that was free a moment ago (bound once by the kernel's choice, then closed). */
/**
 * A host ID for one run of a test that leaves real resources (netns, cgroups, nftables): `base-<8 hex>`.
 * Another run's leftovers on this machine (another checkout's CI, a killed run) then carry another host
 * tag, so the agent ignores them instead of quarantining them as its own (src/agent/resourceNames.ts).
 */
export function runHostId(base: string): string {
  return `${base}-${randomUUID().slice(0, 8)}`;
}

export async function freePort(): Promise<number> {
  const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
  const port = probe.port!;
  await probe.stop(true);
  return port;
}

/**
 * Polls `probe` every 200 ms until it returns something truthy and returns
 * that; a probe that throws counts as "not yet". After `ms` it throws
 * `"<what> never happened"` with the tails of `logs` (role log files).
 */
export async function waitUntil<T>(
  what: string,
  probe: () => Promise<T | null | undefined | false>,
  ms: number,
  logs: readonly string[] = [],
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe().catch(() => null);
    if (v) return v;
    if (Date.now() > deadline)
      throw new Error(`${what} never happened\n${logs.map((l) => `${l}:\n${tail(l)}`).join("\n")}`);
    await Bun.sleep(200);
  }
}

/**
 * Publishes the signed image in `imageDir` under `sourceDir/<digest hex>/`
 * (hard links, no copy), the layout `bb agent join --image-source DIR`
 * fetches from through its verified cache.
 */
export function publishImageSource(imageDir: string, digest: string, sourceDir: string): void {
  const dir = join(sourceDir, digest.slice("sha256:".length));
  mkdirSync(dir, { recursive: true });
  for (const f of readdirSync(imageDir)) if (f !== "build-info.json") linkSync(join(imageDir, f), join(dir, f));
}

/**
 * Ends what a test's agent left under `allocationsDir` after the agent
 * itself stopped (a graceful stop keeps VMs running for the next agent):
 * every process whose command line names that directory (VMMs), then the
 * placement namespaces and cgroups (default policy, under this process's
 * own cgroup, where the test's agent made them) named after its entries.
 * A cgroup left behind would make the next agent on this machine report
 * isolation unhealthy. Only ever touches placements of that directory.
 */
export async function cleanUpPlacements(allocationsDir: string): Promise<void> {
  const pids = pidsMatching(allocationsDir);
  for (const pid of pids) process.kill(pid, "SIGKILL");
  for (let i = 0; i < 100 && pids.some((p) => existsSync(`/proc/${p}`)); i++) await Bun.sleep(50);
  const ours = new Set(existsSync(allocationsDir) ? readdirSync(allocationsDir) : []);
  for (const n of await listPlacementNetworks()) if (ours.has(n)) await destroyPlacementNetwork(n);
  const controllers = detectControllers();
  for (const n of ours)
    if (/^bb-[A-Za-z0-9_-]{1,60}$/.test(n))
      removePlacementCgroup(placementCgroupOf(n, DEFAULT_CGROUP_POLICY, controllers));
}

/**
 * Makes `root` a `bb dev demo --root` directory whose `images` and `cache`
 * are this checkout's `.bb/images` and `.bb/cache`, so demo runs share the
 * dev image and kernel the other VM tests built (once per checkout).
 */
export function sharedDemoRoot(root: string): void {
  mkdirSync(root, { recursive: true });
  for (const dir of ["images", "cache"]) {
    mkdirSync(resolve(".bb", dir), { recursive: true });
    symlinkSync(resolve(".bb", dir), join(root, dir));
  }
}

/**
 * Every regular file below `dir`, symlinks not followed. A directory that
 * vanishes during the walk (a placement being removed) is skipped.
 */
export function walkFiles(dir: string): string[] {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  return entries.flatMap((e) =>
    e.isDirectory() ? walkFiles(join(dir, e.name)) : e.isFile() ? [join(dir, e.name)] : [],
  );
}
