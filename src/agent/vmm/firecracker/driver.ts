/**
 * The Firecracker VMM driver: jailer + Firecracker's API socket + hybrid vsock.
 *
 * Implements VmmDriver for spec "Start (ensure_running)" (jail, pre-boot
 * configuration, InstanceStart), "Guest handshake" (listen on vsock port 1025
 * before boot; dial port 1024 to adopt), adoption (PID, start time, instance
 * ID), "Stop (ensure_absent)" (SendCtrlAltDel, then SIGTERM and SIGKILL to
 * the verified process group, then the jail and its cgroup are removed) and
 * issue 21's pause, resume, suspend and restore through Firecracker's
 * snapshot API (`PATCH /vm`, `PUT /snapshot/create`, `PUT /snapshot/load`;
 * snapshot.ts, snapshotFs.ts).
 * Every side effect that a test must replace (spawning, chown, the API
 * transport) is a port. Must never: signal a PID without checking its start
 * time and instance ID, send a pre-boot request after InstanceStart, or
 * choose a path on its own (all derive from VmSpec and the options).
 */
import {
  chownSync,
  closeSync,
  chmodSync,
  lstatSync,
  openSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
} from "node:fs";
import { readFile } from "node:fs/promises";
import { isAbsolute, join } from "node:path";
import { type GuestChannel, type VmHandle, type VmSnapshot, type VmSpec, type VmmDriver } from "../driver.ts";
import { processExited, readProcStat } from "../qemu.ts";
import { vmmError } from "../qemuHost.ts";
import { asControlFailure, DEFAULT_API_TIMEOUT_MS, type FirecrackerApi, unixSocketApi } from "./apiClient.ts";
import { actionBody, preBootRequests } from "./config.ts";
import { buildJail, jailIdsInUse, removeJail, writableDiskBytes } from "./jailFs.ts";
import {
  COMPAT_VERSION_KEY,
  snapshotCompat,
  snapshotCreateBody,
  type SnapshotHost,
  snapshotLoadBody,
  snapshotMemoryBytes,
  type VmRunState,
  vmStateBody,
} from "./snapshot.ts";
import { collectSnapshot, linkSnapshotIntoJail, makeJailSnapshotDir } from "./snapshotFs.ts";
import { compatDifferences, fsyncPath, incompatible } from "../snapshotCommon.ts";
import {
  AGENT_OWNER,
  controlError,
  DEFAULT_SNAPSHOT_TIMEOUT_MS,
  firecrackerVersion,
  hostCpuModel,
  writableDisks,
} from "./snapshotHost.ts";
import {
  allocateJailId,
  cgroupLimits,
  DEFAULT_PARENT_CGROUP,
  DEFAULT_PIDS_MAX,
  DEFAULT_VMM_OVERHEAD_MIB,
  type IdRange,
  jailerArgv,
  jailLayout,
  type JailLayout,
} from "./jailer.ts";
import { acceptsConnections, signalGroup, spawnDetached, type SpawnedVmm, type VmmSpawner } from "./hostProcess.ts";
import {
  connectHybridVsock,
  GUEST_CONTROL_PORT,
  HOST_LISTEN_PORT,
  listenHybridVsock,
  type VsockListener,
} from "./vsock.ts";
import { AgentError } from "../../errors.ts";

import type { FirecrackerDriverOptions, FirecrackerPorts } from "./driverOptions.ts";
export type { FirecrackerDriverOptions, FirecrackerPorts } from "./driverOptions.ts";
export { DEFAULT_SNAPSHOT_TIMEOUT_MS } from "./snapshotHost.ts";

/** How long a process may survive SIGKILL before stop() reports CLEANUP_FAILED, ms. */
const KILL_WAIT_MS = 10_000;
const POLL_MS = 20;

function cleanupError(msg: string, cause?: unknown): AgentError {
  return new AgentError("CLEANUP_FAILED", msg, { subsystem: "vmm", ...(cause === undefined ? {} : { cause }) });
}

export type { SpawnedVmm, VmmSpawner } from "./hostProcess.ts";

