/**
 * The isolation steps of a placement's lifecycle, called by placementOps
 * (spec "Prepare", "Start", "Stop", "Guest network isolation"): build the
 * network and firewall (network.json), confine the VMM in its cgroup with a
 * file-size limit (cgroup.json), and tear both down again, confirming that
 * nothing of the placement remains.
 * Must never: report a resource as removed without checking, or act on a
 * name that is not the placement's `bb-<digest>`.
 */
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { detectControllers } from "./cgroups/hierarchy.ts";
import { placementLimits } from "./cgroups/limits.ts";
import { addToPlacementCgroup, applyFileSizeLimit, createPlacementCgroup, placementCgroupOf, removePlacementCgroup, type PlacementCgroup } from "./cgroups/placementCgroup.ts";
import { isolationOf } from "./isolation.ts";
import { createPlacementNetwork, destroyPlacementNetwork, guestKernelArgs, type PlacementNetwork } from "./placementNet.ts";

/** File in the allocation directory recording the placement network (spec "Agent runtime and local state"). */
export const NETWORK_FILE = "network.json";
/** File in the allocation directory recording the placement cgroup directories. */
export const CGROUP_FILE = "cgroup.json";

function readJson<T>(path: string): T | null {
  try {
    return JSON.parse(readFileSync(path, "utf8")) as T;
  } catch {
    return null;
  }
}

/**
 * Builds placement `name`'s network and firewall with the context's policy
 * and records it in `<dir>/network.json`. Throws NETWORK_SETUP_FAILED (the
 * network is rolled back by createPlacementNetwork).
 */
export async function prepareNetwork(ctx: object, name: string, dir: string): Promise<PlacementNetwork> {
  const net = await createPlacementNetwork(name, isolationOf(ctx).network);
  writeFileSync(join(dir, NETWORK_FILE), JSON.stringify(net) + "\n");
  return net;
}

/** Guest kernel arguments for the network recorded in `dir` (policy defaults when network.json is absent). */
export function networkKernelArgs(ctx: object, dir: string): string[] {
  return readJson<PlacementNetwork>(join(dir, NETWORK_FILE))?.guestKernelArgs ?? guestKernelArgs(isolationOf(ctx).network);
}

/** Creates the placement cgroup with the spec's limits before the VMM starts; records it in `<dir>/cgroup.json`. Throws INTERNAL. */
export function prepareCgroup(ctx: object, name: string, dir: string, spec: { cpuMillis: number; memoryMiB: number; ephemeralDiskMiB: number }): PlacementCgroup {
  const policy = isolationOf(ctx).cgroups;
  const cg = createPlacementCgroup(name, placementLimits(spec, policy), policy);
  writeFileSync(join(dir, CGROUP_FILE), JSON.stringify(cg) + "\n");
  return cg;
}

/** Moves the started VMM into its cgroup and caps its file size at the ephemeral disk (RLIMIT_FSIZE). Throws INTERNAL. */
export async function confineVmm(cg: PlacementCgroup, pid: number, ephemeralDiskMiB: number): Promise<void> {
  addToPlacementCgroup(cg, pid);
  await applyFileSizeLimit(pid, ephemeralDiskMiB * 1024 * 1024);
}

/** PIDs whose command line carries `name` as an argument (the VMM's instance ID). */
export function processesNamed(name: string): number[] {
  const pids: number[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${e}/cmdline`, "utf8").split("\0").includes(name)) pids.push(Number(e));
    } catch {
      /* exited meanwhile */
    }
  }
  return pids;
}

/**
 * Stop steps 5–7 for placement `name` after the VMM was stopped: namespace,
 * TAP, veth and nft tables (in the recorded and the configured uplink
 * namespace), then the cgroup (recorded, else derived). Every step is
 * attempted; returns what remains, including any process still carrying
 * the instance ID (a VMM that Stop could not verify is never killed here).
 */
export async function teardownIsolation(ctx: object, name: string, dir: string): Promise<string[]> {
  const left: string[] = [];
  const iso = isolationOf(ctx);
  const vmm = processesNamed(name);
  if (vmm.length) left.push(`processes with instance ${name}: ${vmm.join(",")}`);
  const recorded = readJson<PlacementNetwork>(join(dir, NETWORK_FILE));
  const spaces: Array<string | undefined> = [];
  if (recorded?.uplink) spaces.push(recorded.uplink.netns);
  if (iso.network.uplink) spaces.push(iso.network.uplink.netns);
  if (!spaces.length) spaces.push(undefined); // no uplink known: still confirm no veth/table of ours sits in the root namespace
  await destroyPlacementNetwork(name, spaces).catch((e: Error) => left.push(`network: ${e.message}`));
  let cg = readJson<PlacementCgroup>(join(dir, CGROUP_FILE));
  if (!cg || cg.name !== name) {
    try {
      cg = placementCgroupOf(name, iso.cgroups, detectControllers());
    } catch (e) {
      left.push(`cgroup: ${(e as Error).message}`);
      cg = null;
    }
  }
  if (cg) left.push(...removePlacementCgroup(cg));
  return left;
}
