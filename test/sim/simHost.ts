/**
 * One simulated host for the fencing simulation: the REAL agent (src/agent/
 * agent.ts: control loop, placement reconciler in src/agent/reconcile/
 * reconciler.ts, deliveries, housekeeping, startup) over fake ports. Its
 * VMs live on a FakeVmHost and its namespaces in a FakeIsolation, so they
 * outlive an agent crash exactly as real VMM processes and namespaces do;
 * agent.db is a real SQLite file on tmpfs. The control channel is a
 * FakeControlChannel whose requests the world carries to the real
 * scheduler, with faults.
 *
 * A crash drops the agent process: its timers and channels vanish, its
 * database connection closes, nothing is flushed. A reboot also ends every
 * VM and namespace and gives the machine a new boot ID.
 */
import { join } from "node:path";
import { Agent, type AgentPorts } from "../../src/agent/agent.ts";
import { AgentStore } from "../../src/agent/store.ts";
import { FakeControlChannel, FixedHostProbe, MemoryLog, type FakeTimeline } from "../../src/agent/fakePorts.ts";
import {
  FakeVmHost,
  FakeVmmDriver,
  fakeGuestIdentity,
  type FakeVm,
  type FakeVmBehaviour,
} from "../../src/agent/vmm/fakeDriver.ts";
import { GUEST_CMDLINE_KEYS, type GuestIdentity } from "../../src/protocol/guest.ts";
import { FakeIsolation } from "../../src/agent/isolation/fakeIsolation.ts";
import { FakeImages, type FakeImageBehaviour } from "../../src/agent/image/fakeImages.ts";
import type { AgentDebug } from "../../src/agent/debug.ts";
import { VMM_BOOT_CHECK_ID } from "../../src/agent/doctor/checks.ts";
import type { VmHandle, VmSnapshot, VmSpec, VmmDriver } from "../../src/agent/vmm/driver.ts";
import type { ForeignResource } from "../../src/agent/inventory.ts";
import type { SeededRandom } from "./rng.ts";
import type { Clock } from "../../src/protocol/clock.ts";

/** A VMM launch the agent decided on, with its own clock's reading at that moment. */
export interface ExecutionRecord {
  hostId: string;
  allocationId: string;
  placementId: string;
  generation: number;
  /** The agent's clock when it launched the VMM, ms. */
  agentNowMs: number;
  epoch: string;
}

/** How long a simulated guest may take to become ready, ms. */
export const SIM_GUEST_BOOT_TIMEOUT_MS = 20_000;

/** Records every launch the agent asks its driver for (the moment the lease check passed). */
class RecordingDriver implements VmmDriver {
  readonly name: string;
  constructor(
    private readonly inner: FakeVmmDriver,
    private readonly record: (spec: VmSpec) => void,
  ) {
    this.name = inner.name;
  }
  start(spec: VmSpec): Promise<VmHandle> {
    this.record(spec);
    return this.inner.start(spec);
  }
  isAlive(h: VmHandle) {
    return this.inner.isAlive(h);
  }
  stop(h: VmHandle, graceMs: number) {
    return this.inner.stop(h, graceMs);
  }
  connectControl(spec: Pick<VmSpec, "controlSocketPath">, timeoutMs: number) {
    return this.inner.connectControl(spec, timeoutMs);
  }
  forgetBootSecrets(spec: Pick<VmSpec, "dir">): void {
    this.inner.forgetBootSecrets(spec);
  }
  pause(h: VmHandle): Promise<void> {
    return this.inner.pause(h);
  }
  /** A paused VM running again is an execution too (issue 21): recorded with the identity its guest holds. */
  resume(h: VmHandle): Promise<void> {
    const vm = this.inner.host.vms.get(h.instanceId);
    if (vm) this.record({ ...vm.spec, kernelArgs: identityArgs(vm.identity), privateKernelArgs: [] });
    return this.inner.resume(h);
  }
  suspend(h: VmHandle, spec: VmSpec, dir: string): Promise<VmSnapshot> {
    return this.inner.suspend(h, spec, dir);
  }
  /** A restore is a launch (recorded with the generation the agent restores it as). */
  restore(spec: VmSpec, snapshot: VmSnapshot): Promise<VmHandle> {
    this.record(spec);
    return this.inner.restore(spec, snapshot);
  }
}

/** Kernel arguments naming `id` (what fakeGuestIdentity reads back). */
function identityArgs(id: GuestIdentity): string[] {
  return [
    `${GUEST_CMDLINE_KEYS.allocationId}=${id.allocationId}`,
    `${GUEST_CMDLINE_KEYS.placementId}=${id.placementId}`,
    `${GUEST_CMDLINE_KEYS.generation}=${id.generation}`,
  ];
}

/** See the module header. */
export class SimHost {
  alive = false;
  partitioned = false;
  /** Until when the agent process is frozen (no timer fires, nothing is sent or read), ms; 0: running. */
  stalledUntilMs = 0;
  /** Until when the machine's VMM cannot start anything (launches and test boots fail), ms. */
  vmmBrokenUntilMs = 0;
  skewMs = 0;
  bootId: string;
  agent: Agent | null = null;
  channel: FakeControlChannel | null = null;
  readonly vmHost: FakeVmHost;
  readonly isolation = new FakeIsolation();
  readonly log = new MemoryLog(40);
  private driver: FakeVmmDriver | null = null;
  private incarnation = 0;
  private reader: AgentStore | null = null;
  readonly clock: Clock;

