/**
 * A test double of the VMM driver port (driver.ts) and of the guest behind
 * it, for unit tests and the seeded simulation. FakeVmHost is the machine:
 * its VM "processes" outlive any one agent, as real VMM processes do.
 * FakeVmmDriver is one agent process's view of it: launches take time on
 * the agent's timers, a guest boots on the host's timers, then speaks the
 * real host–guest protocol (NDJSON, src/protocol/guest.ts): GuestReady with
 * the identity and nonce it was booted with, pongs, bootstrap receipts,
 * workload exits, shutdown. The guest's answers are decided by a FakeVmBehaviour.
 * Must never: touch a real process or socket (the only file it writes is a
 * console text a test asks a dying VM to leave).
 */
import { createHash } from "node:crypto";
import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  GUEST_CMDLINE_KEYS,
  JOB_EXIT_MARKER,
  NdjsonDecoder,
  encodeGuestMessage,
  type GuestIdentity,
  type GuestToHost,
} from "../../protocol/guest.ts";
import type { Timers } from "../ports.ts";
import type { GuestChannel, VmHandle, VmSnapshot, VmSpec, VmmDriver } from "./driver.ts";
import { AgentError } from "../errors.ts";
import { vmmError } from "./qemuHost.ts";

/** How a fake VM behaves; every duration in ms. */
export interface FakeVmBehaviour {
  /** How long the launch takes, or null to fail it (VMM_START_FAILED). */
  launchMs(spec: VmSpec): number | null;
  /** How long until the guest sends GuestReady, or null for a guest that never does. */
  bootMs(spec: VmSpec): number | null;
  /** How long the guest takes to power off after `shutdown`. */
  shutdownMs(): number;
  /** The exit code of a workload that traps TERM and exits while the guest shuts down (absent or null: none runs). */
  exitCodeOnShutdown?(): number | null;
}

/** A behaviour with fixed answers. */
export function steadyBehaviour(
  o: { launchMs?: number | null; bootMs?: number | null; shutdownMs?: number; exitCodeOnShutdown?: number } = {},
): FakeVmBehaviour {
  return {
    launchMs: () => (o.launchMs === undefined ? 10 : o.launchMs),
    bootMs: () => (o.bootMs === undefined ? 100 : o.bootMs),
    shutdownMs: () => o.shutdownMs ?? 50,
    exitCodeOnShutdown: () => o.exitCodeOnShutdown ?? null,
  };
}

/** One simulated VMM process and its guest. */
export interface FakeVm {
  readonly instanceId: string;
  readonly pid: number;
  readonly startTime: number;
  readonly spec: VmSpec;
  /** The identity the guest holds: what it read from its kernel arguments (nonce included), or the last `restored` message gave it. */
  identity: GuestIdentity;
  /** paused: its vCPUs are stopped (issue 21): it answers nothing until resumed. */
  state: "booting" | "ready" | "paused" | "exited";
  /** Why it exited: "stopped" (by the driver), "poweroff" (guest shutdown), "crashed", or "suspended" (its state saved, then the VMM ended). */
  exitReason?: "stopped" | "poweroff" | "crashed" | "suspended";
  /** The snapshot directory it was restored from, if it was. */
  readonly restoredFrom?: string;
  /** Delivery IDs the guest consumed, with their digests. */
  readonly consumed: Map<string, string>;
  /** The `verificationKeys` of every `control_config` the guest received, oldest first (the newest is in force). */
  readonly controlConfigs: Record<string, string>[];
  /** The `wallClockMs` of every `clock` the guest received, oldest first. */
  readonly clocks: number[];
}

interface GuestEnd {
  vm: FakeVm;
  dataHandlers: Array<(chunk: string) => void>;
  closeHandlers: Array<() => void>;
  closed: boolean;
  detached: boolean;
}

/** The identity a fake guest reads from its kernel arguments (public and private). */
export function fakeGuestIdentity(spec: Pick<VmSpec, "kernelArgs" | "privateKernelArgs">): GuestIdentity {
  const kv = new Map<string, string>();
  for (const a of [...spec.kernelArgs, ...(spec.privateKernelArgs ?? [])]) {
    const i = a.indexOf("=");
    if (i > 0) kv.set(a.slice(0, i), a.slice(i + 1));
  }
  return {
    allocationId: kv.get(GUEST_CMDLINE_KEYS.allocationId) ?? "",
    placementId: kv.get(GUEST_CMDLINE_KEYS.placementId) ?? "",
    generation: Number(kv.get(GUEST_CMDLINE_KEYS.generation) ?? 0),
    nonce: kv.get(GUEST_CMDLINE_KEYS.nonce) ?? "",
  };
}

