/**
 * The host agent daemon (`bb agent run`; spec "The host agent", "Agent
 * runtime and local state"): reads the agent's files, builds the real
 * ports (scheduler control client, VMM driver, isolation over ip/nft/
 * cgroups, images, the lock file, the prerequisite registry, the
 * inventory) and runs the Agent (agent.ts) over them.
 * Must never: put decision logic here; it belongs to the parts over ports,
 * where the simulation exercises it.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { agentPaths, loadAgentFiles } from "./config.ts";
import { takeAgentLock } from "./lock.ts";
import { ControlClient } from "./controlClient.ts";
import { inventoryForeign } from "./inventory.ts";
import { hostTag } from "./resourceNames.ts";
import { selectVmmDriver } from "./vmm/select.ts";
import { isolationFromConfig } from "./isolation/isolation.ts";
import { HostIsolation } from "./isolation/isolationOps.ts";
import { HostImages } from "./image/hostImages.ts";
import { REAL_DOCTOR_DEPS, runChecks } from "./doctor/checks.ts";
import { vmmBootCheck } from "./doctor/vmmBoot.ts";
import type { VmmDriver } from "./vmm/driver.ts";
import { systemClock } from "../protocol/clock.ts";
import { consolaLog, type AgentLog, systemHostProbe, systemRandom, systemTimers } from "./ports.ts";
import { Agent } from "./agent.ts";
import { parseListen, startMetricsServer, type MetricsServer } from "./metricsServer.ts";
import { endpointSettings, startHostEndpoint } from "./endpoint/startEndpoint.ts";
import type { AgentConnectionsConfig } from "./config.ts";
import { restoreCgroupMounts, systemCgroupMountPorts } from "./isolation/cgroups/mountRestore.ts";

/** The kernel's boot ID, or a random one where /proc does not offer it. */
export function machineBootId(): string {
  try {
    const id = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    if (/^[0-9a-f-]{36}$/.test(id)) return id;
  } catch {
    /* not Linux */
  }
  return randomUUID();
}

/**
 * The keys the guests' control services are told to trust: exactly those the
 * host endpoint checks grants with (endpointSettings), or none when this host
 * runs no endpoint or its settings are refused (the endpoint then does not
 * start either, and says why).
 */
export function guestControlKeys(c: AgentConnectionsConfig | undefined): Record<string, string> | undefined {
  if (!c) return undefined;
  try {
    return Object.fromEntries(endpointSettings(c).keys);
  } catch {
    return undefined; // the endpoint's own start reports the bad field
  }
}

/** Options of `AgentDaemon.start`. */
export interface AgentOptions {
  dataDir: string;
  /** VMM driver (default: selected by probing, see vmm/select.ts). */
  driver?: VmmDriver;
  /** The agent's log (default: text lines through consola, consolaLog). */
  log?: AgentLog;
}

/** A running agent with real ports. */
export class AgentDaemon {
  private constructor(
    private readonly agent: Agent,
    /** The metrics endpoint, when agent.json sets metricsListen. */
    readonly metricsServer: MetricsServer | null,
  ) {}

  /** Starts an agent from `<dataDir>`. Throws if the host has not joined, or another agent holds the lock. */
  static async start(opts: AgentOptions): Promise<AgentDaemon> {
    const files = loadAgentFiles(opts.dataDir);
    const config = files.config;
    const p = agentPaths(opts.dataDir);
    const log = opts.log ?? consolaLog;
    // Under `ip netns exec` the fresh /sys hides the cgroup hierarchies: mount them again, in this mount namespace only.
    await restoreCgroupMounts(systemCgroupMountPorts).then(
      (r) =>
        r.restored &&
        log.info(
          "cgroup hierarchies were not mounted in this mount namespace (ip netns exec?): mounted them for the agent",
          { mounted: r.mounted.join(",") },
        ),
      (e: Error) => log.warn("cannot mount the cgroup hierarchies in this mount namespace", { error: e.message }),
    );
    let driver = opts.driver;
    if (!driver) {
      const sel = await selectVmmDriver();
      log.info("VMM driver selected", { driver: sel.driver.name, reason: sel.reason });
      driver = sel.driver;
    }
    const isolation = new HostIsolation(isolationFromConfig(config));
    const metricsListen =
      config.metricsListen === undefined ? null : parseListen(config.metricsListen, "metricsListen");
    const client = new ControlClient(config.schedulerUrl, config.hostId, files.credential);
    const agent = await Agent.start(
      {
        hostId: config.hostId,
        bootId: machineBootId(),
        dbPath: p.db,
        allocationsDir: p.allocations,
        guestBootTimeoutMs: config.guestBootTimeoutMs,
        ...(guestControlKeys(config.connections)
          ? { controlVerificationKeys: guestControlKeys(config.connections)! }
          : {}),
        consoleBudgetBytes: config.consoleBudgetBytes,
        ...(config.vmmSelfCheckIntervalMs ? { vmmSelfCheckIntervalMs: config.vmmSelfCheckIntervalMs } : {}),
        failedConsoleDir: p.failedConsoles,
        templatesDir: p.templates,
        ...(config.templateCacheMaxBytes ? { templateCacheMaxBytes: config.templateCacheMaxBytes } : {}),
        failedConsoleRetentionMs: config.failedConsoleRetentionMs ?? 0,
      },
      {
        clock: systemClock,
        timers: systemTimers,
        random: systemRandom,
        log,
        probe: systemHostProbe,
        channel: client,
        logSink: client,
        driver,
        isolation,
        images: new HostImages({
          imageDirs: config.imageDirs,
          trustedKeys: config.trustedImageKeys ?? [],
          cacheDir: p.images,
          ...(config.imageSource ? { source: config.imageSource } : {}),
          ...(config.imageCacheMaxBytes ? { cacheMaxBytes: config.imageCacheMaxBytes } : {}),
          onRetry: (r) =>
            log.warn("image download interrupted; resuming", { name: r.name, haveBytes: r.haveBytes, error: r.error }),
          onEvictionError: (e) => log.warn("image cache eviction failed", { error: e.message }),
        }),
        lock: () => takeAgentLock(p.lock),
        selfChecks: () => runChecks(config, { ...REAL_DOCTOR_DEPS, vmmDriver: async () => driver }),
        vmmSelfCheck: () => vmmBootCheck(driver, config),
        inventory: (known) => inventoryForeign(known, hostTag(config.hostId), p.allocations, isolation.iso.cgroups),
        ...(config.connections
          ? {
              connections: (d) =>
                startHostEndpoint({
                  hostId: config.hostId,
                  dataDir: opts.dataDir,
                  config: config.connections!,
                  log,
                  ...d,
                }),
            }
          : {}),
      },
    );
    let metricsServer: MetricsServer | null = null;
    if (metricsListen) {
      try {
        metricsServer = startMetricsServer(agent.metrics, metricsListen);
        log.info("agent metrics served", {
          url: `http://${metricsListen.hostname.includes(":") ? `[${metricsListen.hostname}]` : metricsListen.hostname}:${metricsServer.port}/metrics`,
        });
      } catch (e) {
        await agent.stop();
        throw e;
      }
    }
    return new AgentDaemon(agent, metricsServer);
  }

  /** The host ID this agent serves. */
  get hostId(): string {
    return this.agent.hostId;
  }

  /** Graceful stop: running VMs are left for the next agent to adopt (see Agent.stop). */
  stop(): Promise<void> {
    this.metricsServer?.stop();
    return this.agent.stop();
  }
}
