/**
 * Placement reconcile (spec "From command to microVM", "Agent runtime and
 * local state"): one serial runner per placement drives it from its
 * observed state toward the desired state persisted in agent.db, one step
 * at a time (Prepare, Start, Stop, adoption of a VM that survived a
 * restart, the report of a VM that ended on its own with its diagnosis),
 * and records every transition as an observation in the outbox.
 *
 * This is the module the seeded simulation drives (test/sim/), over the
 * same ports the daemon gives it, with fakes behind them.
 * Must never: start a VM without a live execution lease, act while halted,
 * or record an observation that the agent's own shutdown caused.
 */
import type { PlacementObservedState, StartOrigin } from "../../protocol/agent.ts";
import type { AgentStore, LocalPlacement, ObservationExtra } from "../store.ts";
import { errorText, type AgentLog } from "../ports.ts";
import type { VmHandle, VmSnapshot } from "../vmm/driver.ts";
import type { GuestSession } from "../guestSession.ts";
import { NO_AGENT_DEBUG, type AgentDebug } from "../debug.ts";
import {
  adoptPlacement,
  diagnoseVmExit,
  preparePlacement,
  prepareFork,
  restorePlacement,
  startPlacement,
  startWarm,
  stopPlacement,
  suspendPlacement,
  type PlacementContext,
  type PlacementRef,
  type StartHooks,
} from "../placementOps.ts";
import { keptConsolePath } from "../vmm/keptConsoles.ts";
import { AgentError } from "../errors.ts";
import type { TransitionSink } from "../placementTransitions.ts";
import type { Clock } from "../../protocol/clock.ts";

/** What the reconciler works with. */
export interface ReconcilerDeps {
  store: AgentStore;
  ctx: PlacementContext;
  clock: Clock;
  log: AgentLog;
  /** Called after each recorded observation (the control loop then flushes the outbox). */
  onObservation(): void;
  /** Called when a start attempt ends: `launched` false when the VMM failed to start (VMM_START_FAILED). */
  onStartOutcome?(launched: boolean): void;
  /** Receives every recorded observation (one log line and the metrics per transition; placementTransitions.ts). */
  transitions?: TransitionSink;
  /** Where Stop keeps the console log of a placement that failed (absent: deleted with it). */
  failedConsoleDir?: string;
  debug?: AgentDebug;
}

/** After a guest channel closed, how often and how many times to check that the VMM process is gone before diagnosing, ms (panic=1 reboots a second after a panic). */
export const EXIT_SETTLE_POLL_MS = 100;
/** See EXIT_SETTLE_POLL_MS (30 × 100 ms = 3 s). */
export const EXIT_SETTLE_POLLS = 30;

/** Observed states in which a VM's own end is reported as VM_EXITED (a paused VM's process can die too). */
const EXIT_REPORTED_FROM: ReadonlySet<PlacementObservedState> = new Set(["starting", "running", "paused"]);

/** The in-memory side of one placement: its VM and guest session while this agent holds them. */
interface LiveVm {
  handle: VmHandle | null;
  session: GuestSession | null;
  /** Stop has begun: a closing session is expected, not a VM exit. */
  stopping: boolean;
  /** A suspend is under way: its VMM ends on purpose (issue 21). */
  suspending?: boolean;
  /** A VM found alive at startup that the runner still has to reconnect to. */
  adopting: boolean;
  /** The VM ended on its own (its channel closed, or it was gone at startup): the runner reports VM_EXITED with a diagnosis. */
  exitPending: boolean;
  /** The report of the workload's exit code in flight (its output is stored first); Stop awaits it before it reports absent. */
  exitReport?: Promise<void>;
}

/** See the module header. */
export class PlacementReconciler {
  private readonly live = new Map<string, LiveVm>();
  private readonly runners = new Map<string, Promise<void>>();
  /** Disk clones of forks in flight, by parent placement ID: the parent's restore waits for them (issue 21). */
  private readonly forkCopies = new Map<string, Promise<void>>();
  /** Suspended placements whose restore has begun: a fork of one is refused (SNAPSHOT_MISSING), its disks are about to change. */
  private readonly restoring = new Set<string>();
  /** VMM launches in flight: a stop waits for each, so no started VM goes unrecorded. */
  private readonly launches = new Set<Promise<unknown>>();
  private readonly debug: AgentDebug;
  private halted = false;

