/**
 * Brings the host's cgroup hierarchies back into an agent that runs in a
 * network namespace through `ip netns exec` (docs/install.md, "Running
 * the agent inside a network namespace"). That tool gives the command a
 * mount namespace of its own and mounts a fresh sysfs on /sys for the
 * namespace's devices, which hides every cgroup mount below
 * /sys/fs/cgroup: without them no placement can get its cpu, memory and
 * pids limits (spec "Prepare": cgroup before the VMM). The kernel still
 * lists the process's hierarchies in /proc/self/cgroup, so the agent can
 * mount the same hierarchies again, each at its usual place.
 *
 * It acts only when the agent sees no cgroup mount at all AND the mount
 * holding /sys/fs/cgroup (the one a path walk reaches, overmounts
 * followed: mountinfo.ts) propagates to no other mount namespace (no
 * `shared:` peer group in /proc/self/mountinfo), so what it mounts is
 * visible to the agent and its children only, never to the host.
 * Must never: mount anything when a cgroup hierarchy is already visible,
 * or where the mount could propagate to the host's namespaces.
 */
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseCgroupMounts } from "./hierarchy.ts";
import { mountHolding, parseMountinfo } from "./mountinfo.ts";

/** Where cgroup hierarchies are mounted by convention (systemd, container runtimes). */
export const CGROUP_MOUNT_ROOT = "/sys/fs/cgroup";
/** Bound on the hierarchies taken from /proc/self/cgroup (the kernel allows 16 v1 hierarchies plus the unified one). */
export const MAX_CGROUP_HIERARCHIES = 17;

/** One `mount -t <fstype> -o <options> <source> <target>` of the restore. */
export interface CgroupMountStep {
  fstype: "tmpfs" | "cgroup" | "cgroup2";
  /** `-o` options; empty for none. */
  options: string;
  target: string;
}

/**
 * The mounts that recreate the hierarchies named in /proc/self/cgroup
 * (`procCgroup`, lines `ID:controllers:path`). Pure.
 * Only the unified hierarchy (`0::`): cgroup2 on /sys/fs/cgroup. With v1
 * hierarchies (hybrid or legacy hosts): a tmpfs on /sys/fs/cgroup, each v1
 * hierarchy at /sys/fs/cgroup/<its controllers> (a named one such as
 * `name=systemd` as `systemd`, mounted with `none,name=systemd`), and the
 * unified one, when listed, at /sys/fs/cgroup/unified. Mounting a v1
 * hierarchy with exactly its controller set attaches the existing
 * hierarchy (cgroups(7)), so the paths match the host's.
 * Throws on a line that is not `ID:controllers:path` or on more than
 * MAX_CGROUP_HIERARCHIES hierarchies.
 */
export function cgroupMountPlan(procCgroup: string): CgroupMountStep[] {
  const lines = procCgroup.split("\n").filter((l) => l.trim() !== "");
  if (lines.length > MAX_CGROUP_HIERARCHIES)
    throw new Error(`/proc/self/cgroup lists ${lines.length} hierarchies (at most ${MAX_CGROUP_HIERARCHIES})`);
  const v1: Array<{ options: string; dir: string }> = [];
  let unified = false;
  for (const line of lines) {
    const m = /^(\d+):([^:]*):(\/.*)$/.exec(line);
    if (!m) throw new Error(`/proc/self/cgroup: unexpected line ${JSON.stringify(line.slice(0, 80))}`);
    if (m[1] === "0" && m[2] === "") {
      unified = true;
      continue;
    }
    const ctrls = m[2]!.split(",").filter(Boolean);
    // Each name becomes (part of) a directory under CGROUP_MOUNT_ROOT: "." and ".." are not names.
    if (!ctrls.length || !ctrls.every((c) => /^(name=)?[A-Za-z0-9_.-]{1,64}$/.test(c) && !/^(name=)?\.{1,2}$/.test(c)))
      throw new Error(`/proc/self/cgroup: bad controller list ${JSON.stringify(m[2]!.slice(0, 80))}`);
    const named = ctrls.length === 1 && ctrls[0]!.startsWith("name=");
    v1.push({
      options: named ? `none,${ctrls[0]}` : ctrls.join(","),
      dir: named ? ctrls[0]!.slice(5) : ctrls.join(","),
    });
  }
  if (!v1.length) return unified ? [{ fstype: "cgroup2", options: "", target: CGROUP_MOUNT_ROOT }] : [];
  return [
    { fstype: "tmpfs", options: "mode=755", target: CGROUP_MOUNT_ROOT },
    ...v1.map((h) => ({ fstype: "cgroup" as const, options: h.options, target: join(CGROUP_MOUNT_ROOT, h.dir) })),
    ...(unified ? [{ fstype: "cgroup2" as const, options: "", target: join(CGROUP_MOUNT_ROOT, "unified") }] : []),
  ];
}