/** What a fake suspend saved: the guest's memory as far as the fake has one. */
interface FakeSnapshotState {
  identity: GuestIdentity;
  consumed: Map<string, string>;
  bootId: string;
  memoryMiB: number;
}

/** The file in a fake snapshot's directory that names its saved state (FakeVmHost.suspend). */
export const FAKE_SNAPSHOT_FILE = "fake-snapshot.key";

/** The simulated machine: every fake VM on it, whichever agent process launched it. */
export class FakeVmHost {
  /** VMs by instance ID (exited ones are removed). */
  readonly vms = new Map<string, FakeVm>();
  /** Saved snapshots by directory (issue 21), as a host's disk keeps them. */
  readonly snapshots = new Map<string, FakeSnapshotState>();
  private readonly ends = new Set<GuestEnd>();
  private nextPid = 4000;

  /**
   * `timers`: the machine's own timers (guests boot and power off on them,
   * agent or not); `onLaunch` sees every launch as it happens.
   */
  constructor(
    readonly timers: Timers,
    readonly behaviour: FakeVmBehaviour,
    private readonly onLaunch: (vm: FakeVm) => void = () => {},
  ) {}

  /** Creates a VM for `spec` (called by a driver once its launch delay passed); `from`: a snapshot it is restored from, running at once with the saved memory. */
  launch(spec: VmSpec, from?: { dir: string; state: FakeSnapshotState }): FakeVm {
    const vm: FakeVm = {
      instanceId: spec.instanceId,
      pid: this.nextPid++,
      startTime: this.nextPid * 7,
      spec,
      identity: from ? { ...from.state.identity } : fakeGuestIdentity(spec),
      state: from ? "ready" : "booting",
      consumed: new Map(from?.state.consumed ?? []),
      controlConfigs: [],
      clocks: [],
      ...(from ? { restoredFrom: from.dir } : {}),
    };
    this.vms.set(vm.instanceId, vm);
    this.onLaunch(vm);
    if (from) return vm;
    const bootMs = this.behaviour.bootMs(spec);
    if (bootMs !== null)
      this.timers.after(bootMs, () => {
        if (vm.state !== "booting") return;
        vm.state = "ready";
        for (const e of this.endsOf(vm))
          this.toHost(e, { type: "guest_ready", bootId: `boot-${vm.pid}`, guestVersion: "fake", ...vm.identity });
      });
    return vm;
  }

  /** VMs whose process is alive (paused ones included: they hold their memory). */
  running(): FakeVm[] {
    return [...this.vms.values()].filter((v) => v.state !== "exited");
  }

  /** Stops a VM's vCPUs (issue 21); false if it is not running. */
  pause(vm: FakeVm): boolean {
    if (vm.state === "exited") return false;
    if (vm.state === "ready" || vm.state === "booting") this.pausedFrom.set(vm, vm.state);
    vm.state = "paused";
    return true;
  }

  /** Lets a paused VM run again; false if it is gone. */
  resume(vm: FakeVm): boolean {
    if (vm.state === "exited") return false;
    if (vm.state === "paused") vm.state = this.pausedFrom.get(vm) ?? "ready";
    return true;
  }

  /**
   * Saves a VM's memory into `dir` and ends it (issue 21). When `dir`
   * exists on disk, a file there names the saved state, as a real
   * snapshot's files hold it: a copy or a link of the directory's files
   * (a fork's, placementOps.prepareFork) restores the same state.
   */
  suspend(vm: FakeVm, dir: string): void {
    if (existsSync(dir)) writeFileSync(join(dir, FAKE_SNAPSHOT_FILE), dir);
    this.snapshots.set(dir, {
      identity: { ...vm.identity },
      consumed: new Map(vm.consumed),
      bootId: `boot-${vm.pid}`,
      memoryMiB: vm.spec.memoryMiB,
    });
    this.exit(vm, "suspended");
  }

  private readonly pausedFrom = new Map<FakeVm, "booting" | "ready">();

  /** Ends a VM's process (its control channels close); `consoleText` is first appended to its console log, as a dying guest would print it. */
  exit(vm: FakeVm, reason: NonNullable<FakeVm["exitReason"]>, consoleText?: string): void {
    if (vm.state === "exited") return;
    if (consoleText) appendFileSync(vm.spec.consoleLogPath, consoleText);
    vm.state = "exited";
    vm.exitReason = reason;
    this.vms.delete(vm.instanceId);
    for (const e of this.endsOf(vm)) this.closeEnd(e);
  }