  constructor(private readonly deps: ReconcilerDeps) {
    this.debug = deps.debug ?? NO_AGENT_DEBUG;
  }

  /** Records that placement `placementId`'s VM `handle` survived a restart; its runner reconnects before anything else. */
  markForAdoption(placementId: string, handle: VmHandle): void {
    this.live.set(placementId, { handle, session: null, stopping: false, adopting: true, exitPending: false });
  }

  /** Records that placement `placementId`'s VM ended while no agent watched (found dead at startup); its runner reports it. */
  markExited(placementId: string, handle: VmHandle): void {
    this.live.set(placementId, { handle, session: null, stopping: false, adopting: false, exitPending: true });
  }

  /** The VM handle this agent holds for a placement, or null. */
  handleOf(placementId: string): VmHandle | null {
    return this.live.get(placementId)?.handle ?? null;
  }

  /** The connected guest session of a placement, or null. */
  sessionOf(placementId: string): GuestSession | null {
    const s = this.live.get(placementId)?.session;
    return s?.connected ? s : null;
  }

  /** True while a runner for the placement is queued or working. */
  isRunning(placementId: string): boolean {
    return this.runners.has(placementId);
  }

  /** Queues one drive of the placement behind any drive already queued for it (serial per placement). */
  kick(placementId: string): void {
    if (this.halted) return;
    const prev = this.runners.get(placementId) ?? Promise.resolve();
    const next = prev
      .then(() => this.drive(placementId))
      .catch((e: unknown) => this.deps.log.error("placement step failed", { placementId, error: errorText(e) }));
    this.runners.set(placementId, next);
    void next.finally(() => {
      if (this.runners.get(placementId) === next) this.runners.delete(placementId);
    });
  }

  /**
   * Stops reconciling without touching any VM: no new step starts, no
   * observation is recorded from now on, guest sessions are detached and
   * closed (their VMs keep running for the next agent to adopt). Resolves
   * once in-flight steps ended or `graceMs` passed, and in any case only
   * after every VMM launch in flight was recorded.
   */
  async halt(graceMs: number): Promise<void> {
    this.halted = true;
    const done = new AbortController();
    await Promise.race([
      Promise.allSettled([...this.runners.values()]),
      this.deps.ctx.timers.sleep(graceMs, done.signal),
    ]);
    done.abort(); // no timer outlives the stop
    await Promise.allSettled([...this.launches]);
    for (const l of this.live.values()) {
      if (!l.session) continue;
      l.session.onClose = () => {};
      l.session.onWorkloadExit = () => {};
      l.session.close();
    }
  }

  /** Records an observation (persisted with the outbox entry) unless halted. */
  observe(p: LocalPlacement, state: PlacementObservedState, extra: ObservationExtra = {}): void {
    if (this.halted) return;
    this.record(p, state, extra);
    this.deps.onObservation();
  }

  /** Persists an observation (and its outbox entry) and hands the transition to the sink. */
  private record(p: LocalPlacement, state: PlacementObservedState, extra: ObservationExtra): void {
    const now = this.deps.clock.wallMs();
    const before = this.deps.store.placement(p.placementId) ?? p;
    this.deps.store.observe(p, state, extra, now);
    this.deps.transitions?.(before, state, extra, now);
  }

  private current(placementId: string): LocalPlacement {
    const p = this.deps.store.placement(placementId);
    if (!p) throw new Error(`placement ${placementId} vanished from agent.db`);
    return p;
  }

  private ref(p: LocalPlacement): PlacementRef {
    return {
      allocationId: p.allocationId,
      placementId: p.placementId,
      generation: p.generation,
      dirName: p.dirName,
      spec: JSON.parse(p.specJson),
    };
  }