/** VmmDriver for Firecracker under its jailer. */
export class FirecrackerDriver implements VmmDriver {
  readonly name = "firecracker";
  readonly firecrackerBinary: string;
  readonly jailerBinary: string;
  readonly chrootBase: string;
  private readonly uidRange: IdRange;
  private readonly cgroupRoot: string;
  private readonly parentCgroup: string;
  private readonly overheadMiB: number;
  private readonly pidsMax: number;
  private readonly apiTimeoutMs: number;
  private readonly startTimeoutMs: number;
  private readonly shutdownWaitMs: number;
  private readonly ports: FirecrackerPorts;
  /** Guest-initiated (port 1025) listeners of VMs this driver started, by instance ID. */
  private readonly listeners = new Map<string, { listener: VsockListener; controlSocketPath: string }>();
  /** Serializes UID allocation and jail creation (allocate + chown must not interleave). */
  private allocating: Promise<unknown> = Promise.resolve();
  private readonly snapshotTimeoutMs: number;
  private hostFacts: SnapshotHost | undefined;

  /** See FirecrackerDriverOptions for defaults. */
  constructor(opts: FirecrackerDriverOptions = {}) {
    this.firecrackerBinary = opts.firecrackerBinary ?? "/usr/local/bin/firecracker";
    this.jailerBinary = opts.jailerBinary ?? "/usr/local/bin/jailer";
    this.chrootBase = opts.chrootBase ?? "/srv/jailer";
    this.uidRange = opts.uidRange ?? { first: 900_000, count: 10_000 };
    this.cgroupRoot = opts.cgroupRoot ?? "/sys/fs/cgroup";
    this.parentCgroup = opts.parentCgroup ?? DEFAULT_PARENT_CGROUP;
    this.overheadMiB = opts.vmmOverheadMiB ?? DEFAULT_VMM_OVERHEAD_MIB;
    this.pidsMax = opts.pidsMax ?? DEFAULT_PIDS_MAX;
    this.apiTimeoutMs = opts.apiTimeoutMs ?? DEFAULT_API_TIMEOUT_MS;
    this.startTimeoutMs = opts.startTimeoutMs ?? 10_000;
    this.shutdownWaitMs = opts.shutdownWaitMs ?? 5_000;
    this.snapshotTimeoutMs = opts.snapshotTimeoutMs ?? DEFAULT_SNAPSHOT_TIMEOUT_MS;
    this.ports = { spawn: spawnDetached, chown: chownSync, api: unixSocketApi, ...opts.ports };
  }

  /** Host paths of `instanceId`'s jail. Throws VMM_START_FAILED for an ID the jailer would reject. */
  layout(instanceId: string): JailLayout {
    return jailLayout(this.chrootBase, this.firecrackerBinary, instanceId);
  }

  /** The jail's cgroup directory (jailer.md: `<cgroup_base>/<parent_cgroup>/<id>`). */
  cgroupDir(instanceId: string): string {
    return join(this.cgroupRoot, this.parentCgroup, instanceId);
  }

  /** Allocates a UID and builds the jail, serialized across concurrent starts. */
  private prepareJail(spec: VmSpec, layout: JailLayout): Promise<number> {
    const run = this.allocating.then(() => {
      const uid = allocateJailId(
        jailIdsInUse(join(layout.jailDir, ".."), this.uidRange, spec.instanceId),
        this.uidRange,
      );
      try {
        buildJail(layout, spec, uid, uid, this.ports.chown);
      } catch (e) {
        const left = removeJail(layout, this.cgroupDir(spec.instanceId));
        if (left.length > 0) throw cleanupError(`jail rollback incomplete: ${left.join("; ")}`, e);
        throw AgentError.from(e, "VMM_START_FAILED", "jailer");
      }
      return uid;
    });
    this.allocating = run.catch(() => undefined);
    return run;
  }

  /**
   * Builds the jail, listens on vsock port 1025, links spec.controlSocketPath
   * to the vsock socket, runs the jailer, waits for the API socket, sends the
   * pre-boot requests in order and InstanceStart. On any failure it kills the
   * process and removes what it created, then throws an AgentError:
   * VMM_START_FAILED (from the API client, `facts.faultMessage` holds
   * Firecracker's fault_message), or CLEANUP_FAILED (the first error as its
   * `cause`) when the rollback is incomplete.
   */
  async start(spec: VmSpec): Promise<VmHandle> {
    return this.launch(spec, {
      listenGuest: true,
      configure: async (api) => {
        for (const r of preBootRequests(spec)) await api.put(r.path, r.body);
        await api.put("/actions", actionBody("InstanceStart"));
      },
    });
  }

