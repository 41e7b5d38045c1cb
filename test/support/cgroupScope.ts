/**
 * Test support: a cgroup parent of one test run's own, so the agent it
 * starts (agent.json `cgroupParent`) neither sees placement cgroups other
 * runs on this machine left behind (which its startup inventory rightly
 * quarantines as foreign, making the host unschedulable) nor leaves its
 * own in a shared place. The parent sits under this process's memory
 * cgroup (so the VMs stay inside this session's memory accounting), at the
 * same path in every hierarchy the agent uses. `remove()` deletes the
 * directories the run created, deepest first (empty ones only: the agent
 * has removed its placements' by then). Never touches a directory that
 * existed before.
 */
import { existsSync, readFileSync, readdirSync, rmdirSync } from "node:fs";
import { join } from "node:path";

const ROOT = "/sys/fs/cgroup";

/** This process's cgroup path in the memory hierarchy (v1), else the unified one, else "/". */
function ownMemoryPath(): string {
  const lines = readFileSync("/proc/self/cgroup", "utf8").trim().split("\n");
  const v1 = lines.find((l) => l.split(":")[1]?.split(",").includes("memory"));
  const v2 = lines.find((l) => l.startsWith("0::"));
  return (v1 ?? v2)?.split(":").slice(2).join(":") || "/";
}

/** Hierarchy mount points under /sys/fs/cgroup (v1 directories with a cgroup.procs file, or the v2 root). */
function hierarchies(): string[] {
  if (existsSync(join(ROOT, "cgroup.controllers"))) return [ROOT];
  return readdirSync(ROOT)
    .map((d) => join(ROOT, d))
    .filter((d) => existsSync(join(d, "cgroup.procs")));
}

/** A run's cgroup parent: `parent` for agent.json, `remove()` for afterAll. */
export interface CgroupScope {
  parent: string;
  remove(): void;
}

/** Plans the parent `<own memory cgroup>/<name>` and records which of its levels do not exist yet in each hierarchy. */
export function cgroupScope(name: string): CgroupScope {
  if (!/^[A-Za-z0-9_.-]+$/.test(name)) throw new Error(`bad cgroup name ${name}`);
  const parent = join(ownMemoryPath(), name);
  const created: string[] = [];
  for (const h of hierarchies()) {
    let level = h;
    for (const seg of parent.split("/").filter(Boolean)) {
      level = join(level, seg);
      if (!existsSync(level)) created.push(level);
    }
  }
  return {
    parent,
    remove() {
      for (const dir of [...created].sort((a, b) => b.length - a.length)) {
        try {
          rmdirSync(dir);
        } catch {
          /* absent (never made in that hierarchy) or not empty (reported by the agent's own leak checks) */
        }
      }
    },
  };
}
