/**
 * Periodic agent housekeeping (spec "Execution leases", "Start": console
 * under a byte budget, "Stop"): evicts unused images past the cache bound,
 * refreshes the cached-image list for the health report, stops VMs whose execution lease expired, re-drives
 * placements whose cleanup is still incomplete, keeps console logs under
 * their budget (after reading what workload output they gained, for the
 * scheduler's log), deletes kept consoles of failed placements once their
 * retention passed, re-runs the VMM self-check while VMM starts are
 * failing, re-runs the inventory while something is quarantined (so a
 * resolved quarantine clears), and flushes anything still queued. Workload
 * output is shipped on its own, faster tick (LOG_SHIP_INTERVAL_MS;
 * logs/shipper.ts).
 * Must never: let a VM outlive its lease, or delete a resource itself
 * (stopping goes through the placement's runner).
 */
import type { AgentStore } from "./store.ts";
import { errorText, type AgentLog, type Timers } from "./ports.ts";
import type { PlacementReconciler } from "./reconcile/reconciler.ts";
import type { TemplateStore } from "./templates.ts";
import type { ImagePort } from "./image/imagePort.ts";
import type { AgentHealth } from "./health.ts";
import { trimConsoleLogAt, type ConsoleTrim } from "./vmm/consoleLog.ts";
import type { VmmHealth } from "./vmmHealth.ts";
import { pruneKeptConsoles } from "./vmm/keptConsoles.ts";
import { consoleLogPath } from "./placementOps.ts";
import { LOG_SHIP_INTERVAL_MS, type ConsoleShipper } from "./logs/shipper.ts";
import type { ForeignResource } from "./inventory.ts";
import { applyInventory, QUARANTINE_RECHECK_MS, recheckWanted } from "./quarantine.ts";
import type { Clock } from "../protocol/clock.ts";

/** Housekeeping period (lease checks, console trimming, cleanup retries), ms. */
export const HOUSEKEEPING_MS = 2_000;

/** What housekeeping works with. */
export interface HousekeepingDeps {
  store: AgentStore;
  clock: Clock;
  timers: Timers;
  log: AgentLog;
  reconciler: PlacementReconciler;
  images: ImagePort;
  /** The host's templates and their byte bound (issue 21): the least recently used past it are evicted. */
  templates?: { store: TemplateStore; maxBytes: number };
  health: AgentHealth;
  allocationsDir: string;
  /** Serial console budget per placement, bytes. */
  consoleBudgetBytes: number;
  /** Where failed placements' console logs are kept and for how long (ms); null: not kept. */
  failedConsoles: { dir: string; retentionMs: number } | null;
  /** Pushes workload output to the scheduler (null: no log intake). */
  consoleLogs: ConsoleShipper | null;
  /** VMM start health: re-checked while failing. */
  vmm: VmmHealth;
  /** The startup inventory, run again while something is quarantined (quarantine.ts). */
  inventory(known: ReadonlySet<string>): Promise<ForeignResource[]>;
  /** True when observations or acks wait to be sent. */
  hasPending(): boolean;
  flush(): void;
}

/** See the module header. */
export class Housekeeping {
  private cancel: (() => void) | null = null;
  private cancelShipping: (() => void) | null = null;
  private running = false;
  private inventoryAtMs = 0;

  constructor(private readonly deps: HousekeepingDeps) {}

  /** Runs a pass every HOUSEKEEPING_MS until stop(). */
  start(): void {
    this.cancel = this.deps.timers.every(HOUSEKEEPING_MS, () => void this.pass());
    const logs = this.deps.consoleLogs;
    if (logs)
      this.cancelShipping = this.deps.timers.every(
        LOG_SHIP_INTERVAL_MS,
        () =>
          void logs.tick(this.deps.store.livePlacements().filter((p) => this.deps.reconciler.handleOf(p.placementId))),
      );
  }