  /** True when the placement's execution lease is live on this agent's clock. */
  private leaseLive(placementId: string): boolean {
    return this.current(placementId).leaseExpiresAtMs > this.deps.clock.wallMs();
  }

  private attach(placementId: string, live: LiveVm, session: GuestSession): void {
    live.session = session;
    // The code is recorded whenever the guest reports it: while running, and while
    // stopping (a workload that traps TERM and exits during release), after
    // its last output was stored by the scheduler (bounded: ConsoleShipper.settle).
    session.onWorkloadExit = (code) => {
      const p = this.deps.store.placement(placementId);
      if (!p) return;
      const report = (this.deps.ctx.consoleLogs?.settle(this.ref(p), code) ?? Promise.resolve()).then(() => {
        const cur = this.deps.store.placement(placementId);
        if (cur && cur.observed !== "absent" && cur.workloadExitCode === null)
          this.observe(cur, cur.observed, { workloadExitCode: code });
      });
      live.exitReport = report.catch((e: unknown) =>
        this.deps.log.error("workload exit report failed", { placementId, error: errorText(e) }),
      );
    };
    session.onClose = () => {
      const cur = this.deps.store.placement(placementId);
      if (this.halted || live.stopping || live.suspending || !cur || cur.desired === "absent") return;
      if (cur.observed !== "running" && cur.observed !== "paused") return;
      live.exitPending = true;
      this.kick(placementId);
    };
  }

  /**
   * Reports a VM that ended on its own: waits (bounded) for its VMM process
   * to finish exiting, then observes VM_EXITED with the reason and the
   * redacted console tail (placementOps.diagnoseVmExit).
   */
  private async reportExit(placementId: string, ref: PlacementRef, live: LiveVm): Promise<void> {
    live.exitPending = false;
    const { driver, timers } = this.deps.ctx;
    const handle = live.handle;
    let alive = handle ? await driver.isAlive(handle) : false;
    for (let i = 0; alive && i < EXIT_SETTLE_POLLS; i++) {
      await timers.sleep(EXIT_SETTLE_POLL_MS);
      alive = await driver.isAlive(handle!);
    }
    if (this.halted) return;
    const cur = this.current(placementId);
    if (cur.desired === "absent" || !EXIT_REPORTED_FROM.has(cur.observed)) return;
    const exit = diagnoseVmExit(this.deps.ctx, ref, alive);
    this.deps.log.warn("VM exited on its own", { placementId, exitReason: exit.reason });
    this.observe(cur, "error", { errorCode: "VM_EXITED", exit });
  }

