/**
 * The scheduler on the embedded host (`bb scheduler serve`): the object
 * classes on the embedded runtime over one SQLite file in the data
 * directory (docs/adr/0120-object-runtime-storage.md), migrated at start,
 * and the front (./front.ts) calling them through stubs behind the output
 * gate.
 * Must never: open the data directory's store twice in one process, or let
 * the front call an object other than through a stub.
 */
import { chmodSync, existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import type { TimeoutPolicy } from "../domain/allocation.ts";
import type { AnyAuthorityObject, Namespace, ObjectClass } from "./runtime/api.ts";
import { EmbeddedRuntime, type EmbeddedRuntimeOptions } from "./runtime/embedded/embeddedRuntime.ts";
import { migrate } from "./runtime/migrate.ts";
import { nextStep } from "./runtime/embedded/storageHealth.ts";
import { systemClock, type Clock } from "../protocol/clock.ts";
import { systemRandomness, type Randomness } from "./runtime/ports.ts";
import { MIGRATIONS } from "./migrations/index.ts";
import { lockDataDir, type DataDirLock } from "../storage/dataDirLock.ts";
import type { DeploymentManifest } from "./manifest.ts";
import { GLOBAL, schedulerConfig, type InjectedBugs, type SchedulerEnv } from "./env.ts";
import { OBJECT_CLASSES } from "./objectClasses.ts";
import { SchedulerFront } from "./front.ts";
import { Metrics } from "./metrics.ts";
import { processMetricsText, startProcessMetrics } from "./processMetrics.ts";
import { silentLogger, type Logger } from "../command/log.ts";
import { AllocationObject } from "./objects/allocationObject.ts";
import { AllocationIndexObject } from "./objects/allocationIndex.ts";
import { AdmissionObject } from "./objects/admissionObject.ts";
import { EnrollmentObject } from "./objects/enrollmentObject.ts";
import { HostDirectoryObject } from "./objects/hostDirectory.ts";
import { HostObject } from "./objects/hostObject.ts";
import { OperationsObject } from "./objects/operationsObject.ts";
import { NetworkObject } from "./objects/networkObject.ts";
import { NetworkDirectoryObject } from "./objects/networkDirectory.ts";
import { RunQueueObject } from "./objects/runQueueObject.ts";
import { UsageObject } from "./objects/usageObject.ts";
import { LeasesObject } from "./objects/leaseObject.ts";
import { ConnectionObject } from "./objects/connectionObject.ts";
import { connectionSigner, type ConnectionSigner } from "./connectionSigner.ts";
import { keyFileSeed } from "./connectionKeyFile.ts";
import type { ConnectionSettings } from "./connectionSettings.ts";

export { DELIVERY_TIMEOUT_MS } from "./front.ts";

export { OBJECT_CLASSES } from "./objectClasses.ts";
export { schedulerConfig } from "./env.ts";

/** The store file in a data directory. */
export const STORE_FILE = "objects.db";

/** Options for a scheduler instance. */
export interface WorkerOptions {
  dataDir: string;
  manifest: DeploymentManifest;
  /** Public URL agents and clients use, printed in join commands. */
  publicUrl: string;
  clock?: Clock;
  random?: Randomness;
  timeouts?: Partial<TimeoutPolicy>;
  /** Simulation fault hook (see EmbeddedRuntimeOptions). */
  faultHook?: EmbeddedRuntimeOptions["faultHook"];
  /** Deliberately injected bugs (see InjectedBugs); tests only. */
  debug?: InjectedBugs;
  /** Live-instance bound of the runtime (tests lower it). */
  maxLiveInstances?: number;
  /** Append this process's metrics (prom-client collectors) to /metrics; the server does, simulations do not. */
  processMetrics?: boolean;
  /** The scheduler's log (default: none, as simulations want). */
  log?: Logger;
  /** Run WAL checkpoints on a worker thread (the server does; simulations, with thousands of short runtimes, do not). */
  checkpointInBackground?: boolean;
}

/** See the module header. */
export class SchedulerWorker extends SchedulerFront {
  readonly runtime: EmbeddedRuntime<SchedulerEnv>;
  /** The environment the objects receive (stubs without the output gate). */
  readonly objectEnv: SchedulerEnv;

  constructor(opts: WorkerOptions) {
    // Configuration first: a manifest whose connections section or signing key fails its checks stops the start before the store is opened.
    const config = schedulerConfig(opts.manifest, opts.timeouts, opts.debug);
    const signer = config.connections ? fileSigner(config.connections) : null;
    prepareDataDir(opts.dataDir);
    const clock = opts.clock ?? systemClock;
    const file = join(opts.dataDir, STORE_FILE);
    const lock = lockDataDir(opts.dataDir);
    let runtime: EmbeddedRuntime<SchedulerEnv>;
    try {
      runtime = openRuntime(file, clock, opts, lock);
    } catch (e) {
      lock.release();
      throw e;
    }
    const metrics = new Metrics();
    if (opts.processMetrics) {
      startProcessMetrics();
      metrics.addSource(processMetricsText);
    }
    const base = {
      config,
      signer,
      clock,
      random: opts.random ?? systemRandomness,
      metrics,
      log: opts.log ?? silentLogger,
    };
    const objectEnv: SchedulerEnv = { ...namespaces(runtime, false), ...base };
    runtime.bind(objectEnv);
    super({ ...namespaces(runtime, true), ...base }, opts.publicUrl);
    this.runtime = runtime;
    this.objectEnv = objectEnv;
  }

  /** Re-arms alarms and delivers inbox messages left by a previous process. */
  start(): void {
    this.runtime.start();
  }

  /** Storage health for /healthz: ok, or why not. */
  health(): { ok: boolean; detail: string; code?: string } {
    return this.runtime.health();
  }

  /** Ends parked polls, closes the store and releases the data directory. */
  async close(): Promise<void> {
    await this.runtime.close();
  }
}

/** The signer over the manifest's key file, checked once now (a missing, unreadable, loose or mismatched key stops the start). */
function fileSigner(c: ConnectionSettings): ConnectionSigner {
  const signer = connectionSigner(c.signingKeyId, c.verificationKeys[c.signingKeyId]!, keyFileSeed(c.signingKeyFile));
  try {
    signer.check();
  } catch (e) {
    throw new Error(`manifest /connections/signingKey: ${(e as Error).message}`);
  }
  return signer;
}

/** Creates the data directory mode 0700 (tightening an existing one). Throws a clear error if it cannot be written. */
function prepareDataDir(dir: string): void {
  if (existsSync(join(dir, "registry.db"))) {
    throw new Error(
      `${dir} holds the per-object files of an earlier release (registry.db, objects/): this release keeps every object in ${STORE_FILE} and cannot convert them; move the directory aside and start fresh`,
    );
  }
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chmodSync(dir, 0o700);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "EROFS" || code === "EACCES" || code === "EPERM")
      throw new Error(`cannot write ${dir} (${code}): the data directory must be writable by this user`);
    throw e;
  }
}