  /** Stops the periodic passes. */
  stop(): void {
    this.cancel?.();
    this.cancel = null;
    this.cancelShipping?.();
    this.cancelShipping = null;
  }

  /** One pass (skipped while the previous one still runs). */
  async pass(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      await this.once();
    } catch (e) {
      this.deps.log.error("housekeeping failed", { error: errorText(e) });
    } finally {
      this.running = false;
    }
  }

  /** Returns how the trim moved the file's offsets (null when under budget or on error). */
  private trim(dirName: string): ConsoleTrim | null {
    try {
      return trimConsoleLogAt(
        consoleLogPath({ allocationsDir: this.deps.allocationsDir }, dirName),
        this.deps.consoleBudgetBytes,
      );
    } catch (e) {
      this.deps.log.warn("cannot trim a console log", { dirName, error: errorText(e) });
      return null;
    }
  }

  private async recheckQuarantine(now: number): Promise<void> {
    const { health, store, log } = this.deps;
    if (!recheckWanted(health)) return;
    if (this.inventoryAtMs === 0) this.inventoryAtMs = now; // the startup inventory just ran
    if (now - this.inventoryAtMs < QUARANTINE_RECHECK_MS) return;
    this.inventoryAtMs = now;
    const found = await this.deps.inventory(new Set(store.livePlacements().map((p) => p.dirName)));
    const wasQuarantined = health.quarantine.length > 0;
    applyInventory(health, found, log, false);
    if (wasQuarantined && health.quarantine.length === 0) this.deps.flush(); // the scheduler learns at once
  }

  private async once(): Promise<void> {
    const { store, clock, reconciler, health } = this.deps;
    // Evict unused images under the cache's size bound; never one a placement here still references.
    const inUse = new Set(
      store.livePlacements().map((p) => (JSON.parse(p.specJson) as { imageDigest: string }).imageDigest),
    );
    await this.deps.images.maintain(inUse);
    if (this.deps.templates) {
      const { store: t, maxBytes } = this.deps.templates;
      try {
        const { evicted, bytes } = t.evict(maxBytes);
        if (evicted.length) this.deps.log.info("evicted templates", { templates: evicted.join(","), bytes, maxBytes });
      } catch (e) {
        this.deps.log.warn("template eviction failed", { error: errorText(e) });
      }
    }
    health.cachedImages = await this.deps.images.cachedDigests().catch(() => health.cachedImages);
    if (!this.cancel) return;
    const now = clock.wallMs();
    for (const p of store.livePlacements()) {
      // Every state counts: a VMM left running after a failed start (observed error) is still a VM on an ended lease.
      if (p.desired !== "absent" && p.leaseExpiresAtMs <= now) {
        this.deps.log.warn("execution lease expired; stopping whatever the placement has", {
          allocationId: p.allocationId,
          placementId: p.placementId,
          generation: p.generation,
          state: p.observed,
        });
        store.patch(p.placementId, { desired: "absent", errorCode: "LEASE_EXPIRED" });
        reconciler.kick(p.placementId);
      } else if (p.desired === "absent" && !reconciler.isRunning(p.placementId)) {
        reconciler.kick(p.placementId);
      }
      if (reconciler.handleOf(p.placementId)) {
        // Workload output is read before the trim, so the trim never drops bytes not yet read.
        this.deps.consoleLogs?.collect(p);
        const t = this.trim(p.dirName);
        if (t) this.deps.consoleLogs?.trimmed(p, t);
      }
    }
    if (this.deps.consoleLogs) {
      this.deps.consoleLogs.retain(new Set(store.livePlacements().map((p) => p.placementId)));
      void this.deps.consoleLogs.flush();
    }
    if (this.deps.failedConsoles)
      pruneKeptConsoles(this.deps.failedConsoles.dir, this.deps.failedConsoles.retentionMs, now);
    await this.deps.vmm.recheckIfDue();
    await this.recheckQuarantine(now);
    if (this.deps.hasPending()) this.deps.flush();
  }
}
