/**
 * The host agent daemon (`bb agent run`; spec "The host agent", "Agent
 * runtime and local state", "The agent protocol").
 *
 * Takes the lock, opens agent.db, adopts placements whose VMs survived a
 * restart (PID, start time, instance ID and a guest ping must all match),
 * reports foreign `bb-` namespaces as quarantined (never deleting them),
 * then long-polls the scheduler. Every command is persisted before any side
 * effect; each placement is driven by one serial runner toward its desired
 * state. VMs whose execution lease expired are stopped.
 * Must never: act on a command from another epoch or an older generation,
 * or write a bootstrap payload anywhere.
 */
import { createHash, randomUUID } from "node:crypto";
import { mkdirSync, readFileSync, statfsSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { consola } from "consola";
import { BeachballError } from "../protocol/errors.ts";
import { canonicalJson } from "../domain/identifiers.ts";
import type { AgentCommand, BootstrapDelivery, CommandAck, DeliveryAck, PlacementObservedState, PollResponse } from "../protocol/agent.ts";
import { agentPaths, loadAgentFiles, type AgentConfig } from "./config.ts";
import { AgentStore, type LocalPlacement } from "./store.ts";
import { takeAgentLock } from "./lock.ts";
import { ControlClient } from "./controlClient.ts";
import { inventoryForeign } from "./inventory.ts";
import { trimConsoleLog } from "./vmm/consoleLog.ts";
import { selectVmmDriver } from "./vmm/select.ts";
import { isolationFromConfig, isolationOf } from "./isolation/isolation.ts";
import { runChecks } from "./doctor/checks.ts";
import { DEFAULT_IMAGE_CACHE_MAX_BYTES, ImageCache } from "./image/cache.ts";
import type { VmHandle, VmmDriver } from "./vmm/driver.ts";
import type { GuestSession } from "./guestSession.ts";
import {
  adoptPlacement,
  asPlacementError,
  consoleLogPath,
  imageResolver,
  placementDirName,
  preparePlacement,
  startPlacement,
  stopPlacement,
  type PlacementContext,
  type PlacementRef,
} from "./placementOps.ts";

/** Park requested per poll, ms (below the 30 s healthy-heartbeat bound). */
export const AGENT_POLL_WAIT_MS = 20_000;
/** Housekeeping period (lease checks, console trimming, cleanup retries), ms. */
export const HOUSEKEEPING_MS = 2_000;
/** Most cached image digests reported per heartbeat. */
export const MAX_REPORTED_IMAGES = 64;
/** Free-space fraction of the state volume below which it counts as nearly full. */
export const VOLUME_NEARLY_FULL_FRACTION = 0.05;
/** How long the guest has to confirm a delivery, ms. */
export const GUEST_DELIVERY_TIMEOUT_MS = 20_000;

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

/** Options of `startAgent`. */
export interface AgentOptions {
  dataDir: string;
  /** VMM driver (default: QEMU microvm). */
  driver?: VmmDriver;
}

interface Live {
  handle: VmHandle | null;
  session: GuestSession | null;
  stopping: boolean;
  /** A VM found alive at startup that the runner still has to reconnect to. */
  adopting?: boolean;
}

/** A running agent. */
export class AgentDaemon {
  private readonly store: AgentStore;
  private readonly client: ControlClient;
  private readonly config: AgentConfig;
  private readonly ctx: PlacementContext;
  private readonly releaseLock: () => void;
  private readonly live = new Map<string, Live>();
  private readonly runners = new Map<string, Promise<void>>();
  /** The machine's boot ID (spec "Sessions and epochs"): a restarted agent on the same boot is not an overlapping session. */
  private readonly bootId = machineBootId();
  private epoch = "";
  private stopped = false;
  private quarantine: string[] = [];
  private prerequisitesFailed: string[] = [];
  private readonly imageCache: ImageCache | null;
  private cachedImages: string[] = [];
  private acks: CommandAck[] = [];
  private deliveryAcks: DeliveryAck[] = [];
  private flushing: Promise<void> | null = null;
  private flushAgain = false;
  private timer: ReturnType<typeof setInterval> | undefined;
  private pollLoopDone: Promise<void> = Promise.resolve();
  private pollAbort = new AbortController();

  private constructor(opts: AgentOptions & { driver: VmmDriver }) {
    const files = loadAgentFiles(opts.dataDir);
    this.config = files.config;
    const p = agentPaths(opts.dataDir);
    this.releaseLock = takeAgentLock(p.lock);
    mkdirSync(p.allocations, { recursive: true, mode: 0o700 });
    this.store = new AgentStore(p.db);
    this.client = new ControlClient(this.config.schedulerUrl, this.config.hostId, files.credential);
    this.imageCache = this.config.imageSource
      ? new ImageCache(p.images, this.config.trustedImageKeys ?? [], { onRetry: (r) => consola.warn(`agent: download of ${r.name} interrupted at ${r.haveBytes} bytes (${r.error}); resuming`) })
      : null;
    this.ctx = {
      allocationsDir: p.allocations,
      driver: opts.driver,
      resolveImage: this.config.imageSource
        ? (digest) => this.imageCache!.resolve(digest, this.config.imageSource!).catch((e: unknown) => Promise.reject(asPlacementError(e, "IMAGE_DIGEST_MISMATCH")))
        : imageResolver(this.config.imageDirs, this.config.trustedImageKeys ?? []),
      guestBootTimeoutMs: this.config.guestBootTimeoutMs,
      isolation: isolationFromConfig(this.config),
    };
  }

  /** Starts an agent: lock, store, inventory and adoption, then the poll loop. Throws if not joined or locked. */
  static async start(opts: AgentOptions): Promise<AgentDaemon> {
    let driver = opts.driver;
    if (!driver) {
      const sel = await selectVmmDriver();
      consola.info(`agent: VMM driver ${sel.driver.name}: ${sel.reason}`);
      driver = sel.driver;
    }
    const d = new AgentDaemon({ ...opts, driver });
    // The same prerequisite registry as `bb agent doctor` (spec "Agent runtime and local state").
    const checks = await runChecks(d.config);
    for (const c of checks) if (c.status === "fail") consola.warn(`agent: prerequisite ${c.id} failed: ${c.detail} (fix: ${c.fix})`);
    d.prerequisitesFailed = checks.filter((c) => c.status === "fail" && c.id !== "scheduler").map((c) => c.id);
    await d.inventory();
    d.timer = setInterval(() => void d.housekeeping(), HOUSEKEEPING_MS);
    d.pollLoopDone = d.pollLoop();
    return d;
  }

  /** The host ID this agent serves. */
  get hostId(): string {
    return this.config.hostId;
  }

  /** Stops polling and releases the lock; running VMs are left for the next agent to adopt. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.pollAbort.abort();
    if (this.timer) clearInterval(this.timer);
    await this.pollLoopDone.catch(() => undefined);
    await Promise.allSettled([...this.runners.values()]);
    for (const l of this.live.values()) l.session?.close();
    this.store.close();
    this.releaseLock();
  }

  private async inventory(): Promise<void> {
    const known = new Set<string>();
    for (const p of this.store.livePlacements()) {
      known.add(p.dirName);
      const live: Live = { handle: null, session: null, stopping: false };
      this.live.set(p.placementId, live);
      if (p.vmPid !== null && p.vmStartTime !== null) {
        const handle = { instanceId: p.dirName, pid: p.vmPid, startTime: p.vmStartTime };
        if (await this.ctx.driver.isAlive(handle)) {
          live.handle = handle; // the runner adopts it (ping, or identity for a VM still booting) without blocking startup
          live.adopting = true;
        } else if (p.observed === "starting" || p.observed === "running") {
          if (p.desired !== "absent") this.store.observe(p, "error", { errorCode: "VM_EXITED" }, Date.now());
        }
      }
      if (p.observed === "preparing") this.store.patch(p.placementId, { observed: "accepted" });
      this.kick(p.placementId);
    }
    const foreign = await inventoryForeign(known, this.ctx.allocationsDir, isolationOf(this.ctx).cgroups);
    this.quarantine = foreign.map((f) => `${f.kind} ${f.name}`);
    for (const f of foreign) consola.warn(`agent: quarantined foreign ${f.kind} ${f.name} (not deleted); isolation is unhealthy until an operator resolves it`);
  }

  private ref(p: LocalPlacement): PlacementRef {
    return { allocationId: p.allocationId, placementId: p.placementId, generation: p.generation, dirName: p.dirName, spec: JSON.parse(p.specJson) };
  }

  private attach(p: LocalPlacement, live: Live, session: GuestSession): void {
    live.session = session;
    session.onWorkloadExit = (code) => {
      const cur = this.store.placement(p.placementId);
      if (cur && cur.observed === "running") this.observe(cur, "running", { workloadExitCode: code });
    };
    session.onClose = () => {
      const cur = this.store.placement(p.placementId);
      if (!live.stopping && cur && cur.desired !== "absent" && cur.observed === "running") this.observe(cur, "error", { errorCode: "VM_EXITED" });
    };
  }

  private observe(p: LocalPlacement, state: PlacementObservedState, extra: Parameters<AgentStore["observe"]>[2] = {}): void {
    this.store.observe(p, state, extra, Date.now());
    this.flush();
  }

  private kick(placementId: string): void {
    const prev = this.runners.get(placementId) ?? Promise.resolve();
    const next = prev.then(() => this.drive(placementId)).catch((e: unknown) => consola.error(`agent: placement ${placementId}:`, e));
    this.runners.set(placementId, next);
    void next.finally(() => {
      if (this.runners.get(placementId) === next) this.runners.delete(placementId);
    });
  }

  /** Drives one placement toward its desired state (serial per placement). */
  private async drive(placementId: string): Promise<void> {
    if (this.stopped) return;
    let p = this.store.placement(placementId);
    if (!p || p.observed === "absent") return;
    const live = this.live.get(placementId) ?? { handle: null, session: null, stopping: false };
    this.live.set(placementId, live);
    const ref = this.ref(p);
    if (live.adopting && live.handle && p.desired !== "absent") {
      live.adopting = false;
      // A VM that was still booting must prove its identity again; a running one answers a ping.
      const booting = p.observed === "starting";
      const session = await adoptPlacement(this.ctx, ref, booting, this.ctx.guestBootTimeoutMs);
      const cur = this.store.placement(placementId)!;
      if (session) {
        this.attach(cur, live, session);
        consola.info(`agent: adopted VM pid ${live.handle.pid} of placement ${placementId}`);
        if (booting && cur.desired !== "absent") this.observe(cur, "running");
      } else if (cur.desired !== "absent") {
        this.observe(cur, "error", { errorCode: "GUEST_BOOT_TIMEOUT" });
      }
      p = this.store.placement(placementId)!;
    }
    if (p.desired === "absent") {
      live.stopping = true;
      if (p.observed !== "stopping") this.observe(p, "stopping");
      const left = await stopPlacement(this.ctx, ref, live.handle, live.session);
      p = this.store.placement(placementId)!;
      if (left.length) {
        consola.warn(`agent: cleanup of ${placementId} incomplete: ${left.join("; ")}`);
        if (p.errorCode !== "CLEANUP_FAILED") this.observe(p, "error", { errorCode: "CLEANUP_FAILED" });
        return;
      }
      this.live.delete(placementId);
      this.observe(p, "absent", { vmPid: null, vmStartTime: null });
      return;
    }
    if (p.observed === "accepted" || p.observed === "unknown") {
      this.observe(p, "preparing");
      try {
        await preparePlacement(this.ctx, ref);
        this.observe(this.store.placement(placementId)!, "prepared");
      } catch (e) {
        const err = asPlacementError(e, "INTERNAL");
        consola.warn(`agent: prepare of ${placementId} failed: ${err.code}: ${err.message}`);
        this.observe(this.store.placement(placementId)!, "error", { errorCode: err.code });
        return;
      }
    }
    p = this.store.placement(placementId)!;
    if (p.desired === "running" && p.observed === "prepared") {
      if (p.leaseExpiresAtMs <= Date.now()) return this.observe(p, "error", { errorCode: "LEASE_EXPIRED" });
      try {
        const { handle, session } = await startPlacement(this.ctx, ref, (h) => {
          live.handle = h;
          this.observe(this.store.placement(placementId)!, "starting", { vmPid: h.pid, vmStartTime: h.startTime });
        });
        live.handle = handle;
        const cur = this.store.placement(placementId)!;
        this.attach(cur, live, session);
        if (cur.desired !== "absent") this.observe(cur, "running");
      } catch (e) {
        const err = asPlacementError(e, "VMM_START_FAILED");
        consola.warn(`agent: start of ${placementId} failed: ${err.code}: ${err.message}`);
        this.observe(this.store.placement(placementId)!, "error", { errorCode: err.code });
      }
    }
    if (this.store.placement(placementId)?.desired === "absent") this.kick(placementId);
  }

  private async pollLoop(): Promise<void> {
    let backoffMs = 250;
    while (!this.stopped) {
      try {
        const updates = this.store.pendingUpdates(200);
        const resp = await this.client.send("poll", this.epoch, {
          bootId: this.bootId,
          updates: this.epoch ? updates : [],
          acks: [],
          deliveryAcks: [],
          health: this.health(),
          waitMs: AGENT_POLL_WAIT_MS,
        }, this.pollAbort.signal);
        if (this.epoch && updates.length) this.store.ackUpdates(updates[updates.length - 1]!.seq);
        if (resp.agentEpoch !== this.epoch) consola.info(`agent: session epoch ${resp.agentEpoch.slice(0, 8)}…`);
        this.epoch = resp.agentEpoch;
        backoffMs = 250;
        this.handlePoll(resp);
      } catch (e) {
        if (this.stopped) break;
        if (e instanceof BeachballError && e.code === "STALE_AGENT_EPOCH") this.epoch = "";
        else consola.warn(`agent: poll failed: ${(e as Error).message}`);
        await Bun.sleep(backoffMs);
        backoffMs = Math.min(backoffMs * 2, 5_000);
      }
    }
  }

  private health() {
    let volumesNearlyFull = false;
    try {
      const st = statfsSync(this.ctx.allocationsDir);
      volumesNearlyFull = Number(st.bavail) / Number(st.blocks) < VOLUME_NEARLY_FULL_FRACTION;
    } catch {
      /* unknown: not reported as full */
    }
    return {
      isolationHealthy: this.quarantine.length === 0 && this.prerequisitesFailed.length === 0,
      quarantineCount: this.quarantine.length,
      vmmDriver: this.ctx.driver.name,
      inventory: { cpuMillis: cpus().length * 1000, memoryMiB: Math.floor(totalmem() / (1024 * 1024)) },
      volumesNearlyFull,
      cachedImages: this.cachedImages.slice(0, MAX_REPORTED_IMAGES),
    };
  }

  private handlePoll(resp: PollResponse): void {
    this.store.applyLeases(resp.leases);
    for (const cmd of resp.commands) this.acceptCommand(cmd, resp.agentEpoch);
    for (const d of resp.deliveries) void this.deliver(d);
    if (resp.commands.length) this.flush();
  }

  private acceptCommand(cmd: AgentCommand, epoch: string): void {
    if (cmd.agentEpoch !== epoch) return;
    const digest = createHash("sha256")
      .update(canonicalJson({ commandId: cmd.commandId, type: cmd.type, allocationId: cmd.allocationId, placementId: cmd.placementId, generation: cmd.generation, spec: cmd.spec }))
      .digest("hex");
    const newer = this.store.livePlacements().find((p) => p.allocationId === cmd.allocationId && p.generation > cmd.generation);
    if (newer && cmd.type !== "ensure_absent") {
      this.acks.push({ commandId: cmd.commandId, result: "rejected", errorCode: "STALE_GENERATION" });
      return;
    }
    const isolationBlocked = this.quarantine.length > 0 && cmd.type !== "ensure_absent";
    if (isolationBlocked) {
      this.acks.push({ commandId: cmd.commandId, result: "rejected", errorCode: "INTERNAL" });
      return;
    }
    const r = this.store.recordCommand(cmd, digest, placementDirName(cmd.allocationId, cmd.placementId, cmd.generation), Date.now());
    if (r === "conflict") this.acks.push({ commandId: cmd.commandId, result: "rejected", errorCode: "COMMAND_CONFLICT" });
    else this.acks.push({ commandId: cmd.commandId, result: r });
    if (r === "accepted") this.kick(cmd.placementId);
  }

  private async deliver(d: BootstrapDelivery): Promise<void> {
    const base = { deliveryId: d.deliveryId, placementId: d.placementId, generation: d.generation };
    const earlier = this.store.deliveryDigest(d.deliveryId);
    if (earlier) {
      this.deliveryAcks.push({ ...base, result: "consumed", digest: earlier });
      return this.flush();
    }
    const p = this.store.placement(d.placementId);
    const session = this.live.get(d.placementId)?.session;
    if (!p || p.generation !== d.generation || p.desired === "absent" || !session?.connected) {
      this.deliveryAcks.push({ ...base, result: "guest_not_connected" });
      return this.flush();
    }
    const expected = `sha256:${createHash("sha256").update(Buffer.from(d.payloadBase64, "base64")).digest("hex")}`;
    const r = await session.deliver(d.deliveryId, d.contentType, d.payloadBase64, GUEST_DELIVERY_TIMEOUT_MS);
    if (r.result === "consumed" && r.digest === expected) {
      this.store.recordDelivery(d.deliveryId, d.placementId, r.digest);
      this.deliveryAcks.push({ ...base, result: "consumed", digest: r.digest });
    } else {
      this.deliveryAcks.push({ ...base, result: r.result === "guest_not_connected" ? "guest_not_connected" : "rejected" });
    }
    this.flush();
  }

  /** Sends pending observations and acks through /v1/agents/messages (one send in flight). */
  private flush(): void {
    if (this.flushing) {
      this.flushAgain = true;
      return;
    }
    this.flushing = (async () => {
      do {
        this.flushAgain = false;
        if (!this.epoch || this.stopped) break;
        const updates = this.store.pendingUpdates(200);
        const acks = this.acks.splice(0, 200);
        const deliveryAcks = this.deliveryAcks.splice(0, 64);
        if (!updates.length && !acks.length && !deliveryAcks.length) break;
        try {
          await this.client.send("messages", this.epoch, { bootId: this.bootId, updates, acks, deliveryAcks, health: this.health() });
          if (updates.length) this.store.ackUpdates(updates[updates.length - 1]!.seq);
        } catch (e) {
          this.acks.unshift(...acks);
          this.deliveryAcks.unshift(...deliveryAcks);
          if (e instanceof BeachballError && e.code === "STALE_AGENT_EPOCH") this.epoch = "";
          await Bun.sleep(500);
          this.flushAgain = !this.stopped;
        }
      } while (this.flushAgain);
    })().finally(() => {
      this.flushing = null;
    });
  }

  private async housekeeping(): Promise<void> {
    const now = Date.now();
    if (this.imageCache) {
      // Evict unused images under the size bound; never one a placement here still references.
      const inUse = new Set(this.store.livePlacements().map((p) => (JSON.parse(p.specJson) as { imageDigest: string }).imageDigest));
      await this.imageCache.evict(this.config.imageCacheMaxBytes ?? DEFAULT_IMAGE_CACHE_MAX_BYTES, inUse).catch((e: Error) => consola.warn(`agent: image cache eviction failed: ${e.message}`));
      this.cachedImages = await this.imageCache.cachedDigests().catch(() => this.cachedImages);
    }
    for (const p of this.store.livePlacements()) {
      if (p.desired !== "absent" && p.leaseExpiresAtMs <= now && (p.observed === "running" || p.observed === "starting" || p.observed === "prepared")) {
        consola.warn(`agent: lease of ${p.placementId} expired; stopping its VM`);
        this.store.patch(p.placementId, { desired: "absent", errorCode: "LEASE_EXPIRED" });
        this.kick(p.placementId);
      } else if (p.desired === "absent" && !this.runners.has(p.placementId)) {
        this.kick(p.placementId);
      }
      if (this.live.get(p.placementId)?.handle) await trimConsoleLog(consoleLogPath(this.ctx, p.dirName), this.config.consoleBudgetBytes).catch(() => 0);
    }
    if (this.store.pendingUpdates(1).length || this.acks.length) this.flush();
  }
}