  /**
   * The launch both start and restore use: jail, optional port-1025 listener, control-socket
   * link, jailer, API socket, then `how.configure` (with `how.prepareJail` run on the built jail
   * first). Rolls everything back on failure (see start); an AgentError from `configure` keeps
   * its code.
   */
  private async launch(
    spec: VmSpec,
    how: {
      listenGuest: boolean;
      prepareJail?: (layout: JailLayout, uid: number) => void;
      configure: (api: FirecrackerApi) => Promise<void>;
    },
  ): Promise<VmHandle> {
    const layout = this.layout(spec.instanceId);
    const uid = await this.prepareJail(spec, layout);
    let proc: SpawnedVmm | undefined;
    try {
      how.prepareJail?.(layout, uid);
      if (how.listenGuest) {
        const listener = listenHybridVsock(layout.vsockUds, HOST_LISTEN_PORT);
        this.listeners.set(spec.instanceId, { listener, controlSocketPath: spec.controlSocketPath });
        this.ports.chown(listener.path, uid, uid);
        chmodSync(listener.path, 0o600);
      }
      rmSync(spec.controlSocketPath, { force: true });
      symlinkSync(layout.vsockUds, spec.controlSocketPath);
      const argv = jailerArgv({
        jailerBinary: this.jailerBinary,
        firecrackerBinary: this.firecrackerBinary,
        instanceId: spec.instanceId,
        uid,
        gid: uid,
        chrootBase: this.chrootBase,
        netns: spec.netns,
        limits: cgroupLimits(spec.vcpus, spec.memoryMiB, this.overheadMiB, this.pidsMax),
        parentCgroup: this.parentCgroup,
        fsizeBytes: Math.max(writableDiskBytes(spec), snapshotMemoryBytes(spec)),
      });
      const fd = openSync(spec.consoleLogPath, "a");
      try {
        proc = this.ports.spawn(argv, { logFd: fd, cwd: spec.dir });
      } catch (e) {
        throw vmmError(`cannot spawn the jailer: ${(e as Error).message}`);
      } finally {
        closeSync(fd);
      }
      await this.waitForApiSocket(spec, layout, proc);
      await how.configure(this.ports.api(layout.apiSocket, this.apiTimeoutMs));
      const st = await readProcStat(proc.pid);
      if (!st) throw vmmError(`Firecracker for ${spec.instanceId} vanished right after it was configured`);
      return { instanceId: spec.instanceId, pid: proc.pid, startTime: st.startTime };
    } catch (e) {
      if (proc && proc.exitCode === null && proc.signalCode === null) signalGroup(proc.pid, "SIGKILL");
      if (proc) await this.waitExit(proc, KILL_WAIT_MS);
      this.closeListener(spec.instanceId);
      rmSync(spec.controlSocketPath, { force: true });
      const left = removeJail(layout, this.cgroupDir(spec.instanceId));
      if (left.length > 0) throw cleanupError(`rollback incomplete: ${left.join("; ")}`, e);
      throw AgentError.from(e, "VMM_START_FAILED", "vmm");
    }
  }

  private async waitForApiSocket(spec: VmSpec, layout: JailLayout, proc: SpawnedVmm): Promise<void> {
    const deadline = performance.now() + this.startTimeoutMs;
    for (;;) {
      if (await acceptsConnections(layout.apiSocket)) return;
      if (proc.exitCode !== null || proc.signalCode !== null || performance.now() > deadline) {
        const tail = (await readFile(spec.consoleLogPath, "utf8").catch(() => "")).slice(-800).trim();
        throw vmmError(
          `Firecracker for ${spec.instanceId} did not open its API socket (exit ${proc.exitCode ?? proc.signalCode ?? "timeout"}): ${tail}`,
        );
      }
      await Bun.sleep(10);
    }
  }

  private async waitExit(proc: SpawnedVmm, ms: number): Promise<void> {
    const deadline = performance.now() + ms;
    while (proc.exitCode === null && proc.signalCode === null && performance.now() < deadline) await Bun.sleep(POLL_MS);
  }

  private closeListener(instanceId: string): void {
    this.listeners.get(instanceId)?.listener.close();
    this.listeners.delete(instanceId);
  }

  /** True only for a live (not zombie) PID with the same start time and the instance ID (`<id>` or `--id=<id>`) in its cmdline. */
  async isAlive(handle: VmHandle): Promise<boolean> {
    const st = await readProcStat(handle.pid);
    if (!st || st.state === "Z" || st.state === "X" || st.startTime !== handle.startTime) return false;
    const args = (await readFile(`/proc/${handle.pid}/cmdline`, "utf8").catch(() => "")).split("\0");
    return args.includes(handle.instanceId) || args.includes(`--id=${handle.instanceId}`);
  }

  /** Waits until the process has exited (processExited: the command line alone is not enough) or `ms` elapse; true when gone. */
  async waitGone(handle: VmHandle, ms: number): Promise<boolean> {
    const deadline = performance.now() + ms;
    while (!(await processExited(handle))) {
      if (performance.now() > deadline) return false;
      await Bun.sleep(POLL_MS);
    }
    return true;
  }

