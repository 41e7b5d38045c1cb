/**
 * The host agent assembled from its parts over ports (spec "The host
 * agent", "Agent runtime and local state"): startup (lock, prerequisite
 * registry, inventory and adoption), the control loop, the placement
 * reconciler, bootstrap deliveries, housekeeping, when the scheduler
 * takes it, the push of workload output (logs/), and, when the host runs
 * one, the private-networking endpoint (configure_connection in,
 * connectivity_update out; src/agent/endpoint). The daemon
 * (daemon.ts) gives it real ports; the seeded simulation gives it fakes and
 * so runs this same code.
 *
 * A graceful stop leaves every VM running for the next start: it stops
 * polling, halts the runners without touching a VM and without recording
 * anything observed while stopping, sends what the outbox holds (all true)
 * and the workload output still queued, then closes agent.db and releases
 * the lock.
 * Must never: act on a command from another epoch or an older generation,
 * or write a bootstrap payload anywhere.
 */
import { mkdirSync } from "node:fs";
import { AgentStore } from "./store.ts";
import {
  errorText,
  type AgentLog,
  type AgentRandom,
  type ControlChannel,
  type HostProbe,
  type LogSink,
  type Timers,
} from "./ports.ts";
import type { VmmDriver } from "./vmm/driver.ts";
import type { IsolationPort } from "./isolation/isolationPort.ts";
import type { ImagePort } from "./image/imagePort.ts";
import type { AgentDebug } from "./debug.ts";
import { AgentHealth } from "./health.ts";
import { PlacementReconciler } from "./reconcile/reconciler.ts";
import { ControlLoop } from "./control/controlLoop.ts";
import { deliverBootstrap } from "./control/deliveries.ts";
import { DEFAULT_TEMPLATE_CACHE_MAX_BYTES, TemplateStore } from "./templates.ts";
import { Housekeeping } from "./housekeeping.ts";
import { failedPrerequisites, recoverPlacements, type StartupPorts } from "./startup.ts";
import { applyInventory } from "./quarantine.ts";
import { AgentMetrics } from "./metrics.ts";
import { transitionSink } from "./placementTransitions.ts";
import { DEFAULT_VMM_SELF_CHECK_INTERVAL_MS, VmmHealth, type VmmSelfCheck } from "./vmmHealth.ts";
import { VMM_BOOT_CHECK_ID } from "./doctor/checks.ts";
import { controlConfigMessage } from "./guestControlConfig.ts";
import { consoleLogPath, placementSecrets, type PlacementContext } from "./placementOps.ts";
import { ConsoleShipper } from "./logs/shipper.ts";
import { AgentConnections, type ConnectionEndpointPort } from "./endpoint/agentConnections.ts";
import type { PlacementLookup } from "./endpoint/grantCheck.ts";
import { storePlacementLookup } from "./endpoint/placementLookup.ts";
import type { Clock } from "../protocol/clock.ts";

/** How long a graceful stop waits for in-flight placement steps, ms. */
export const STOP_STEP_GRACE_MS = 5_000;
/** How long a graceful stop's last flush may take, ms. */
export const STOP_FLUSH_TIMEOUT_MS = 3_000;

/** Every side effect the agent has, as ports. */
export interface AgentPorts extends StartupPorts {
  clock: Clock;
  timers: Timers;
  random: AgentRandom;
  log: AgentLog;
  probe: HostProbe;
  channel: ControlChannel;
  /** The scheduler's intake of workload output; absent: output stays on this host. */
  logSink?: LogSink;
  driver: VmmDriver;
  isolation: IsolationPort;
  images: ImagePort;
  /** The VMM test boot (doctor check `vmm-boot`), run while VMM starts keep failing. */
  vmmSelfCheck(): Promise<VmmSelfCheck>;
  /**
   * Starts the host endpoint (private networking), given where placements
   * are and whom to tell about changes; absent when this host runs none.
   * Rejects when it cannot start (the agent then runs without it).
   */
  connections?(deps: { placements: PlacementLookup; onChange: () => void }): Promise<ConnectionEndpointPort>;
}

