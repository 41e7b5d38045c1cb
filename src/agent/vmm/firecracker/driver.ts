/**
 * The Firecracker VMM driver: jailer + Firecracker's API socket + hybrid vsock.
 *
 * Implements VmmDriver for spec "Start (ensure_running)" (jail, pre-boot
 * configuration, InstanceStart), "Guest handshake" (listen on vsock port 1025
 * before boot; dial port 1024 to adopt), adoption (PID, start time, instance
 * ID) and "Stop (ensure_absent)" (SendCtrlAltDel, then SIGTERM and SIGKILL to
 * the verified process group, then the jail and its cgroup are removed).
 * Every side effect that a test must replace (spawning, chown, the API
 * transport) is a port. Must never: signal a PID without checking its start
 * time and instance ID, send a pre-boot request after InstanceStart, or
 * choose a path on its own (all derive from VmSpec and the options).
 */
import { chownSync, closeSync, chmodSync, lstatSync, openSync, readlinkSync, rmSync, symlinkSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { GuestChannel, VmHandle, VmSpec, VmmDriver } from "../driver.ts";
import { processExited, readProcStat } from "../qemu.ts";
import { vmmError } from "../qemuHost.ts";
import { DEFAULT_API_TIMEOUT_MS, type FirecrackerApi, unixSocketApi } from "./apiClient.ts";
import { actionBody, preBootRequests } from "./config.ts";
import { buildJail, type ChownPort, jailIdsInUse, removeJail, writableDiskBytes } from "./jailFs.ts";
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

/** Side effects of the driver, replaceable in tests. */
export interface FirecrackerPorts {
  /** Starts the jailer (default spawnDetached). */
  spawn: VmmSpawner;
  /** Hands jail files to the placement UID (default fs.chownSync). */
  chown: ChownPort;
  /** The API client for the socket at `socketPath` with a per-request timeout in ms. */
  api: (socketPath: string, timeoutMs: number) => FirecrackerApi;
}

/** Options of FirecrackerDriver (host configuration, fixed for the driver's life). */
export interface FirecrackerDriverOptions {
  /** Pinned Firecracker binary (default /usr/local/bin/firecracker). */
  firecrackerBinary?: string;
  /** Pinned jailer binary (default /usr/local/bin/jailer). */
  jailerBinary?: string;
  /** Jailer `--chroot-base-dir` (default /srv/jailer, jailer.md). */
  chrootBase?: string;
  /** Jail UID/GID range (spec "Prepare"); default 900000 + 10000. */
  uidRange?: IdRange;
  /** cgroup v2 mount point (default /sys/fs/cgroup). */
  cgroupRoot?: string;
  /** Parent cgroup of every jail (default DEFAULT_PARENT_CGROUP). */
  parentCgroup?: string;
  /** Memory allowed above guest RAM in memory.max, MiB (default DEFAULT_VMM_OVERHEAD_MIB). */
  vmmOverheadMiB?: number;
  /** cgroup pids.max (default DEFAULT_PIDS_MAX). */
  pidsMax?: number;
  /** Per-request API timeout, ms. */
  apiTimeoutMs?: number;
  /** How long start() waits for the API socket, ms. */
  startTimeoutMs?: number;
  /** How long stop() waits after SendCtrlAltDel before SIGTERM, ms. */
  shutdownWaitMs?: number;
  /** Replacements for the side-effect ports (tests); unset ones use the real adapters. */
  ports?: Partial<FirecrackerPorts>;
}

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
    const layout = this.layout(spec.instanceId);
    const uid = await this.prepareJail(spec, layout);
    let proc: SpawnedVmm | undefined;
    try {
      const listener = listenHybridVsock(layout.vsockUds, HOST_LISTEN_PORT);
      this.listeners.set(spec.instanceId, { listener, controlSocketPath: spec.controlSocketPath });
      this.ports.chown(listener.path, uid, uid);
      chmodSync(listener.path, 0o600);
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
        fsizeBytes: writableDiskBytes(spec),
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
      const api = this.ports.api(layout.apiSocket, this.apiTimeoutMs);
      for (const r of preBootRequests(spec)) await api.put(r.path, r.body);
      await api.put("/actions", actionBody("InstanceStart"));
      const st = await readProcStat(proc.pid);
      if (!st) throw vmmError(`Firecracker for ${spec.instanceId} vanished right after InstanceStart`);
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
    if (!(await this.waitGone(handle, KILL_WAIT_MS)))
      throw cleanupError(`Firecracker pid ${handle.pid} did not finish exiting`);
    this.closeListener(handle.instanceId);
    const left = removeJail(layout, this.cgroupDir(handle.instanceId));
    if (left.length > 0) throw cleanupError(left.join("; "));
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