  /**
   * PUT /actions SendCtrlAltDel (the guest reboots; `reboot=k` ends
   * Firecracker), waits shutdownWaitMs, then SIGTERM to the verified process
   * group, SIGKILL after `graceMs` (ms). Then removes the jail and its cgroup.
   * Throws CLEANUP_FAILED when the process survives SIGKILL for 10 s or the
   * jail cannot be removed. A process already gone is not an error.
   */
  async stop(handle: VmHandle, graceMs: number): Promise<void> {
    const layout = this.layout(handle.instanceId);
    if (await this.isAlive(handle)) {
      const asked = await this.ports
        .api(layout.apiSocket, Math.min(this.apiTimeoutMs, 2_000))
        .put("/actions", actionBody("SendCtrlAltDel"))
        .then(
          () => true,
          () => false,
        );
      if (!asked || !(await this.waitGone(handle, this.shutdownWaitMs))) {
        if (await this.isAlive(handle)) signalGroup(handle.pid, "SIGTERM");
        if (!(await this.waitGone(handle, graceMs))) {
          if (await this.isAlive(handle)) signalGroup(handle.pid, "SIGKILL");
          if (!(await this.waitGone(handle, KILL_WAIT_MS)))
            throw cleanupError(`Firecracker pid ${handle.pid} survived SIGKILL`);
        }
      }
    }
    await this.releaseJail(handle, layout);
  }

  /** Waits for the process to be gone, then closes its listener and removes the jail and cgroup. Throws CLEANUP_FAILED. */
  private async releaseJail(handle: VmHandle, layout: JailLayout): Promise<void> {
    if (!(await this.waitGone(handle, KILL_WAIT_MS)))
      throw cleanupError(`Firecracker pid ${handle.pid} did not finish exiting`);
    this.closeListener(handle.instanceId);
    const left = removeJail(layout, this.cgroupDir(handle.instanceId));
    if (left.length > 0) throw cleanupError(left.join("; "));
  }

  /**
   * `PATCH /vm {"state":"Paused"}` to the verified VM (snapshot-support.md "Pausing the
   * microVM": successive calls keep it paused, so this is idempotent). Throws
   * VMM_CONTROL_FAILED (subsystem firecracker-api, Firecracker's fault_message in
   * `facts.faultMessage`) when the process is not the VM's or Firecracker does not confirm.
   */
  async pause(handle: VmHandle): Promise<void> {
    await this.setRunState(handle, "Paused");
  }

  /** `PATCH /vm {"state":"Resumed"}`; resuming a running VM is ignored by Firecracker (idempotent). Errors as pause. */
  async resume(handle: VmHandle): Promise<void> {
    await this.setRunState(handle, "Resumed");
  }

  private async setRunState(handle: VmHandle, state: VmRunState): Promise<void> {
    if (!(await this.isAlive(handle)))
      throw controlError(`Firecracker pid ${handle.pid} of ${handle.instanceId} is not running; cannot set ${state}`);
    const api = this.ports.api(this.layout(handle.instanceId).apiSocket, this.apiTimeoutMs);
    await api.patch("/vm", vmStateBody(state)).catch((e) => {
      throw asControlFailure(e, `PATCH /vm ${state}`);
    });
  }

  /**
   * Suspends the verified VM into `snapshotDir` (issue 21): pause, `PUT /snapshot/create`
   * (Full, into the jail's JAIL_SNAPSHOT_DIR: the chrooted Firecracker can write nowhere else;
   * the request returns once the files are written), then the files are fsync'd and hard-linked
   * into `snapshotDir` read-only and owned by the agent (snapshotFs.ts), the placement's
   * writable disks are fsync'd (the snapshot's device state expects their content), and the
   * process is ended (SIGKILL to the verified group: the state is saved, a paused guest cannot
   * shut down) and its jail removed. The compat descriptor carries the version GET /version
   * reported. On a failure before the files are collected the VM stays paused and running (the
   * agent may resume or stop it); errors: VMM_CONTROL_FAILED, CLEANUP_FAILED.
   */
  async suspend(handle: VmHandle, spec: VmSpec, snapshotDir: string): Promise<VmSnapshot> {
    if (handle.instanceId !== spec.instanceId)
      throw controlError(`suspend: handle ${handle.instanceId} is not the VM of spec ${spec.instanceId}`);
    if (!isAbsolute(snapshotDir)) throw controlError(`suspend: snapshot directory ${snapshotDir} is not absolute`);
    await this.pause(handle);
    const layout = this.layout(handle.instanceId);
    let version: string;
    let bytes: number;
    try {
      const api = this.ports.api(layout.apiSocket, this.snapshotTimeoutMs);
      version = await firecrackerVersion(api);
      makeJailSnapshotDir(layout, statSync(layout.root).uid, this.ports.chown);
      await api.put("/snapshot/create", snapshotCreateBody());
      bytes = collectSnapshot(layout, snapshotDir, AGENT_OWNER, this.ports.chown);
      for (const disk of writableDisks(spec)) fsyncPath(disk);
    } catch (e) {
      throw asControlFailure(e, `suspend of ${handle.instanceId}`);
    }
    if (await this.isAlive(handle)) signalGroup(handle.pid, "SIGKILL");
    await this.releaseJail(handle, layout);
    return { dir: snapshotDir, driver: this.name, compat: snapshotCompat(spec, version, this.host()), bytes };
  }

