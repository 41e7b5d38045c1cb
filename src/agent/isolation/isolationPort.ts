/**
 * The isolation port: what a placement's lifecycle needs from namespaces,
 * veth, TAP, nftables and cgroups (spec "Prepare", "Start", "Stop", "Guest
 * network isolation"), so placement code never runs `ip`, `nft` or cgroup
 * writes itself. HostIsolation (isolationOps.ts) is the real adapter;
 * FakeIsolation (fakeIsolation.ts) records names in memory for tests and
 * the simulation.
 * Must never: act on a name that is not the placement's `bb-<digest>`.
 */

/** The isolation steps of one placement, addressed by its name `bb-<digest>` and allocation directory. */
export interface IsolationPort {
  /** Builds the placement's network namespace, TAP and firewall; records them in `dir`. Throws (NETWORK_SETUP_FAILED) after rolling back. */
  prepareNetwork(name: string, dir: string): Promise<void>;
  /** Guest kernel arguments (addresses, resolvers) for the network recorded in `dir`. */
  networkKernelArgs(dir: string): string[];
  /**
   * Creates the placement cgroup with its limits before the VMM exists and
   * records it in `dir`; returns the step that moves the started VMM (by
   * PID) into it and caps its file size at `ephemeralDiskMiB`.
   */
  prepareCgroup(
    name: string,
    dir: string,
    spec: { cpuMillis: number; memoryMiB: number; ephemeralDiskMiB: number },
  ): (pid: number) => Promise<void>;
  /** Removes namespace, TAP, veth, nft tables and cgroup, attempting every step; returns what remains (empty: all gone). */
  teardown(name: string, dir: string): Promise<string[]>;
  /** True while a network namespace named `name` exists. */
  networkExists(name: string): Promise<boolean>;
  /** Deletes a half-built network of `name` (a leftover of an interrupted Prepare). */
  destroyNetwork(name: string): Promise<void>;
}