  /** Drives one placement toward its desired state (serial per placement). */
  private async drive(placementId: string): Promise<void> {
    if (this.halted) return;
    const { store, ctx, log } = this.deps;
    let p = store.placement(placementId);
    if (!p || p.observed === "absent") return;
    const live = this.live.get(placementId) ?? {
      handle: null,
      session: null,
      stopping: false,
      adopting: false,
      exitPending: false,
    };
    this.live.set(placementId, live);
    const ref = this.ref(p);
    // A paused VM cannot answer a ping: it is adopted when it runs again (drivePauseState).
    if (live.adopting && live.handle && p.desired !== "absent" && p.observed !== "paused") {
      live.adopting = false;
      // A VM that was still booting must prove its identity again; a running one answers a ping.
      const booting = p.observed === "starting";
      const session = await adoptPlacement(ctx, ref, booting, ctx.guestBootTimeoutMs);
      if (this.halted) return session?.close();
      const cur = this.current(placementId);
      if (session) {
        this.attach(placementId, live, session);
        log.info("adopted a running VM", { placementId, vmPid: live.handle.pid });
        if (booting && cur.desired !== "absent") this.observe(cur, "running");
      } else if (cur.desired !== "absent") {
        this.observe(cur, "error", { errorCode: "GUEST_BOOT_TIMEOUT" });
      }
      p = this.current(placementId);
    }
    if (live.exitPending) {
      await this.reportExit(placementId, ref, live);
      if (this.halted) return;
      p = this.current(placementId);
    }
    if (p.desired === "absent") return this.driveAbsent(placementId, ref, live);
    if (await this.drivePauseState(placementId, ref, live, p)) return this.kickIfGone(placementId);
    if (p.observed === "accepted" || p.observed === "unknown") {
      this.observe(p, "preparing");
      try {
        if (ref.spec.forkOf) await this.prepareForkOf(placementId, ref);
        else await preparePlacement(ctx, ref);
        if (this.halted) return;
        this.observe(this.current(placementId), "prepared");
      } catch (e) {
        if (this.halted) return;
        const err = AgentError.from(e, "INTERNAL");
        log.warn("prepare failed", { placementId, code: err.code, subsystem: err.subsystem, error: err.chain() });
        this.observe(this.current(placementId), "error", { errorCode: err.code });
        return;
      }
    }
    p = this.current(placementId);
    if (p.desired === "running" && p.observed === "prepared") {
      if (!ref.spec.forkOf)
        await this.driveStart(placementId, live, (hooks) =>
          ref.spec.template
            ? startWarm(ctx, ref, hooks, ctx.clock ?? this.deps.clock)
            : startPlacement(ctx, ref, hooks),
        );
      else if (!p.snapshotJson)
        this.observe(p, "error", { errorCode: "SNAPSHOT_MISSING" }); // a fork never boots its parent's disks cold
      else {
        const snapshot = JSON.parse(p.snapshotJson) as VmSnapshot;
        const clock = ctx.clock ?? this.deps.clock;
        await this.driveStart(placementId, live, (hooks) => restorePlacement(ctx, ref, snapshot, hooks, clock));
      }
    }
    this.kickIfGone(placementId);
  }

  /**
   * Prepare of a fork (issue 21): its parent must be suspended on this host
   * at the generation the command names, with its snapshot, and not being
   * restored (`restoring`); the parent's restore waits while its disks are
   * cloned (`forkCopies`). Both checks and the registration run before the
   * first await, so a clone never overlaps the parent running. Records the
   * fork's own snapshot on its placement. Throws AgentError
   * SNAPSHOT_MISSING, or what prepareFork throws.
   */
  private async prepareForkOf(placementId: string, ref: PlacementRef): Promise<void> {
    const src = ref.spec.forkOf!;
    const parent = this.deps.store.placement(src.placementId);
    if (
      !parent ||
      parent.allocationId !== src.allocationId ||
      parent.generation !== src.generation ||
      parent.observed !== "suspended" ||
      !parent.snapshotJson ||
      this.restoring.has(src.placementId)
    )
      throw new AgentError(
        "SNAPSHOT_MISSING",
        `the fork's parent ${src.placementId} is not suspended here at generation ${src.generation}`,
        { subsystem: "vmm" },
      );
    const copy = prepareFork(this.deps.ctx, ref, parent.dirName, JSON.parse(parent.snapshotJson) as VmSnapshot);
    const all = Promise.allSettled([this.forkCopies.get(src.placementId), copy]).then(() => {
      if (this.forkCopies.get(src.placementId) === all) this.forkCopies.delete(src.placementId);
    });
    this.forkCopies.set(src.placementId, all);
    const snapshot = await copy;
    this.deps.store.patch(placementId, { snapshotJson: JSON.stringify(snapshot) });
  }

  /** Queues another drive when the placement became unwanted meanwhile (Stop follows). */
  private kickIfGone(placementId: string): void {
    if (!this.halted && this.deps.store.placement(placementId)?.desired === "absent") this.kick(placementId);
  }