  /**
   * Starts Firecracker for the new `spec` from `snapshot` (issue 21), jailed like start: refuses
   * SNAPSHOT_INCOMPATIBLE, before spawning anything, a snapshot of another driver or whose
   * machine, devices or host differ from snapshotCompat(spec), and after spawning (GET /version)
   * one of another Firecracker version. The snapshot files are hard-linked read-only into the new
   * jail (never changed), then `PUT /snapshot/load` with a File memory backend (MAP_PRIVATE:
   * copy-on-write, so forks share one snapshot), the new TAP through network_overrides and
   * resume_vm. No port-1025 listener: the restored guest's vsock connections are reset
   * (snapshot-support.md "Vsock device reset") while its listeners stay, so connectControl dials
   * guest port 1024 as for adoption. Other failures as start (VMM_START_FAILED, CLEANUP_FAILED).
   */
  async restore(spec: VmSpec, snapshot: VmSnapshot): Promise<VmHandle> {
    if (snapshot.driver !== this.name)
      throw incompatible(`snapshot written by driver ${snapshot.driver}, not ${this.name}`, ["driver"]);
    const host = this.host();
    const early = compatDifferences(snapshot.compat, snapshotCompat(spec, "", host), [COMPAT_VERSION_KEY]);
    if (early.length > 0) throw incompatible(`snapshot does not fit ${spec.instanceId}`, early);
    if (!isAbsolute(snapshot.dir)) throw vmmError(`snapshot directory ${snapshot.dir} is not absolute`);
    return this.launch(spec, {
      listenGuest: false,
      prepareJail: (layout, uid) => linkSnapshotIntoJail(layout, snapshot.dir, uid),
      configure: async (api) => {
        const version = await firecrackerVersion(api);
        const diff = compatDifferences(snapshot.compat, snapshotCompat(spec, version, host));
        if (diff.length > 0) throw incompatible(`snapshot was written by another Firecracker than ${version}`, diff);
        await this.ports
          .api(this.layout(spec.instanceId).apiSocket, this.snapshotTimeoutMs)
          .put("/snapshot/load", snapshotLoadBody(spec));
      },
    });
  }

  /** The host facts of compat descriptors, read once (/proc/cpuinfo's first model name, process.arch). */
  private host(): SnapshotHost {
    this.hostFacts ??= { cpuModel: hostCpuModel(), arch: process.arch };
    return this.hostFacts;
  }

  /**
   * The guest control channel. For a VM this driver started: the guest's
   * connection to host port 1025 (spec "Guest handshake"), waited for up to
   * `timeoutMs`. Otherwise (adoption after an agent restart): dials guest
   * port 1024 through the vsock socket spec.controlSocketPath points to.
   * Throws VMM_START_FAILED on timeout.
   */
  /** Nothing to remove: the private arguments went to Firecracker through its API socket (boot_args), never into a file. */
  forgetBootSecrets(_spec: Pick<VmSpec, "dir">): void {}

  async connectControl(spec: Pick<VmSpec, "controlSocketPath">, timeoutMs: number): Promise<GuestChannel> {
    for (const [id, l] of this.listeners) {
      if (l.controlSocketPath !== spec.controlSocketPath) continue;
      const ch = await l.listener.accept(timeoutMs);
      this.closeListener(id);
      return ch;
    }
    let uds = spec.controlSocketPath;
    try {
      if (lstatSync(uds).isSymbolicLink()) uds = readlinkSync(uds);
    } catch {}
    return (await connectHybridVsock(uds, GUEST_CONTROL_PORT, timeoutMs)).channel;
  }
}
