/**
 * Finds where each limited controller lives on this host: cgroup v2
 * (unified), cgroup v1, or nowhere. Hosts can be hybrid (docs/architecture.md, "Booting without KVM": cpu,
 * memory and pids on v1 while v2 offers only freeze/kill), so detection is
 * per controller. Parsing is pure; the readers take /proc and /sys text.
 * Must never: guess a mount point (only /proc/self/mountinfo counts).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { LIMITED_CONTROLLERS, type LimitedController } from "./limits.ts";
import { parseMountinfo } from "./mountinfo.ts";

/** A cgroup hierarchy mount. */
export interface CgroupMount {
  version: 1 | 2;
  /** Mount point, e.g. /sys/fs/cgroup/memory. */
  mountPoint: string;
  /** The hierarchy path mounted there (mountinfo field 4, usually `/`). */
  root: string;
  /** v1: controllers from the super options; v2: from cgroup.controllers. */
  controllers: string[];
}

/** Where one controller lives, with the agent's own cgroup path in that hierarchy. */
export interface ControllerPlacement {
  controller: LimitedController;
  mount: CgroupMount;
  /** The agent process's cgroup in this hierarchy (from /proc/self/cgroup). */
  ownPath: string;
}

/** Parses /proc/self/mountinfo into cgroup mounts (v2 controllers left empty). Pure. */
export function parseCgroupMounts(mountinfo: string): CgroupMount[] {
  const mounts: CgroupMount[] = [];
  for (const m of parseMountinfo(mountinfo)) {
    if (m.fstype === "cgroup2") mounts.push({ version: 2, mountPoint: m.point, root: m.root, controllers: [] });
    else if (m.fstype === "cgroup") {
      const ctrls = m.superOptions
        .split(",")
        .filter((o) => !o.includes("=") && !["rw", "ro", "relatime", "noexec", "nosuid", "nodev"].includes(o));
      mounts.push({ version: 1, mountPoint: m.point, root: m.root, controllers: ctrls });
    }
  }
  return mounts;
}

/** Parses /proc/self/cgroup into `{ "memory": "/a/b", "": "/" (v2) }`. Pure. */
export function parseProcCgroup(text: string): Map<string, string> {
  const m = new Map<string, string>();
  for (const line of text.split("\n")) {
    const [, ctrls, ...rest] = line.split(":");
    if (ctrls === undefined || !rest.length) continue;
    for (const c of ctrls === "" ? [""] : ctrls.split(",")) m.set(c, rest.join(":"));
  }
  return m;
}

/**
 * Chooses the hierarchy of every limited controller: v2 when the unified
 * mount lists it in cgroup.controllers, else the v1 mount carrying it.
 * Controllers found nowhere are missing from the result. Pure.
 */
export function placeControllers(mounts: CgroupMount[], procCgroup: Map<string, string>): ControllerPlacement[] {
  const out: ControllerPlacement[] = [];
  for (const c of LIMITED_CONTROLLERS) {
    const v2 = mounts.find((m) => m.version === 2 && m.controllers.includes(c));
    const v1 = mounts.find((m) => m.version === 1 && m.controllers.includes(c));
    const mount = v2 ?? v1;
    if (!mount) continue;
    out.push({ controller: c, mount, ownPath: procCgroup.get(v2 ? "" : c) ?? "/" });
  }
  return out;
}

/** Detects controller placement on this host from /proc/self/mountinfo, /proc/self/cgroup and cgroup.controllers. */
export function detectControllers(): ControllerPlacement[] {
  const mounts = parseCgroupMounts(readFileSync("/proc/self/mountinfo", "utf8"));
  for (const m of mounts) {
    if (m.version !== 2) continue;
    try {
      m.controllers = readFileSync(join(m.mountPoint, "cgroup.controllers"), "utf8")
        .trim()
        .split(/\s+/)
        .filter(Boolean);
    } catch {
      m.controllers = [];
    }
  }
  return placeControllers(mounts, parseProcCgroup(readFileSync("/proc/self/cgroup", "utf8")));
}

/** Filesystem directory of hierarchy path `cgPath` under `mount` (strips the mount's root). */
export function cgroupDir(mount: CgroupMount, cgPath: string): string {
  const rel = mount.root !== "/" && cgPath.startsWith(mount.root) ? cgPath.slice(mount.root.length) : cgPath;
  return join(mount.mountPoint, rel);
}