  /**
   * Pause, suspend, resume and restore (issue 21): moves a running, paused
   * or suspended VM toward what the placement wants. Returns false when the
   * placement is in none of these cases (the boot path handles it). A pause
   * or suspend the driver refuses leaves the VM as it was and reports that
   * state with the error code (the scheduler then wants it so again).
   */
  private async drivePauseState(
    placementId: string,
    ref: PlacementRef,
    live: LiveVm,
    p: LocalPlacement,
  ): Promise<boolean> {
    const { driver } = this.deps.ctx;
    const h = live.handle;
    if (p.desired === "paused" && p.observed === "running") {
      try {
        if (!driver.pause || !h) throw new AgentError("VMM_UNSUPPORTED", `the ${driver.name} driver cannot pause`);
        await driver.pause(h);
        if (!this.halted) this.observe(this.current(placementId), "paused");
      } catch (e) {
        this.refused(placementId, "running", AgentError.from(e, "VMM_CONTROL_FAILED"));
      }
      return true;
    }
    if (p.desired === "suspended" && (p.observed === "running" || p.observed === "paused")) {
      if (!h) {
        this.refused(placementId, p.observed, new AgentError("VMM_UNSUPPORTED", "no VM handle to suspend"));
        return true;
      }
      live.suspending = true;
      try {
        const snapshot = await suspendPlacement(this.deps.ctx, ref, h, live.session);
        live.handle = null;
        live.session = null;
        live.adopting = false;
        if (this.halted) return true;
        this.deps.store.patch(placementId, { snapshotJson: JSON.stringify(snapshot) });
        this.observe(this.current(placementId), "suspended", { vmPid: null, vmStartTime: null });
      } catch (e) {
        const err = AgentError.from(e, "VMM_CONTROL_FAILED");
        if (this.halted) return true;
        if (await driver.isAlive(h)) this.refused(placementId, p.observed, err);
        else this.observe(this.current(placementId), "error", { errorCode: err.code });
      } finally {
        live.suspending = false;
      }
      return true;
    }
    if (p.desired === "running" && p.observed === "paused") {
      if (!this.leaseLive(placementId)) {
        this.observe(this.current(placementId), "error", { errorCode: "LEASE_EXPIRED" });
        return true;
      }
      try {
        if (!driver.resume || !h) throw new AgentError("VMM_UNSUPPORTED", `the ${driver.name} driver cannot resume`);
        await driver.resume(h);
        if (live.adopting) {
          // Adopted while paused: reconnect now that it can answer.
          live.adopting = false;
          const session = await adoptPlacement(this.deps.ctx, ref, false, this.deps.ctx.guestBootTimeoutMs);
          if (this.halted) {
            session?.close();
            return true;
          }
          if (!session) throw new AgentError("GUEST_BOOT_TIMEOUT", "the resumed guest did not answer");
          this.attach(placementId, live, session);
        }
        if (!this.halted) this.observe(this.current(placementId), "running");
      } catch (e) {
        if (!this.halted)
          this.observe(this.current(placementId), "error", {
            errorCode: AgentError.from(e, "VMM_CONTROL_FAILED").code,
          });
      }
      return true;
    }
    if (p.desired === "running" && p.observed === "suspended") {
      const snapshot = p.snapshotJson ? (JSON.parse(p.snapshotJson) as VmSnapshot) : null;
      if (!snapshot) {
        this.observe(p, "error", { errorCode: "INTERNAL" });
        return true;
      }
      const clock = this.deps.ctx.clock ?? this.deps.clock;
      this.restoring.add(placementId); // from here on no fork clones this VM's disks
      try {
        await this.forkCopies.get(placementId); // the clones already under way finish first
        await this.driveStart(placementId, live, (hooks) =>
          restorePlacement(this.deps.ctx, ref, snapshot, hooks, clock),
        );
      } finally {
        this.restoring.delete(placementId);
      }
      return true;
    }
    return false;
  }

  /** A pause or suspend the driver did not carry out: the VM stays `stayed`, wanted so again, and the code goes to the scheduler. */
  private refused(placementId: string, stayed: "running" | "paused", err: AgentError): void {
    if (this.halted) return;
    this.deps.log.warn("pause or suspend refused", { placementId, code: err.code, error: err.chain() });
    this.deps.store.patch(placementId, { desired: stayed });
    this.observe(this.current(placementId), stayed, { errorCode: err.code });
  }