/** Where the agent keeps its state and how it behaves. */
export interface AgentSettings {
  hostId: string;
  /** The machine's boot ID (spec "Sessions and epochs"). */
  bootId: string;
  /** agent.db path. */
  dbPath: string;
  /** `<dataDir>/allocations`. */
  allocationsDir: string;
  /** How long the guest has to send GuestReady after the VMM starts, ms. */
  guestBootTimeoutMs: number;
  /**
   * The connection verification keys handed to every guest's control
   * service (`control_config`, guestControlConfig.ts); absent: none. Checked
   * at start: the agent refuses to start with keys the message's schema
   * refuses (more than MAX_CONTROL_VERIFICATION_KEYS, a malformed key).
   */
  controlVerificationKeys?: Readonly<Record<string, string>>;
  /** Serial console budget per placement, bytes. */
  consoleBudgetBytes: number;
  /** While VMM starts keep failing, the time between self-checks, ms (default DEFAULT_VMM_SELF_CHECK_INTERVAL_MS). */
  vmmSelfCheckIntervalMs?: number;
  /** Where failed placements' console logs are kept (`<dataDir>/failed-consoles`). */
  failedConsoleDir?: string;
  /** How long they are kept, ms (0 or absent: not kept). */
  failedConsoleRetentionMs?: number;
  /** `<dataDir>/templates`: the host's templates (issue 21, templates.ts); absent: templated classes boot cold. */
  templatesDir?: string;
  /** Bound on the bytes all templates take before the least recently used go (default DEFAULT_TEMPLATE_CACHE_MAX_BYTES). */
  templateCacheMaxBytes?: number;
  /** Deliberately injected bugs (debug.ts; tests only). */
  debug?: AgentDebug;
}

/** A running agent. */
export class Agent {
  private stopping: Promise<void> | null = null;

  private constructor(
    readonly settings: AgentSettings,
    private readonly ports: AgentPorts,
    private readonly store: AgentStore,
    private readonly releaseLock: () => void,
    readonly reconciler: PlacementReconciler,
    readonly control: ControlLoop,
    readonly health: AgentHealth,
    private readonly housekeeping: Housekeeping,
    private readonly consoleLogs: ConsoleShipper | null,
    readonly connections: AgentConnections | null,
    /** Prometheus metrics of this agent (metrics.ts), served by metricsServer.ts when configured. */
    readonly metrics: AgentMetrics,
  ) {}

  /** Starts an agent: lock, agent.db, prerequisite registry, inventory and adoption, then the poll loop and housekeeping. Throws if locked. */
  static async start(settings: AgentSettings, ports: AgentPorts): Promise<Agent> {
    const releaseLock = ports.lock();
    let store: AgentStore | null = null;
    try {
      mkdirSync(settings.allocationsDir, { recursive: true, mode: 0o700 });
      store = new AgentStore(settings.dbPath);
      return await Agent.assemble(settings, ports, store, releaseLock);
    } catch (e) {
      store?.close();
      releaseLock();
      throw e;
    }
  }