/**
 * True when a mount at `path` would stay in this mount namespace: the
 * mount that holds `path` (the one a path walk reaches, overmounts
 * followed: mountinfo.ts mountHolding) carries no `shared:` peer group in
 * `mountinfo` (/proc/self/mountinfo text). A slave (`master:`) or private
 * mount propagates nothing outward. False when no mount holds it. Pure.
 */
export function mountStaysLocal(mountinfo: string, path: string): boolean {
  const holder = mountHolding(parseMountinfo(mountinfo), path);
  return holder !== null && !holder.optional.some((o) => o.startsWith("shared:"));
}

/** The side effects of restoreCgroupMounts, so tests can fake them. */
export interface CgroupMountPorts {
  readMountinfo(): string;
  readProcCgroup(): string;
  /** Runs `mount -t fstype [-o options] <fstype> target`; throws on failure. */
  mount(step: CgroupMountStep): Promise<void>;
}

/** What restoreCgroupMounts did: nothing (why), or the mount points it mounted. */
export type CgroupRestore = { restored: false; reason: string } | { restored: true; mounted: string[] };

/**
 * Mounts the agent's cgroup hierarchies again when its mount namespace
 * shows none and the mounts cannot reach the host (see the module doc).
 * Throws (with what was mounted so far left in place, in the agent's own
 * namespace only) when a mount fails; callers log it and go on, the
 * placements then fail CGROUP_SETUP_FAILED with the controllers missing.
 */
export async function restoreCgroupMounts(ports: CgroupMountPorts): Promise<CgroupRestore> {
  const mountinfo = ports.readMountinfo();
  if (parseCgroupMounts(mountinfo).length) return { restored: false, reason: "cgroup hierarchies are mounted" };
  if (!mountStaysLocal(mountinfo, CGROUP_MOUNT_ROOT))
    return {
      restored: false,
      reason: `no cgroup hierarchy is mounted, and a mount at ${CGROUP_MOUNT_ROOT} would propagate to other mount namespaces`,
    };
  const plan = cgroupMountPlan(ports.readProcCgroup());
  if (!plan.length) return { restored: false, reason: "/proc/self/cgroup lists no hierarchy" };
  for (const step of plan) await ports.mount(step);
  return { restored: true, mounted: plan.map((s) => s.target) };
}

/** The real ports: /proc/self files and mount(8) (directories made first; the tmpfs root is new, so its subdirectories are too). */
export const systemCgroupMountPorts: CgroupMountPorts = {
  readMountinfo: () => readFileSync("/proc/self/mountinfo", "utf8"),
  readProcCgroup: () => readFileSync("/proc/self/cgroup", "utf8"),
  async mount(step) {
    mkdirSync(step.target, { recursive: true });
    const argv = ["mount", "-t", step.fstype, ...(step.options ? ["-o", step.options] : []), step.fstype, step.target];
    const p = Bun.spawn(argv, { stdin: "ignore", stdout: "ignore", stderr: "pipe" });
    const [err, code] = await Promise.all([new Response(p.stderr).text(), p.exited]);
    if (code !== 0) throw new Error(`${argv.join(" ")} failed (exit ${code}): ${err.trim()}`);
  },
};
