/**
 * Startup inventory (spec "Agent runtime and local state"): finds every
 * Beachball-owned resource on this host by its derived name (allocation
 * directories, VMM processes, network namespaces, host-side veths,
 * placement cgroups) and returns those that no placement in agent.db owns.
 * The agent quarantines and reports them; it never deletes them. A name
 * that carries another host's tag (resourceNames.ts: a second agent on
 * this machine, with its own data dir) is returned marked `otherHost`: the
 * agent reports it and does not count it. An untagged (legacy) name is
 * taken as this host's, as an older agent of this host named it.
 * Must never: delete or signal anything.
 */
import { readdirSync, readFileSync } from "node:fs";
import { listPlacementNetworks, hostVethName, HOST_VETH_PREFIXES } from "./isolation/placementNet.ts";
import { ownerTagOf } from "./resourceNames.ts";
import { detectControllers, cgroupDir } from "./isolation/cgroups/hierarchy.ts";
import { parentPath } from "./isolation/cgroups/placementCgroup.ts";
import type { CgroupPolicy } from "./isolation/cgroups/policy.ts";

/** One resource no placement of this host owns. */
export interface ForeignResource {
  kind: "directory" | "process" | "netns" | "veth" | "cgroup";
  name: string;
  /** The host tag its name carries when that is another host's (reported, never quarantined); absent: this host's. */
  otherHost?: string;
}

/** Names of the doctor's probes (a namespace for a few ms, a test-boot VM for a second or two); never foreign. */
export const PROBE_PREFIX = "bb-probe-";

/** The placement name a VMM command line carries (`-name bb-…` for QEMU, `--id bb-…`/`--id=bb-…` for jailer/Firecracker), or null. */
export function vmmInstanceOf(argv: string[]): string | null {
  const exe = argv[0] ?? "";
  if (!/qemu-system|firecracker|jailer/.test(exe) && !argv.some((a) => /qemu-system|firecracker|jailer/.test(a)))
    return null;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if ((a === "-name" || a === "--id") && argv[i + 1]?.startsWith("bb-")) return argv[i + 1]!;
    if (a.startsWith("--id=bb-")) return a.slice("--id=".length);
  }
  return null;
}

/**
 * Classifies what was found against the known placement names of the host
 * tagged `ownTag` (pure). `found` lists names per kind; veths are matched
 * through hostVethName. Known names are never foreign, whatever their tag.
 */
export function foreignResources(
  known: ReadonlySet<string>,
  ownTag: string,
  found: {
    directories: string[];
    processes: { pid: number; instance: string }[];
    netns: string[];
    veths: string[];
    cgroups: string[];
  },
): ForeignResource[] {
  const knownVeths = new Set([...known].map(hostVethName));
  const out: ForeignResource[] = [];
  const add = (kind: ForeignResource["kind"], name: string, shown = name) => {
    const tag = ownerTagOf(name);
    out.push(tag !== null && tag !== ownTag ? { kind, name: shown, otherHost: tag } : { kind, name: shown });
  };
  for (const d of found.directories) if (d.startsWith("bb-") && !known.has(d)) add("directory", d);
  for (const p of found.processes)
    if (!p.instance.startsWith(PROBE_PREFIX) && !known.has(p.instance))
      add("process", p.instance, `${p.instance} (pid ${p.pid})`);
  for (const n of found.netns) if (n.startsWith("bb-") && !n.startsWith(PROBE_PREFIX) && !known.has(n)) add("netns", n);
  for (const v of found.veths)
    if (HOST_VETH_PREFIXES.some((x) => v.startsWith(x)) && !knownVeths.has(v)) add("veth", v);
  for (const c of new Set(found.cgroups))
    if (c.startsWith("bb-") && !c.startsWith(PROBE_PREFIX) && !known.has(c)) add("cgroup", c);
  return out;
}

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

function vmmProcesses(): { pid: number; instance: string }[] {
  const out: { pid: number; instance: string }[] = [];
  for (const entry of listDir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").filter(Boolean);
      const instance = vmmInstanceOf(argv);
      if (instance) out.push({ pid: Number(entry), instance });
    } catch {
      /* the process went away */
    }
  }
  return out;
}

async function hostVeths(): Promise<string[]> {
  const p = Bun.spawn(["ip", "-o", "link", "show"], { stdout: "pipe", stderr: "ignore" });
  const text = await new Response(p.stdout).text();
  await p.exited;
  return [...text.matchAll(/^\d+:\s+([^:@\s]+)/gm)]
    .map((m) => m[1]!)
    .filter((n) => HOST_VETH_PREFIXES.some((x) => n.startsWith(x)));
}

function placementCgroups(policy: CgroupPolicy): string[] {
  const names: string[] = [];
  try {
    for (const p of detectControllers())
      names.push(...listDir(cgroupDir(p.mount, parentPath(p, policy))).filter((n) => n.startsWith("bb-")));
  } catch {
    /* no usable cgroup hierarchy: nothing of ours there */
  }
  return names;
}

/** Inventories this machine (read-only) and returns what no known placement of the host tagged `ownTag` owns. */
export async function inventoryForeign(
  known: ReadonlySet<string>,
  ownTag: string,
  allocationsDir: string,
  cgroupPolicy: CgroupPolicy,
): Promise<ForeignResource[]> {
  return foreignResources(known, ownTag, {
    directories: listDir(allocationsDir),
    processes: vmmProcesses(),
    netns: await listPlacementNetworks().catch(() => []),
    veths: await hostVeths().catch(() => []),
    cgroups: placementCgroups(cgroupPolicy),
  });
}