  private static async assemble(
    settings: AgentSettings,
    ports: AgentPorts,
    store: AgentStore,
    releaseLock: () => void,
  ): Promise<Agent> {
    const { clock, timers, log } = ports;
    const vmm = new VmmHealth({
      clock,
      log,
      selfCheck: () => ports.vmmSelfCheck(),
      intervalMs: settings.vmmSelfCheckIntervalMs ?? DEFAULT_VMM_SELF_CHECK_INTERVAL_MS,
    });
    const health = new AgentHealth(ports.probe, settings.allocationsDir, ports.driver.name, vmm);
    const metrics = new AgentMetrics(() => store.livePlacements().map((p) => p.observed));
    const keepFailedConsoles =
      settings.failedConsoleDir && (settings.failedConsoleRetentionMs ?? 0) > 0 ? settings.failedConsoleDir : null;
    const templates = settings.templatesDir ? new TemplateStore(settings.templatesDir, clock) : null;
    if (templates) {
      const swept = templates.sweep(); // builds an earlier process left: never finished
      if (swept.length) log.info("removed unfinished template builds", { names: swept.join(",") });
    }
    const ctx: PlacementContext = {
      ...(templates
        ? {
            templates,
            onTemplate: (e) =>
              e.what === "built"
                ? log.info("made a template", { placementId: e.placementId, template: e.detail ?? "" })
                : log.warn("templated placement boots cold", {
                    placementId: e.placementId,
                    reason: e.reason ?? "",
                    ...(e.detail ? { error: e.detail } : {}),
                  }),
          }
        : {}),
      allocationsDir: settings.allocationsDir,
      driver: ports.driver,
      images: ports.images,
      isolation: ports.isolation,
      timers,
      random: ports.random,
      clock,
      guestBootTimeoutMs: settings.guestBootTimeoutMs,
      ...(settings.controlVerificationKeys
        ? { controlVerificationKeys: controlConfigMessage(settings.controlVerificationKeys).verificationKeys }
        : {}),
    };
    const consoleLogs = ports.logSink
      ? new ConsoleShipper({
          sink: ports.logSink,
          log,
          consolePath: (d) => consoleLogPath(ctx, d),
          secretsOf: (d) => placementSecrets(ctx, d),
          sleep: (ms, signal) => timers.sleep(ms, signal),
        })
      : null;
    if (consoleLogs) ctx.consoleLogs = consoleLogs;
    let control: ControlLoop | null = null;
    let connections: AgentConnections | null = null;
    if (ports.connections) {
      try {
        const endpoint = await ports.connections({
          placements: storePlacementLookup(() => store.livePlacements()),
          onChange: () => {
            connections?.changed();
            control?.flush();
          },
        });
        connections = new AgentConnections(endpoint, clock);
      } catch (e) {
        log.error("host endpoint not started; configure_connection commands will be rejected", { error: errorText(e) });
      }
    }
    const reconciler = new PlacementReconciler({
      store,
      ctx,
      clock,
      log,
      onObservation: () => {
        void connections?.placementsChanged();
        control?.flush();
      },
      onStartOutcome: (launched) => vmm.noteStart(launched),
      transitions: transitionSink(log, metrics),
      ...(keepFailedConsoles ? { failedConsoleDir: keepFailedConsoles } : {}),
      ...(settings.debug ? { debug: settings.debug } : {}),
    });
    control = new ControlLoop({
      channel: ports.channel,
      store,
      clock,
      timers,
      log,
      bootId: settings.bootId,
      hostId: settings.hostId,
      health: () => health.report(),
      quarantined: () => health.quarantine.length > 0,
      onCommand: (id) => reconciler.kick(id),
      deliver: (d) => {
        // Before the guest has it: a line of it echoed by the workload is redacted from its output.
        consoleLogs?.notePayload(d.placementId, Buffer.from(d.payloadBase64, "base64"));
        return deliverBootstrap(store, d, reconciler.sessionOf(d.placementId));
      },
      ...(connections ? { connections } : {}),
    });
    const housekeeping = new Housekeeping({
      store,
      clock,
      timers,
      log,
      reconciler,
      images: ports.images,
      ...(templates
        ? {
            templates: {
              store: templates,
              maxBytes: settings.templateCacheMaxBytes ?? DEFAULT_TEMPLATE_CACHE_MAX_BYTES,
            },
          }
        : {}),
      health,
      allocationsDir: settings.allocationsDir,
      consoleBudgetBytes: settings.consoleBudgetBytes,
      failedConsoles: keepFailedConsoles
        ? { dir: keepFailedConsoles, retentionMs: settings.failedConsoleRetentionMs! }
        : null,
      consoleLogs,
      vmm,
      inventory: (known) => ports.inventory(known),
      hasPending: () => control.hasPending(),
      flush: () => control.flush(),
    });
    try {
      const checks = await ports.selfChecks();
      health.prerequisitesFailed = failedPrerequisites(
        checks.filter((c) => c.id !== VMM_BOOT_CHECK_ID),
        log,
      );
      const boot = checks.find((c) => c.id === VMM_BOOT_CHECK_ID);
      if (boot) vmm.noteSelfCheck(boot);
      applyInventory(
        health,
        await recoverPlacements({ store, driver: ports.driver, reconciler, clock, log, ports }),
        log,
        true,
      );
      if (consoleLogs)
        for (const p of store.livePlacements()) if (reconciler.handleOf(p.placementId)) consoleLogs.adopt(p);
      const agent = new Agent(
        settings,
        ports,
        store,
        releaseLock,
        reconciler,
        control,
        health,
        housekeeping,
        consoleLogs,
        connections,
        metrics,
      );
      housekeeping.start();
      control.start();
      return agent;
    } catch (e) {
      await connections?.close();
      throw e;
    }
  }

  /** The host ID this agent serves. */
  get hostId(): string {
    return this.settings.hostId;
  }

  /**
   * Ends this agent as a crash would, for the simulation and tests: nothing
   * is flushed or halted, agent.db is closed as the kernel would close it.
   * The caller drops the process's timers and channels (fake ports).
   */
  abandon(): void {
    this.stopping ??= Promise.resolve();
    this.housekeeping.stop();
    void this.connections?.close();
    this.store.close();
  }

  /**
   * Graceful stop (SIGTERM, SIGINT, upgrades): stop polling, halt the
   * runners without touching a VM, send what is queued (all of it true),
   * close agent.db, release the lock. Running VMs stay for the next start
   * to adopt. Idempotent.
   */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.housekeeping.stop();
      await this.control.stop();
      await this.reconciler.halt(STOP_STEP_GRACE_MS);
      await Promise.all([
        this.control.finalFlush(STOP_FLUSH_TIMEOUT_MS),
        this.consoleLogs?.drain(STOP_FLUSH_TIMEOUT_MS),
      ]);
      // Grants live in memory only: the peers and the placements' links go with the process.
      await this.connections?.close();
      this.store.close();
      this.releaseLock();
    })();
    return this.stopping;
  }
}
