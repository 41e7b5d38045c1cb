/**
 * FakeIsolation: a test double of the isolation port (isolationPort.ts) for
 * unit tests and the seeded simulation. It keeps the set of placement
 * networks and cgroups in memory, can be told to fail the next network
 * setup, and reports leftovers the way HostIsolation does.
 * Must never: touch a real namespace, nftables table or cgroup.
 */
import { netError } from "./addressPool.ts";
import type { IsolationPort } from "./isolationPort.ts";

/** In-memory isolation for tests and the simulation (a named double: no kernel objects). */
export class FakeIsolation implements IsolationPort {
  /** Placement networks that exist. */
  readonly networks = new Set<string>();
  /** Placement cgroups that exist, with the PIDs confined in each. */
  readonly cgroups = new Map<string, number[]>();
  /** Set true to make the next prepareNetwork fail with NETWORK_SETUP_FAILED. */
  failNextNetwork = false;

  async prepareNetwork(name: string): Promise<void> {
    if (this.failNextNetwork) {
      this.failNextNetwork = false;
      throw netError(`fake network setup of ${name} refused`);
    }
    this.networks.add(name);
  }

  networkKernelArgs(): string[] {
    return ["ip=10.0.0.2::10.0.0.1:255.255.255.252::eth0:off"];
  }

  prepareCgroup(name: string): (pid: number) => Promise<void> {
    this.cgroups.set(name, []);
    return async (pid) => {
      this.cgroups.get(name)?.push(pid);
    };
  }

  async teardown(name: string): Promise<string[]> {
    this.networks.delete(name);
    this.cgroups.delete(name);
    return [];
  }

  async networkExists(name: string): Promise<boolean> {
    return this.networks.has(name);
  }

  async destroyNetwork(name: string): Promise<void> {
    this.networks.delete(name);
  }
}