  /**
   * The guest's workload ended with `code`: `output` and the JOB_EXIT marker
   * are appended to the console (as the guest writes them, before it says so),
   * then every channel hears `workload_exited`.
   */
  workloadExited(vm: FakeVm, code: number, output = ""): void {
    if (vm.state === "exited") return;
    appendFileSync(vm.spec.consoleLogPath, `${output}${JOB_EXIT_MARKER} ${code}\n`);
    for (const e of this.endsOf(vm))
      this.toHost(e, { type: "workload_exited", deliveryId: [...vm.consumed.keys()][0] ?? "none", exitCode: code });
  }

  /** Connects a control channel to `vm`'s guest. */
  connect(vm: FakeVm): GuestEnd & GuestChannel {
    const end: GuestEnd = { vm, dataHandlers: [], closeHandlers: [], closed: false, detached: false };
    this.ends.add(end);
    const decoder = new NdjsonDecoder();
    const channel: GuestChannel = {
      send: (line) => {
        if (end.closed) throw new Error("guest channel is closed");
        queueMicrotask(() => {
          if (end.closed) return;
          for (const m of decoder.push(line).messages) this.toGuest(end, m);
        });
      },
      onData: (h) => void end.dataHandlers.push(h),
      onClose: (h) => void end.closeHandlers.push(h),
      close: () => this.closeEnd(end),
    };
    return Object.assign(end, channel);
  }

  /** Silences every channel of `owner` without calling its handlers (the agent process holding them died). */
  detach(ends: Iterable<GuestEnd>): void {
    for (const e of ends) {
      e.detached = true;
      e.closed = true;
      this.ends.delete(e);
    }
  }

  private endsOf(vm: FakeVm): GuestEnd[] {
    return [...this.ends].filter((e) => e.vm === vm && !e.closed);
  }

  private closeEnd(e: GuestEnd): void {
    if (e.closed) return;
    e.closed = true;
    this.ends.delete(e);
    queueMicrotask(() => {
      if (!e.detached) for (const h of e.closeHandlers) h();
    });
  }

  private toHost(e: GuestEnd, m: GuestToHost): void {
    const line = encodeGuestMessage(m);
    queueMicrotask(() => {
      if (e.closed) return;
      for (const h of e.dataHandlers) h(line);
    });
  }

  private toGuest(e: GuestEnd, m: Record<string, unknown>): void {
    const vm = e.vm;
    if (vm.state === "exited") return;
    switch (m["type"]) {
      case "restored": {
        // The guest adopts the identity and nonce it is handed and proves it (guest/internal/restore).
        if (vm.state !== "ready") break;
        vm.identity = {
          allocationId: String(m["allocationId"]),
          placementId: String(m["placementId"]),
          generation: Number(m["generation"]),
          nonce: String(m["nonce"]),
        };
        this.toHost(e, { type: "guest_ready", bootId: `boot-${vm.pid}-r`, guestVersion: "fake", ...vm.identity });
        break;
      }
      case "identify":
        if (vm.state === "ready")
          this.toHost(e, { type: "guest_ready", bootId: `boot-${vm.pid}`, guestVersion: "fake", ...vm.identity });
        break;
      case "ping":
        if (vm.state === "ready" && typeof m["id"] === "string") this.toHost(e, { type: "pong", id: m["id"] });
        break;
      case "bootstrap": {
        const id = String(m["deliveryId"]);
        const digest = `sha256:${createHash("sha256")
          .update(Buffer.from(String(m["dataBase64"]), "base64"))
          .digest("hex")}`;
        if (!vm.consumed.has(id) && vm.consumed.size > 0)
          this.toHost(e, {
            type: "bootstrap_rejected",
            deliveryId: id,
            reason: "a payload was already consumed in this boot",
          });
        else {
          vm.consumed.set(id, digest);
          this.toHost(e, { type: "bootstrap_consumed", deliveryId: id, digest });
        }
        break;
      }
      case "shutdown": {
        // A workload that traps TERM and exits on its own while the guest shuts down.
        const code = this.behaviour.exitCodeOnShutdown?.();
        if (code !== undefined && code !== null) this.workloadExited(vm, code);
        this.toHost(e, { type: "shutting_down" });
        this.timers.after(this.behaviour.shutdownMs(), () => this.exit(vm, "poweroff"));
        break;
      }
      case "control_config":
        vm.controlConfigs.push({ ...(m["verificationKeys"] as Record<string, string>) });
        break;
      case "clock":
        vm.clocks.push(m["wallClockMs"] as number);
        break;
      default:
    }
  }
}

