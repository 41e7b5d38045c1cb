/**
 * One placement's cgroup (spec "Start (ensure_running)" limits, "Stop" step
 * 7): a directory named after the placement (`bb-<digest>`) under the
 * Beachball parent in every hierarchy that carries cpu, memory or pids,
 * limits written before the VMM joins it, the VMM moved in right after it
 * starts, RLIMIT_FSIZE set on the VMM with prlimit, and the directories
 * removed once the VMM is gone. Works on v2, v1 and hybrid hosts.
 * Must never: touch a cgroup whose name is not a placement name, or remove
 * a cgroup that still holds a process.
 */
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runCmd } from "../exec.ts";
import { cgroupDir, detectControllers, type ControllerPlacement } from "./hierarchy.ts";
import { v1Writes, v2Writes, type LimitedController, type PlacementLimits } from "./limits.ts";
import { cgroupError, DEFAULT_CGROUP_SUBDIR, type CgroupPolicy } from "./policy.ts";
import { AgentError } from "../../errors.ts";

/** One directory of a placement cgroup (one per hierarchy). */
export interface PlacementCgroupDir {
  version: 1 | 2;
  /** Mount point of the hierarchy. */
  mountPoint: string;
  /** Absolute filesystem path. */
  dir: string;
  controllers: LimitedController[];
}

/** A placement cgroup; persisted (cgroup.json) so Stop finds it even if the agent's own cgroup changed. */
export interface PlacementCgroup {
  name: string;
  dirs: PlacementCgroupDir[];
}

function checkName(name: string): void {
  if (!/^bb-[A-Za-z0-9_-]{1,60}$/.test(name))
    throw cgroupError(`invalid placement cgroup name ${JSON.stringify(name)}`);
}

/** Hierarchy path of the Beachball parent for `p`: policy.parent, else `<agent's cgroup>/beachball`. */
export function parentPath(p: ControllerPlacement, policy: CgroupPolicy): string {
  return policy.parent ?? join(p.ownPath, DEFAULT_CGROUP_SUBDIR);
}

/** The directories placement `name` has (or would have) on this host, grouped by hierarchy. Pure given `placements`. */
export function placementCgroupOf(
  name: string,
  policy: CgroupPolicy,
  placements: ControllerPlacement[],
): PlacementCgroup {
  checkName(name);
  const byDir = new Map<string, PlacementCgroupDir>();
  for (const p of placements) {
    const dir = cgroupDir(p.mount, join(parentPath(p, policy), name));
    const d = byDir.get(dir) ?? { version: p.mount.version, mountPoint: p.mount.mountPoint, dir, controllers: [] };
    d.controllers.push(p.controller);
    byDir.set(dir, d);
  }
  return { name, dirs: [...byDir.values()] };
}

/** v2: makes sure every level from the hierarchy root down to `dir`'s parent delegates `controllers`. */
function enableV2(mountPoint: string, dir: string, controllers: LimitedController[]): void {
  const rel = dir.slice(mountPoint.length).split("/").filter(Boolean);
  let level = mountPoint;
  for (const seg of rel) {
    const ctl = join(level, "cgroup.subtree_control");
    const have = readFileSync(ctl, "utf8").trim().split(/\s+/);
    const missing = controllers.filter((c) => !have.includes(c));
    if (missing.length) {
      try {
        writeFileSync(ctl, missing.map((c) => `+${c}`).join(" "));
      } catch (e) {
        throw cgroupError(
          `cannot delegate ${missing.join(",")} in ${level} (${(e as Error).message}); run the agent in a delegated cgroup (systemd Delegate=yes) or set cgroupParent`,
        );
      }
    }
    level = join(level, seg);
    mkdirSync(level, { recursive: true });
  }
}

/**
 * Creates placement `name`'s cgroup directories and writes `limits` (see
 * limits.ts for the files). Throws CGROUP_SETUP_FAILED (after removing what it made)
 * when a controller is missing, delegation fails or a write is refused.
 */
export function createPlacementCgroup(
  name: string,
  limits: PlacementLimits,
  policy: CgroupPolicy,
  placements: ControllerPlacement[] = detectControllers(),
): PlacementCgroup {
  const cg = placementCgroupOf(name, policy, placements);
  const found = new Set(cg.dirs.flatMap((d) => d.controllers));
  const absent = (["cpu", "memory", "pids"] as const).filter((c) => !found.has(c));
  if (absent.length) throw cgroupError(`cgroup controllers not available: ${absent.join(", ")}`);
  try {
    for (const d of cg.dirs) {
      if (d.version === 2) enableV2(d.mountPoint, d.dir, d.controllers);
      else mkdirSync(d.dir, { recursive: true });
      for (const c of d.controllers) {
        const writes =
          d.version === 2
            ? v2Writes(c, limits, existsSync(join(d.dir, "memory.swap.max")))
            : v1Writes(c, limits, existsSync(join(d.dir, "memory.memsw.limit_in_bytes")));
        for (const [file, value] of writes) writeFileSync(join(d.dir, file), value);
      }
    }
  } catch (e) {
    removePlacementCgroup(cg);
    throw e instanceof AgentError ? e : cgroupError(`cgroup ${name}: ${(e as Error).message}`, e);
  }
  return cg;
}

/** Moves process `pid` (all its threads) into every directory of `cg`. Throws CGROUP_SETUP_FAILED on a refused write. */
export function addToPlacementCgroup(cg: PlacementCgroup, pid: number): void {
  for (const d of cg.dirs) {
    try {
      writeFileSync(join(d.dir, "cgroup.procs"), String(pid));
    } catch (e) {
      throw cgroupError(`cannot move pid ${pid} into ${d.dir}: ${(e as Error).message}`);
    }
  }
}

/** PIDs in a cgroup directory (empty when it does not exist). */
export function cgroupPids(dir: string): number[] {
  try {
    return readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Sets RLIMIT_FSIZE (soft and hard) of `pid` to `bytes` with prlimit(1). Throws CGROUP_SETUP_FAILED when prlimit fails. */
export async function applyFileSizeLimit(pid: number, bytes: number): Promise<void> {
  const r = await runCmd(["prlimit", "--pid", String(pid), `--fsize=${bytes}:${bytes}`]);
  if (r.code !== 0) throw cgroupError(`prlimit --fsize on pid ${pid} failed (exit ${r.code}): ${r.err}`);
}

/**
 * Removes every directory of `cg` that holds no process, retrying briefly
 * while the kernel finishes tearing down an exited VMM. Every directory is
 * attempted. Returns what remains (empty = removed or never existed).
 */
export function removePlacementCgroup(cg: PlacementCgroup): string[] {
  checkName(cg.name);
  const left: string[] = [];
  for (const d of cg.dirs) {
    if (!d.dir.endsWith(`/${cg.name}`)) {
      left.push(`cgroup ${d.dir} (not a placement path)`);
      continue;
    }
    for (let i = 0; i < 50 && existsSync(d.dir); i++) {
      const pids = cgroupPids(d.dir);
      if (pids.length && i === 49) break;
      try {
        if (!pids.length) rmdirSync(d.dir);
      } catch {
        /* EBUSY while a task exits: retry */
      }
      if (existsSync(d.dir)) Bun.sleepSync(20);
    }
    if (existsSync(d.dir))
      left.push(`cgroup ${d.dir}${cgroupPids(d.dir).length ? ` (pids ${cgroupPids(d.dir).join(",")})` : ""}`);
  }
  return left;
}
