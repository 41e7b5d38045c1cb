/**
 * HostIsolation, the real isolation port (isolationPort.ts): the isolation
 * steps of a placement's lifecycle (spec "Prepare", "Start", "Stop", "Guest
 * network isolation"): build the network and firewall (network.json),
 * confine the VMM in its cgroup with a file-size limit (cgroup.json), and
 * tear both down again, confirming that nothing of the placement remains.
 * Must never: report a resource as removed without checking, or act on a
 * name that is not the placement's `bb-<digest>`.
 */
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { detectControllers } from "./cgroups/hierarchy.ts";
import { placementLimits } from "./cgroups/limits.ts";
import {
  addToPlacementCgroup,
  applyFileSizeLimit,
  createPlacementCgroup,
  placementCgroupOf,
  removePlacementCgroup,
  type PlacementCgroup,
} from "./cgroups/placementCgroup.ts";
import { DEFAULT_ISOLATION, type PlacementIsolation } from "./isolation.ts";
import type { IsolationPort } from "./isolationPort.ts";
import {
  createPlacementNetwork,
  destroyPlacementNetwork,
  guestKernelArgs,
  listPlacementNetworks,
  type PlacementNetwork,
} from "./placementNet.ts";

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

/** The real isolation port over `ip`, `nft` and the cgroup file systems, with host-wide settings `iso`. */
export class HostIsolation implements IsolationPort {
  /** `iso`: validated network and cgroup policy (isolationFromConfig); defaults: no uplink, cgroups under the agent's own. */
  constructor(readonly iso: PlacementIsolation = DEFAULT_ISOLATION) {}

  /** Builds the network and firewall with the policy and records it in `<dir>/network.json`. Throws NETWORK_SETUP_FAILED (rolled back by createPlacementNetwork). */
  async prepareNetwork(name: string, dir: string): Promise<void> {
    const net = await createPlacementNetwork(name, this.iso.network);
    writeFileSync(join(dir, NETWORK_FILE), JSON.stringify(net) + "\n");
  }

  /** Guest kernel arguments for the network recorded in `dir` (policy defaults when network.json is absent). */
  networkKernelArgs(dir: string): string[] {
    return readJson<PlacementNetwork>(join(dir, NETWORK_FILE))?.guestKernelArgs ?? guestKernelArgs(this.iso.network);
  }

  /** Creates the cgroup with the spec's limits and records it in `<dir>/cgroup.json`; the returned step moves the VMM in and sets RLIMIT_FSIZE. Throws (cgroup errors). */
  prepareCgroup(
    name: string,
    dir: string,
    spec: { cpuMillis: number; memoryMiB: number; ephemeralDiskMiB: number },
  ): (pid: number) => Promise<void> {
    const policy = this.iso.cgroups;
    const cg = createPlacementCgroup(name, placementLimits(spec, policy), policy);
    writeFileSync(join(dir, CGROUP_FILE), JSON.stringify(cg) + "\n");
    return async (pid) => {
      addToPlacementCgroup(cg, pid);
      await applyFileSizeLimit(pid, spec.ephemeralDiskMiB * 1024 * 1024);
    };
  }

  /**
   * Stop steps 5–7 after the VMM was stopped: namespace, TAP, veth and nft
   * tables (in the recorded and the configured uplink namespace), then the
   * cgroup (recorded, else derived). Every step is attempted; returns what
   * remains, including any process still carrying the instance ID (a VMM
   * that Stop could not verify is never killed here).
   */
  async teardown(name: string, dir: string): Promise<string[]> {
    const left: string[] = [];
    const vmm = processesNamed(name);
    if (vmm.length) left.push(`processes with instance ${name}: ${vmm.join(",")}`);
    const recorded = readJson<PlacementNetwork>(join(dir, NETWORK_FILE));
    const spaces: Array<string | undefined> = [];
    if (recorded?.uplink) spaces.push(recorded.uplink.netns);
    if (this.iso.network.uplink) spaces.push(this.iso.network.uplink.netns);
    if (!spaces.length) spaces.push(undefined); // no uplink known: still confirm no veth/table of ours sits in the root namespace
    await destroyPlacementNetwork(name, spaces).catch((e: Error) => left.push(`network: ${e.message}`));
    let cg = readJson<PlacementCgroup>(join(dir, CGROUP_FILE));
    if (!cg || cg.name !== name) {
      try {
        cg = placementCgroupOf(name, this.iso.cgroups, detectControllers());
      } catch (e) {
        left.push(`cgroup: ${(e as Error).message}`);
        cg = null;
      }
    }
    if (cg) left.push(...removePlacementCgroup(cg));
    return left;
  }

  /** True while namespace `name` exists (true when listing fails: never assume absence). */
  async networkExists(name: string): Promise<boolean> {
    return (await listPlacementNetworks().catch(() => [name])).includes(name);
  }

  /** Deletes the placement network `name` (namespace, veth, tables). */
  async destroyNetwork(name: string): Promise<void> {
    await destroyPlacementNetwork(name);
  }
}