  private async driveStart(
    placementId: string,
    live: LiveVm,
    boot: (hooks: StartHooks) => Promise<{ handle: VmHandle; session: GuestSession; start?: StartOrigin }>,
  ): Promise<void> {
    const skipLease = this.debug.startDespiteExpiredLease === true;
    if (!skipLease && !this.leaseLive(placementId))
      return this.observe(this.current(placementId), "error", { errorCode: "LEASE_EXPIRED" });
    try {
      const { handle, session, start } = await boot({
        launch: (start) => {
          // Checked again right before the launch: resolving the image or building the cgroup may have outlasted the lease.
          if (this.halted) throw new AgentError("INTERNAL", "the agent is stopping");
          if (!skipLease && !this.leaseLive(placementId))
            throw new AgentError(
              "LEASE_EXPIRED",
              `the execution lease of ${placementId} expired before the VMM launched`,
            );
          if (this.current(placementId).desired === "absent")
            throw new AgentError("INTERNAL", "the placement is no longer wanted");
          const launched = start().then(async (h) => {
            live.handle = h;
            // Recorded even while stopping: it is true, and the next agent needs the PID to adopt the VM.
            this.record(this.current(placementId), "starting", { vmPid: h.pid, vmStartTime: h.startTime });
            if (!this.halted) this.deps.onObservation();
            if (!skipLease && !this.leaseLive(placementId)) {
              // The launch itself outlasted the lease (a stalled agent, a slow spawn): no VM may run on an ended lease.
              await this.deps.ctx.driver.stop(h, 1_000).catch(() => undefined);
              throw new AgentError(
                "LEASE_EXPIRED",
                `the execution lease of ${placementId} ended while its VMM launched; stopped it`,
              );
            }
            return h;
          });
          this.launches.add(launched);
          void launched.catch(() => undefined).finally(() => this.launches.delete(launched));
          return launched;
        },
      });
      live.handle = handle;
      this.deps.onStartOutcome?.(true);
      if (this.halted) return session.close();
      this.attach(placementId, live, session);
      const cur = this.current(placementId);
      if (cur.desired !== "absent") this.observe(cur, "running", start ? { start } : {});
    } catch (e) {
      if (this.halted) return;
      const err = AgentError.from(e, "VMM_START_FAILED");
      if (err.code === "VMM_START_FAILED") this.deps.onStartOutcome?.(false);
      else if (live.handle) this.deps.onStartOutcome?.(true); // the VMM ran; the guest failed
      // No VM running (never launched, or only a template's build that ended) and no longer wanted: Stop follows.
      const vmUp = live.handle ? await this.deps.ctx.driver.isAlive(live.handle) : false;
      if (!vmUp && err.code === "INTERNAL" && this.current(placementId).desired === "absent") return;
      this.deps.log.warn("start failed", { placementId, code: err.code, subsystem: err.subsystem, error: err.chain() });
      this.observe(this.current(placementId), "error", { errorCode: err.code });
    }
  }

  private async driveAbsent(placementId: string, ref: PlacementRef, live: LiveVm): Promise<void> {
    live.stopping = true;
    let p = this.current(placementId);
    const failed = p.observed === "error" && p.errorCode !== null && p.errorCode !== "CLEANUP_FAILED";
    if (p.observed !== "stopping") this.observe(p, "stopping");
    const keep =
      failed && this.deps.failedConsoleDir
        ? { keepConsoleAt: keptConsolePath(this.deps.failedConsoleDir, ref.dirName, this.deps.clock.wallMs()) }
        : {};
    const left = await stopPlacement(this.deps.ctx, ref, live.handle, live.session, keep);
    await live.exitReport; // a code the guest reported while stopping goes out before absent
    if (this.halted) return;
    p = this.current(placementId);
    if (left.length) {
      this.deps.log.warn("cleanup incomplete", { placementId, left: left.join("; ") });
      if (p.errorCode !== "CLEANUP_FAILED") this.observe(p, "error", { errorCode: "CLEANUP_FAILED" });
      return;
    }
    this.live.delete(placementId);
    this.observe(p, "absent", { vmPid: null, vmStartTime: null });
  }
}