  constructor(
    readonly hostId: string,
    private readonly dir: string,
    private readonly timeline: FakeTimeline,
    private readonly rng: SeededRandom,
    private readonly behaviour: FakeVmBehaviour & FakeImageBehaviour,
    private readonly onExecute: (r: ExecutionRecord) => void,
    private readonly debug: AgentDebug | undefined,
  ) {
    this.bootId = rng.id("boot");
    this.clock = { wallMs: () => timeline.clock.wallMs() + this.skewMs, monoMs: () => timeline.clock.monoMs() };
    const vmm: FakeVmBehaviour = {
      ...behaviour,
      launchMs: (spec) => (this.vmmBroken ? null : behaviour.launchMs(spec)),
    };
    this.vmHost = new FakeVmHost(timeline.timers(`${hostId}/machine`), vmm);
  }

  private get group(): string {
    return `${this.hostId}/agent-${this.incarnation}`;
  }

  /** Starts a new agent process (startup: inventory, adoption, then polling). */
  async boot(): Promise<void> {
    this.incarnation++;
    const timers = this.timeline.timers(this.group);
    this.channel = new FakeControlChannel(timers);
    this.driver = new FakeVmmDriver(this.vmHost, timers);
    const driver = new RecordingDriver(this.driver, (spec) => {
      const id = fakeGuestIdentity(spec);
      this.onExecute({
        hostId: this.hostId,
        allocationId: id.allocationId,
        placementId: id.placementId,
        generation: id.generation,
        agentNowMs: this.clock.wallMs(),
        epoch: this.agent?.control.agentEpoch ?? "",
      });
    });
    const ports: AgentPorts = {
      clock: this.clock,
      timers,
      random: { bytes: (n) => this.rng.bytes(n) },
      log: this.log,
      probe: new FixedHostProbe({ cpuMillis: 8000, memoryMiB: 8192 }),
      channel: this.channel,
      driver,
      isolation: this.isolation,
      images: new FakeImages(timers, join(this.dir, "image"), this.behaviour),
      lock: () => () => {},
      selfChecks: async () => [
        {
          id: VMM_BOOT_CHECK_ID,
          title: "VMM test boot",
          ...(this.vmmBroken
            ? { status: "fail" as const, detail: "fake VMM broken", fix: "-" }
            : { status: "pass" as const, detail: "fake VMM" }),
        },
      ],
      inventory: async (known) => this.foreign(known),
      vmmSelfCheck: async () =>
        this.vmmBroken ? { status: "fail", detail: "fake VMM broken" } : { status: "pass", detail: "fake VMM" },
    };
    this.agent = await Agent.start(
      {
        hostId: this.hostId,
        bootId: this.bootId,
        dbPath: join(this.dir, "agent.db"),
        allocationsDir: join(this.dir, "allocations"),
        guestBootTimeoutMs: SIM_GUEST_BOOT_TIMEOUT_MS,
        consoleBudgetBytes: 64 * 1024,
        ...(this.debug ? { debug: this.debug } : {}),
      },
      ports,
    );
    this.alive = true;
  }

  /** What an honest inventory of this machine finds: VMs and namespaces no known placement owns. */
  private foreign(known: ReadonlySet<string>): ForeignResource[] {
    const out: ForeignResource[] = [];
    for (const vm of this.vmHost.running())
      if (!known.has(vm.instanceId)) out.push({ kind: "process", name: `${vm.instanceId} (pid ${vm.pid})` });
    for (const n of this.isolation.networks) if (!known.has(n)) out.push({ kind: "netns", name: n });
    return out;
  }

  /** Freezes the agent process until `untilMs` (SIGSTOP, swap storm, a starved host); its VMs keep running. */
  stall(untilMs: number): void {
    if (!this.alive) return;
    this.stalledUntilMs = untilMs;
    this.timeline.stall(this.group, untilMs);
  }

  /** True while the machine's VMM fails every start. */
  get vmmBroken(): boolean {
    return this.timeline.clock.wallMs() < this.vmmBrokenUntilMs;
  }

  /** True while the agent process is frozen. */
  get stalled(): boolean {
    return this.alive && this.timeline.clock.wallMs() < this.stalledUntilMs;
  }

  /** The agent process dies: no flush, its timers and channels vanish; VMs and namespaces stay. */
  crash(): void {
    if (!this.alive) return;
    this.timeline.cancelGroup(this.group);
    this.driver?.abandon();
    this.agent?.abandon();
    this.agent = null;
    this.channel = null;
    this.alive = false;
    this.stalledUntilMs = 0;
  }

  /** The machine reboots: the agent dies, every VM and namespace is gone, and the boot ID changes. */
  reboot(): void {
    this.crash();
    for (const vm of this.vmHost.running()) this.vmHost.exit(vm, "crashed");
    this.isolation.networks.clear();
    this.isolation.cgroups.clear();
    this.bootId = this.rng.id("boot");
  }

  /** Observed state of a placement in agent.db (read through a second connection), or undefined. */
  observed(placementId: string): string | undefined {
    this.reader ??= new AgentStore(join(this.dir, "agent.db"));
    return this.reader.placement(placementId)?.observed;
  }

  /** The agent.db row of a placement (read through a second connection), or undefined: for a run's diagnostics. */
  local(placementId: string): { observed: string; desired: string; generation: number } | undefined {
    this.reader ??= new AgentStore(join(this.dir, "agent.db"));
    return this.reader.placement(placementId);
  }

  /** True when a VM of the placement runs on this machine. */
  runsVmOf(placementId: string): boolean {
    return this.vmHost.running().some((v) => v.identity.placementId === placementId);
  }

  /** The VMs whose vCPUs run (not paused), by the placement their guest belongs to. */
  executing(): FakeVm[] {
    return this.vmHost.running().filter((v) => v.state !== "paused");
  }

  /** Closes what the harness holds (the run is over). */
  close(): void {
    this.crash();
    this.reader?.close();
  }
}
