/**
 * The agent's health report (spec "The agent protocol": "The health report
 * carries inventory and self-checks"; "Agent runtime and local state"):
 * quarantine and failed prerequisites (isolation health), physical
 * inventory, a nearly full state volume, a failing VMM (vmmHealth.ts), and
 * the verified images cached here. Sent with every envelope.
 * Must never: report a host healthy while its quarantine is non-empty.
 */
import { MAX_REPORTED_IMAGES_PER_HEARTBEAT, type AgentPayload } from "../protocol/agent.ts";
import type { HostProbe } from "./ports.ts";
import type { VmmHealth } from "./vmmHealth.ts";

/** Free-space fraction of the state volume below which it counts as nearly full. */
export const VOLUME_NEARLY_FULL_FRACTION = 0.05;

/** The health report type carried by envelopes. */
export type HealthReport = NonNullable<AgentPayload["health"]>;

/** What the agent knows about its own health; `report()` renders it. */
export class AgentHealth {
  /** Foreign `bb-` resources of this host found at startup and still present, as "kind name" (never deleted; quarantine.ts). */
  quarantine: string[] = [];
  /** Resources named for another host on this machine, as "kind name" (reported, never counted). */
  otherHostResources: string[] = [];
  /** IDs of prerequisite checks that failed at startup (scheduler liveness excluded). */
  prerequisitesFailed: string[] = [];
  /** Digests of verified cached images (refreshed by housekeeping). */
  cachedImages: string[] = [];

  constructor(
    private readonly probe: HostProbe,
    private readonly stateDir: string,
    private readonly vmmDriver: string,
    readonly vmm: VmmHealth,
  ) {}

  /** True when the isolation self-checks pass and nothing is quarantined. */
  get isolationHealthy(): boolean {
    return this.quarantine.length === 0 && this.prerequisitesFailed.length === 0;
  }

  /** The report for the next envelope. */
  report(): HealthReport {
    return {
      isolationHealthy: this.isolationHealthy,
      quarantineCount: this.quarantine.length,
      vmmDriver: this.vmmDriver,
      inventory: this.probe.inventory(),
      volumesNearlyFull: this.probe.volumeNearlyFull(this.stateDir, VOLUME_NEARLY_FULL_FRACTION),
      vmmStartFailing: this.vmm.failing,
      cachedImages: this.cachedImages.slice(0, MAX_REPORTED_IMAGES_PER_HEARTBEAT),
    };
  }
}