/** One agent process's VMM driver over a FakeVmHost (a named test double). */
export class FakeVmmDriver implements VmmDriver {
  readonly name = "fake";
  private readonly mine = new Set<GuestEnd>();

  /** `timers`: the agent process's timers (a dead process's launches never finish). */
  constructor(
    readonly host: FakeVmHost,
    private readonly timers: Timers,
  ) {}

  async start(spec: VmSpec): Promise<VmHandle> {
    const ms = this.host.behaviour.launchMs(spec);
    if (ms === null) throw vmmError(`fake VMM for ${spec.instanceId} refused to start`);
    await this.timers.sleep(ms);
    const vm = this.host.launch(spec);
    return { instanceId: vm.instanceId, pid: vm.pid, startTime: vm.startTime };
  }

  async isAlive(h: VmHandle): Promise<boolean> {
    const vm = this.host.vms.get(h.instanceId);
    return !!vm && vm.pid === h.pid && vm.startTime === h.startTime && vm.state !== "exited";
  }

  async stop(h: VmHandle, _graceMs?: number): Promise<void> {
    const vm = this.host.vms.get(h.instanceId);
    if (vm && vm.pid === h.pid && vm.startTime === h.startTime) this.host.exit(vm, "stopped");
  }

  async connectControl(spec: Pick<VmSpec, "controlSocketPath">, timeoutMs: number): Promise<GuestChannel> {
    const vm = [...this.host.vms.values()].find(
      (v) => v.spec.controlSocketPath === spec.controlSocketPath && v.state !== "exited",
    );
    if (!vm) {
      await this.timers.sleep(timeoutMs);
      throw vmmError(`no control socket at ${spec.controlSocketPath}`);
    }
    const end = this.host.connect(vm);
    this.mine.add(end);
    return end;
  }

  /** Pauses the verified VM (issue 21). Throws VMM_CONTROL_FAILED when it is not there. */
  async pause(h: VmHandle): Promise<void> {
    if (!this.host.pause(this.verified(h))) throw vmmError(`fake VM ${h.instanceId} is gone`);
  }

  /** Resumes the verified VM. */
  async resume(h: VmHandle): Promise<void> {
    if (!this.host.resume(this.verified(h))) throw vmmError(`fake VM ${h.instanceId} is gone`);
  }

  /** Suspends the verified VM into `snapshotDir` (remembered by the fake host, no file written). */
  async suspend(h: VmHandle, spec: VmSpec, snapshotDir: string): Promise<VmSnapshot> {
    this.host.suspend(this.verified(h), snapshotDir);
    return { dir: snapshotDir, driver: this.name, compat: { memory_mib: spec.memoryMiB, vcpus: spec.vcpus }, bytes: 0 };
  }

  /** Starts a VM from a snapshot the fake host kept, after the launch delay. Throws SNAPSHOT_INCOMPATIBLE for another size, VMM_START_FAILED for none. */
  async restore(spec: VmSpec, snapshot: VmSnapshot): Promise<VmHandle> {
    const marker = join(snapshot.dir, FAKE_SNAPSHOT_FILE);
    const state =
      this.host.snapshots.get(snapshot.dir) ??
      (existsSync(marker) ? this.host.snapshots.get(readFileSync(marker, "utf8")) : undefined);
    if (!state) throw vmmError(`no fake snapshot at ${snapshot.dir}`);
    if (state.memoryMiB !== spec.memoryMiB)
      throw new AgentError("SNAPSHOT_INCOMPATIBLE", `fake snapshot of ${state.memoryMiB} MiB, VM of ${spec.memoryMiB}`);
    const ms = this.host.behaviour.launchMs(spec);
    if (ms === null) throw vmmError(`fake VMM for ${spec.instanceId} refused to start`);
    await this.timers.sleep(ms);
    const vm = this.host.launch(spec, { dir: snapshot.dir, state });
    return { instanceId: vm.instanceId, pid: vm.pid, startTime: vm.startTime };
  }

  private verified(h: VmHandle): FakeVm {
    const vm = this.host.vms.get(h.instanceId);
    if (!vm || vm.pid !== h.pid || vm.startTime !== h.startTime || vm.state === "exited")
      throw new AgentError("VMM_CONTROL_FAILED", `fake VM ${h.instanceId} (pid ${h.pid}) is not running`);
    return vm;
  }

  /** Nothing to remove: the fake keeps a VM's arguments in memory only. */
  forgetBootSecrets(_spec: Pick<VmSpec, "dir">): void {}

  /** The agent process died: its channels vanish without a word to anyone. */
  abandon(): void {
    this.host.detach(this.mine);
    this.mine.clear();
  }
}