/** Opens the runtime over the store file and migrates it (the caller holds the data directory's lock). */
function openRuntime(
  file: string,
  clock: Clock,
  opts: WorkerOptions,
  lock: DataDirLock,
): EmbeddedRuntime<SchedulerEnv> {
  let runtime: EmbeddedRuntime<SchedulerEnv>;
  try {
    runtime = newRuntime(file, clock, opts, lock);
  } catch (e) {
    // Opening the file itself failed (a truncated or foreign file is SQLITE_CORRUPT or SQLITE_NOTADB here).
    throw storageStartError(file, e);
  }
  try {
    migrate(runtime.store, MIGRATIONS, file);
    runtime.probe();
  } catch (e) {
    runtime.store.closeAbandoned();
    throw storageStartError(file, e);
  }
  return runtime;
}

function newRuntime(file: string, clock: Clock, opts: WorkerOptions, lock: DataDirLock): EmbeddedRuntime<SchedulerEnv> {
  const runtime: EmbeddedRuntime<SchedulerEnv> = new EmbeddedRuntime<SchedulerEnv>(
    file,
    clock,
    [...OBJECT_CLASSES] as ObjectClass<AnyAuthorityObject, SchedulerEnv>[],
    {
      onClosed: () => lock.release(),
      ...(opts.log ? { log: opts.log } : {}),
      ...(opts.faultHook ? { faultHook: opts.faultHook } : {}),
      ...(opts.maxLiveInstances ? { maxLiveInstances: opts.maxLiveInstances } : {}),
      onQuarantine: (cls, name, reason) => {
        const now = clock.wallMs();
        const alertId = `alert:quarantine:${cls}:${name}`;
        runtime
          .namespace(OperationsObject, { gated: false })
          .get(GLOBAL)
          .raise({
            kind: "alert",
            alertId,
            type: "object.quarantined",
            subject: `${cls} ${name}`.slice(0, 200),
            reason: "OBJECT_DAMAGED",
            atMs: now,
          })
          .catch(() => undefined);
      },
    },
  );
  return runtime;
}

/**
 * A clear error for a store that cannot be opened or written at start: the
 * file, the SQLite code and SQLite's words, and what to do (storageHealth.ts
 * nextStep). Errors that are not SQLite's (a migration mismatch) pass as they are.
 */
export function storageStartError(file: string, e: unknown): Error {
  const code = (e as { code?: string }).code ?? "";
  const said = e instanceof Error ? e.message : String(e);
  if (code.startsWith("SQLITE_READONLY") || code.startsWith("SQLITE_CANTOPEN") || code === "SQLITE_PERM")
    return new Error(
      `cannot write the scheduler's store ${file} (${code}: ${said}): the data directory must be writable by this user`,
    );
  if (code.startsWith("SQLITE_CORRUPT") || code === "SQLITE_NOTADB")
    return new Error(`the scheduler's store ${file} is damaged (${code}: ${said}): ${nextStep(code, file)}`);
  if (code.startsWith("SQLITE_"))
    return new Error(`cannot open the scheduler's store ${file} (${code}: ${said}): ${nextStep(code, file)}`);
  return e instanceof Error ? e : new Error(String(e));
}

type Namespaces = Pick<
  SchedulerEnv,
  | "Allocation"
  | "AllocationIndex"
  | "Admission"
  | "Enrollment"
  | "Host"
  | "HostDirectory"
  | "Operations"
  | "Network"
  | "NetworkDirectory"
  | "Connection"
  | "RunQueue"
  | "Usage"
  | "Leases"
>;

function namespaces(rt: EmbeddedRuntime<SchedulerEnv>, gated: boolean): Namespaces {
  const ns = <T extends AnyAuthorityObject>(c: ObjectClass<T, SchedulerEnv>): Namespace<T> =>
    rt.namespace(c, gated ? { gated } : { gated, from: "object" });
  return {
    Allocation: ns(AllocationObject),
    AllocationIndex: ns(AllocationIndexObject),
    Admission: ns(AdmissionObject),
    Enrollment: ns(EnrollmentObject),
    Host: ns(HostObject),
    HostDirectory: ns(HostDirectoryObject),
    Operations: ns(OperationsObject),
    Network: ns(NetworkObject),
    NetworkDirectory: ns(NetworkDirectoryObject),
    Connection: ns(ConnectionObject),
    RunQueue: ns(RunQueueObject),
    Usage: ns(UsageObject),
    Leases: ns(LeasesObject),
  };
}
