/**
 * The typed environment every scheduler object and the front receive
 * (Durable Objects' `env`): a namespace per object class, the deployment's
 * configuration, and the side-effect ports. docs/architecture.md, "The
 * object runtime".
 * Must never: carry in-process services shared between objects (state that
 * lives in memory belongs to the instance that owns it), or a secret beyond
 * the manifest's token digests (the connection-signing key is a reference
 * the signer resolves at each use).
 */
import type { Namespace } from "./runtime/api.ts";
import type { Clock } from "../protocol/clock.ts";
import type { Randomness } from "./runtime/ports.ts";
import { DEFAULT_TIMEOUTS, type TimeoutPolicy } from "../domain/allocation.ts";
import type { DeploymentManifest } from "./manifestSchema.ts";
import type { Metrics } from "./metrics.ts";
import type { Logger } from "../command/log.ts";
import type { AllocationObject } from "./objects/allocationObject.ts";
import type { AllocationIndexObject } from "./objects/allocationIndex.ts";
import type { AdmissionObject } from "./objects/admissionObject.ts";
import type { EnrollmentObject } from "./objects/enrollmentObject.ts";
import type { HostObject } from "./objects/hostObject.ts";
import type { HostDirectoryObject } from "./objects/hostDirectory.ts";
import type { OperationsObject } from "./objects/operationsObject.ts";
import type { NetworkObject } from "./objects/networkObject.ts";
import type { NetworkDirectoryObject } from "./objects/networkDirectory.ts";
import type { ConnectionObject } from "./objects/connectionObject.ts";
import type { RunQueueObject } from "./objects/runQueueObject.ts";
import type { UsageObject } from "./objects/usageObject.ts";
import type { LeasesObject } from "./objects/leaseObject.ts";
import { connectionSettings, type ConnectionSettings } from "./connectionSettings.ts";
import type { ConnectionSigner } from "./connectionSigner.ts";

/** Deliberately injected bugs, for proving that the simulation catches them (unstable; never set in production). */
export interface InjectedBugs {
  /** Frees a placement's capacity when its lease expired, without observing absence: the very rule the spec forbids. */
  releaseCapacityOnLeaseExpiry?: boolean;
  /**
   * Lets a replacement go ahead without waiting for the old generation's
   * grants to be gone from their host (skips CONNECTIONS_NOT_FENCED): one
   * private address may then be routed through two hosts at once, the very
   * thing spec "Revocation and replacement" forbids.
   */
  connectionsNotFenced?: boolean;
  /**
   * Lets a paused or suspended VM run again without taking its CPU and
   * memory back first (issue 21's planted bug): the Host skips the fit check
   * and leaves the placement counted as paused or suspended until the agent
   * reports it running, so the host can be overcommitted meanwhile.
   */
  resumeWithoutCapacity?: boolean;
}

/** Configuration the objects read (never changes while they run). */
export interface SchedulerConfig {
  manifest: DeploymentManifest;
  timeouts: TimeoutPolicy;
  debug: InjectedBugs;
  /** Private networking from the manifest's `connections`, or null without it. */
  connections: ConnectionSettings | null;
}

/** See the module header. */
export interface SchedulerEnv {
  readonly Allocation: Namespace<AllocationObject>;
  readonly AllocationIndex: Namespace<AllocationIndexObject>;
  readonly Admission: Namespace<AdmissionObject>;
  readonly Enrollment: Namespace<EnrollmentObject>;
  readonly Host: Namespace<HostObject>;
  readonly HostDirectory: Namespace<HostDirectoryObject>;
  readonly Operations: Namespace<OperationsObject>;
  readonly Network: Namespace<NetworkObject>;
  readonly NetworkDirectory: Namespace<NetworkDirectoryObject>;
  readonly Connection: Namespace<ConnectionObject>;
  readonly RunQueue: Namespace<RunQueueObject>;
  readonly Usage: Namespace<UsageObject>;
  readonly Leases: Namespace<LeasesObject>;
  readonly config: SchedulerConfig;
  /** The connection-signing key, resolved at each use (null without private networking). */
  readonly signer: ConnectionSigner | null;
  readonly clock: Clock;
  readonly random: Randomness;
  /** Counters of this process (on workerd: of this isolate). */
  readonly metrics: Metrics;
  /** The scheduler's log (state changes; never a token or payload: src/command/log.ts redacts). */
  readonly log: Logger;
}

/** The names of the singletons (one instance each). */
export const GLOBAL = "global";

/** The configuration objects read, from the manifest and option overrides. Throws an Error for a `connections` section that fails its checks (./connectionSettings.ts). */
export function schedulerConfig(
  manifest: DeploymentManifest,
  timeouts: Partial<TimeoutPolicy> = {},
  debug: InjectedBugs = {},
): SchedulerConfig {
  const t: TimeoutPolicy = { ...DEFAULT_TIMEOUTS, ...timeouts };
  if (manifest.limits.retentionDays !== undefined && timeouts.retentionDays === undefined)
    t.retentionDays = manifest.limits.retentionDays;
  return { manifest, timeouts: t, debug, connections: connectionSettings(manifest) };
}
