/**
 * The QEMU `microvm` driver: boots a placement's VM with the recipe measured
 * in docs/architecture.md, "Booting without KVM" (uncompressed vmlinux, initramfs, `-cpu max` and
 * `tsc_early_khz` under TCG; KVM when /dev/kvm exists).
 *
 * Implements VmmDriver (spec "Start", "Stop", adoption after an agent
 * restart). QEMU runs inside the placement's network namespace via
 * `ip netns exec` (which execs, so the PID is QEMU's), in its own session,
 * with the console appended to spec.consoleLogPath: it outlives the agent.
 * Must never: signal a PID without first checking its start time and
 * instance ID, or choose a path on its own (all come from VmSpec; the QMP
 * socket is a fixed file name in the placement directory, QEMU's cwd).
 */
import {
  closeSync,
  existsSync,
  linkSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { privateArgsArchive } from "./initrdFragment.ts";
import { readFile } from "node:fs/promises";
import { type GuestChannel, rootFormat, scratchDiskOf, type VmHandle, type VmSpec, type VmmDriver } from "./driver.ts";
import { hostTscKhz, probeKvm, vmmError } from "./qemuHost.ts";
import { AgentError } from "../errors.ts";
import { connectUnixChannel } from "./unixChannel.ts";
import { QMP_SOCKET_FILE, qmpError, QmpSession } from "./qmp.ts";
import {
  DEVICE_STATE_FILE,
  GUEST_RAM_FILE,
  guestRamPath,
  MIGRATION_TIMEOUT_MS,
  plainPath,
  QEMU_COMPAT_VERSION_KEY,
  qemuSnapshotCompat,
  ramBackendArgs,
} from "./qemuSnapshot.ts";
import type { VmSnapshot } from "./driver.ts";
import { compatDifferences, fsyncPath, incompatible } from "./snapshotCommon.ts";

/** The placement file holding the image's initramfs plus the private kernel arguments (0600), until the guest booted. */
export const PRIVATE_INITRD_FILE = "initrd.private.cpio";

export { trimConsoleLog } from "./consoleLog.ts";

/** Options of QemuMicrovmDriver. */
export interface QemuDriverOptions {
  /** QEMU executable (default `qemu-system-x86_64` from PATH). */
  qemuBinary?: string;
  /** Accelerator; `auto` = KVM when /dev/kvm exists and a probe boot works (once per driver), else TCG. */
  accel?: "auto" | "kvm" | "tcg";
  /** Guest TSC frequency hint in kHz (default: detected from the host). */
  tscKhz?: number;
  /** How long start() waits for QEMU to create the control socket, ms. */
  startTimeoutMs?: number;
}

/** Reads state and start time (field 22, clock ticks since boot) of /proc/PID/stat; null if absent. */
export async function readProcStat(pid: number): Promise<{ state: string; startTime: number } | null> {
  const text = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => null);
  if (!text) return null;
  const rest = text.slice(text.lastIndexOf(")") + 2).split(" "); // fields 3.. (comm may contain spaces)
  const startTime = Number(rest[19]);
  return { state: rest[0] ?? "?", startTime };
}

/**
 * True once the VMM process of `handle` has exited: no /proc entry, a zombie
 * or dead state, or the PID reused by another process. Unlike isAlive it
 * ignores the command line, which is already empty while a killed process is
 * still tearing down (and still holding its namespace and cgroup).
 */
export async function processExited(handle: VmHandle): Promise<boolean> {
  const st = await readProcStat(handle.pid);
  return !st || st.state === "Z" || st.state === "X" || st.startTime !== handle.startTime;
}

/**
 * Kernel command line for `spec`: console and panic settings, `reboot=t`,
 * the root (`root=/dev/vda rw` for ext4; `beachball.lower=/dev/vda
 * beachball.upper=/dev/vdb` for a squashfs root booted through the
 * initrd), then spec.kernelArgs. `reboot=t` (triple fault) because the
 * microvm machine has no keyboard controller: `reboot=k` spends about
 * 1.5 s failing before the kernel falls back (docs/adr/0130-guest-start-and-stop.md).
 */
export function qemuKernelCmdline(spec: Pick<VmSpec, "kernelArgs" | "rootDiskPath">, tscKhz: number): string {
  const root =
    rootFormat(spec.rootDiskPath) === "ext4"
      ? ["root=/dev/vda", "rw"]
      : ["beachball.lower=/dev/vda", "beachball.upper=/dev/vdb"];
  return [
    "console=ttyS0",
    "reboot=t",
    "panic=1",
    "pci=off",
    "quiet",
    `tsc_early_khz=${tscKhz}`,
    ...root,
    ...spec.kernelArgs,
  ].join(" ");
}

/** `-drive`/`-device` pairs: the root (read-only for squashfs) as vda, then a squashfs root's scratch disk as vdb. Pure. */
function rootDrives(spec: VmSpec): string[] {
  if (rootFormat(spec.rootDiskPath) === "ext4")
    return [
      "-drive",
      `id=root,file=${spec.rootDiskPath},format=raw,if=none`,
      "-device",
      "virtio-blk-device,drive=root",
    ];
  return [
    "-drive",
    `id=root,file=${spec.rootDiskPath},format=raw,if=none,readonly=on`,
    "-device",
    "virtio-blk-device,drive=root",
    "-drive",
    `id=scratch,file=${scratchDiskOf(spec)},format=raw,if=none`,
    "-device",
    "virtio-blk-device,drive=scratch",
  ];
}

/**
 * QEMU's TCG translation cache, MiB. QEMU 7's default is 1 GiB, filled as
 * the guest runs new code; it counts against the placement's memory.max
 * (guest RAM + the policy's VMM overhead, 192 MiB by default), and a guest
 * that had touched all its RAM got its VMM OOM-killed (measured: 729 MiB
 * anonymous for a 512 MiB guest after an 88 MiB scp). 64 MiB keeps QEMU
 * inside the overhead; a full cache is flushed and refilled, which costs
 * time, not correctness. KVM has no translation cache.
 */
export const TCG_TRANSLATION_CACHE_MIB = 64;

/** The QEMU argument vector (without the binary) for `spec`. Pure. */
export function qemuArgs(spec: VmSpec, accel: "kvm" | "tcg", tscKhz: number): string[] {
  const args = [
    "-name",
    spec.instanceId,
    "-M",
    "microvm",
    "-accel",
    accel === "tcg" ? `tcg,tb-size=${TCG_TRANSLATION_CACHE_MIB}` : "kvm",
    "-cpu",
    accel === "kvm" ? "host" : "max",
    "-smp",
    String(spec.vcpus),
    "-m",
    String(spec.memoryMiB),
    "-nodefaults",
    "-no-user-config",
    "-nographic",
    "-no-reboot",
    "-serial",
    "stdio",
    "-kernel",
    spec.kernelPath,
    "-append",
    qemuKernelCmdline(spec, tscKhz),
    // QMP (pause, resume): relative to QEMU's working directory, the placement's, so the path stays short.
    "-qmp",
    `unix:${QMP_SOCKET_FILE},server=on,wait=off`,
    "-chardev",
    `socket,id=c0,path=${spec.controlSocketPath},server=on,wait=off`,
    "-device",
    "virtio-serial-device",
    "-device",
    "virtserialport,chardev=c0,name=ctl",
    ...rootDrives(spec),
    "-netdev",
    `tap,id=n0,ifname=${spec.tapName},script=no,downscript=no`,
    "-device",
    "virtio-net-device,netdev=n0",
  ];
  if (spec.initrdPath) args.push("-initrd", spec.initrdPath);
  if (spec.suspendable) args.push(...ramBackendArgs(spec, guestRamPath(spec), true));
  return args;
}

/** VmmDriver for QEMU `microvm` (KVM or TCG). */
export class QemuMicrovmDriver implements VmmDriver {
  readonly name = "qemu-microvm";
  private readonly qemuBinary: string;
  private readonly requestedAccel: "auto" | "kvm" | "tcg";
  private accel: "kvm" | "tcg" | undefined;
  private readonly tscKhz: number | undefined;
  private readonly startTimeoutMs: number;

  /** Options are fixed for the driver's life; see QemuDriverOptions. */
  constructor(opts: QemuDriverOptions = {}) {
    this.qemuBinary = opts.qemuBinary ?? "qemu-system-x86_64";
    this.requestedAccel = opts.accel ?? "auto";
    if (this.requestedAccel !== "auto") this.accel = this.requestedAccel;
    else if (!existsSync("/dev/kvm")) this.accel = "tcg";
    this.tscKhz = opts.tscKhz;
    this.startTimeoutMs = opts.startTimeoutMs ?? 10_000;
  }

  /** The accelerator this driver uses (undefined until the first start() resolves `auto`). */
  get accelerator(): "kvm" | "tcg" | undefined {
    return this.accel;
  }

  /**
   * Launches QEMU detached (own session) in spec.netns, console appended to
   * spec.consoleLogPath, and waits until its control socket exists. Throws
   * VMM_START_FAILED (with the console tail) when QEMU exits or the socket
   * does not appear within startTimeoutMs.
   */
  async start(given: VmSpec): Promise<VmHandle> {
    return this.launch(this.withPrivateArgs(given), (spec, accel, tscKhz) => qemuArgs(spec, accel, tscKhz));
  }

  /** Spawns QEMU for `spec` with the argument vector `args` builds; see start. */
  private async launch(
    spec: VmSpec,
    args: (spec: VmSpec, accel: "kvm" | "tcg", tscKhz: number) => string[],
  ): Promise<VmHandle> {
    rmSync(spec.controlSocketPath, { force: true });
    const tscKhz = this.tscKhz ?? (await hostTscKhz());
    this.accel ??= (await probeKvm(this.qemuBinary, spec.kernelPath)) ? "kvm" : "tcg";
    const accel = this.accel;
    const fd = openSync(spec.consoleLogPath, "a");
    let proc: ReturnType<typeof Bun.spawn>;
    try {
      proc = Bun.spawn(["ip", "netns", "exec", spec.netns, this.qemuBinary, ...args(spec, accel, tscKhz)], {
        cwd: spec.dir,
        detached: true,
        stdin: "ignore",
        stdout: fd,
        stderr: fd,
      });
    } catch (e) {
      throw vmmError(`cannot spawn QEMU: ${(e as Error).message}`);
    } finally {
      closeSync(fd);
    }
    proc.unref();
    const deadline = performance.now() + this.startTimeoutMs;
    while (!existsSync(spec.controlSocketPath)) {
      if (proc.exitCode !== null || proc.signalCode !== null || performance.now() > deadline) {
        if (proc.exitCode === null) proc.kill("SIGKILL");
        const tail = (await readFile(spec.consoleLogPath, "utf8").catch(() => "")).slice(-800);
        throw vmmError(
          `QEMU for ${spec.instanceId} did not start (exit ${proc.exitCode ?? "timeout"}): ${tail.trim()}`,
        );
      }
      await Bun.sleep(10);
    }
    const st = await readProcStat(proc.pid);
    if (!st) throw vmmError(`QEMU for ${spec.instanceId} vanished right after start`);
    return { instanceId: spec.instanceId, pid: proc.pid, startTime: st.startTime };
  }

  /**
   * Suspends the verified, suspendable VM into `snapshotDir` (issue 21):
   * checks first that the process really keeps its RAM in the shared file
   * and that `snapshotDir` is on the same file system; then `x-ignore-shared`
   * on, `stop`, the device state migrated into `snapshotDir/device.state`
   * (the RAM is skipped: it is the shared file) and the `cat` that writes it
   * waited for; the RAM file hard-linked into `snapshotDir` while QEMU still
   * runs; both files and the directory fsync'd; only then QEMU ended
   * (SIGKILL to the verified process: a stopped guest cannot shut down) and
   * the placement's name of the RAM file removed. QEMU's `stop` flushes its
   * block devices, so the disks hold what the device state expects.
   * Errors: VMM_UNSUPPORTED for a VM not running with a shared RAM file (not
   * started suspendable, or itself restored); VMM_CONTROL_FAILED when QMP,
   * the migration or a file step fails before the kill (the migration is
   * cancelled and the VM left stopped and running, for the agent to resume
   * or stop); CLEANUP_FAILED when QEMU survives the kill.
   */
  async suspend(handle: VmHandle, spec: VmSpec, snapshotDir: string): Promise<VmSnapshot> {
    if (handle.instanceId !== spec.instanceId)
      throw qmpError(`suspend: handle ${handle.instanceId} is not the VM of spec ${spec.instanceId}`);
    const ram = guestRamPath(spec);
    const cmdline = await readFile(`/proc/${handle.pid}/cmdline`, "utf8").catch(() => "");
    if (!cmdline.split("\0").includes(ramBackendArgs(spec, ram, true)[1]!) || !existsSync(ram))
      throw new AgentError("VMM_UNSUPPORTED", `${spec.instanceId} does not run with a shared RAM file (${ram})`, {
        subsystem: "vmm",
      });
    const statePath = plainPath(join(snapshotDir, DEVICE_STATE_FILE));
    const frozen = join(snapshotDir, GUEST_RAM_FILE);
    try {
      if (statSync(snapshotDir).dev !== statSync(spec.dir).dev)
        throw qmpError(`suspend: ${snapshotDir} is not on the file system of ${spec.dir}`);
    } catch (e) {
      throw e instanceof AgentError ? e : qmpError(`suspend: ${(e as Error).message}`, e);
    }
    const { version, accel } = await this.withQmp(handle, async (q) => {
      const v = await qemuVersion(q);
      const kvm = (await q.execute("query-kvm")) as { enabled?: boolean };
      try {
        await q.execute("migrate-set-capabilities", {
          capabilities: [{ capability: "x-ignore-shared", state: true }],
        });
        await q.execute("stop");
        await q.execute("migrate", { uri: `exec:cat > ${statePath}` });
        await waitMigration(q, "suspend");
        await waitChildrenGone(handle.pid, statePath);
        linkSync(ram, frozen);
        for (const f of [frozen, statePath, snapshotDir]) fsyncPath(f);
      } catch (e) {
        await q.execute("migrate_cancel").catch(() => undefined);
        rmSync(frozen, { force: true });
        throw e instanceof AgentError ? e : qmpError(`suspend of ${handle.instanceId}: ${(e as Error).message}`, e);
      }
      return { version: v, accel: kvm.enabled ? ("kvm" as const) : ("tcg" as const) };
    });
    if (await this.isAlive(handle)) process.kill(handle.pid, "SIGKILL");
    if (!(await this.waitGone(handle, 10_000)))
      throw new AgentError("CLEANUP_FAILED", `QEMU pid ${handle.pid} survived SIGKILL`, { subsystem: "vmm" });
    rmSync(ram, { force: true }); // the snapshot's link keeps the content; a later start must not find it here
    const bytes = [frozen, statePath].reduce((n, f) => n + statSync(f).blocks * 512, 0);
    return { dir: snapshotDir, driver: this.name, compat: qemuSnapshotCompat(spec, version, accel), bytes };
  }

  /**
   * Starts QEMU for the new `spec` from `snapshot` (issue 21): refuses
   * SNAPSHOT_INCOMPATIBLE, before spawning, a snapshot of another driver,
   * whose files are missing or whose RAM file is not the VM's size (QEMU
   * would make a blank one and boot zeroed memory), or whose descriptor
   * differs (the QEMU version and accelerator are checked once QEMU answers,
   * and a mismatch stops it); then `-incoming defer` with the frozen RAM
   * mapped private (copy-on-write: the snapshot stays as it was), the device
   * state loaded, and the VM running, checked by query-status. The private
   * kernel arguments (the nonce) are not handed over again: the guest's
   * memory already holds them, and its new identity comes in the agent's
   * `restored` message next. With `suspendable` (the caller's word that this
   * is a resume of the VM's own snapshot, which nothing restores again) the
   * VM gets its RAM file back as shared RAM (ownRamAgain), so it can be
   * suspended again; without it (a fork, a template's restore) its RAM stays
   * private, copy-on-write over the snapshot, and it cannot. Errors: VMM_START_FAILED,
   * VMM_CONTROL_FAILED (with the console's tail), CLEANUP_FAILED when the
   * failed VMM cannot be stopped.
   */
  async restore(given: VmSpec, snapshot: VmSnapshot): Promise<VmHandle> {
    if (snapshot.driver !== this.name)
      throw incompatible(`snapshot written by driver ${snapshot.driver}, not ${this.name}`, ["driver"]);
    const { privateKernelArgs: _, suspendable, ...spec } = given;
    const ram = join(snapshot.dir, GUEST_RAM_FILE);
    const statePath = plainPath(join(snapshot.dir, DEVICE_STATE_FILE));
    const ramSt = statSync(ram, { throwIfNoEntry: false });
    if (
      !ramSt?.isFile() ||
      ramSt.size !== spec.memoryMiB * 1024 * 1024 ||
      !statSync(statePath, { throwIfNoEntry: false })?.isFile()
    )
      throw incompatible(`snapshot ${snapshot.dir} lacks its files or its RAM is not ${spec.memoryMiB} MiB`, ["files"]);
    const known = this.accel; // unknown before this driver started a VM: then only the later check runs
    const skip = known ? [QEMU_COMPAT_VERSION_KEY] : [QEMU_COMPAT_VERSION_KEY, "accel", "cpu"];
    const early = compatDifferences(snapshot.compat, qemuSnapshotCompat(spec, "", known ?? "tcg"), skip);
    if (early.length > 0) throw incompatible(`snapshot does not fit ${spec.instanceId}`, early);
    const backing = suspendable === true ? await ownRamAgain(ram, spec) : null;
    const handle = await this.launch(spec, (s, a, khz) => [
      ...qemuArgs(s, a, khz),
      ...(backing ? ramBackendArgs(s, backing, true) : ramBackendArgs(s, ram, false)),
      "-incoming",
      "defer",
    ]);
    try {
      await this.withQmp(handle, async (q) => {
        const kvm = (await q.execute("query-kvm")) as { enabled?: boolean };
        const here = qemuSnapshotCompat(spec, await qemuVersion(q), kvm.enabled ? "kvm" : "tcg");
        const diff = compatDifferences(snapshot.compat, here);
        if (diff.length > 0) throw incompatible(`snapshot does not fit ${spec.instanceId}`, diff);
        await q.execute("migrate-set-capabilities", {
          capabilities: [{ capability: "x-ignore-shared", state: true }],
        });
        await q.execute("migrate-incoming", { uri: `exec:cat ${statePath}` });
        await waitMigration(q, "restore");
        let status = (await q.execute("query-status")) as { running?: boolean; status?: string };
        if (!status.running) {
          await q.execute("cont");
          status = (await q.execute("query-status")) as { running?: boolean; status?: string };
        }
        if (!status.running) throw qmpError(`restore of ${spec.instanceId}: query-status says ${status.status}`);
      });
    } catch (e) {
      const tail = (await readFile(spec.consoleLogPath, "utf8").catch(() => "")).slice(-400).trim();
      await this.stop(handle, 0).catch((stopErr: Error) => {
        throw new AgentError("CLEANUP_FAILED", `restore failed and QEMU pid ${handle.pid} could not be stopped`, {
          subsystem: "vmm",
          cause: stopErr,
        });
      });
      if (e instanceof AgentError && e.code === "SNAPSHOT_INCOMPATIBLE") throw e;
      throw qmpError(`restore of ${spec.instanceId}: ${(e as Error).message}${tail ? `; console: ${tail}` : ""}`, e);
    }
    return handle;
  }

  /** Runs `f` with a QMP session on the verified process's socket, one exchange per VM at a time. */
  private withQmp<T>(handle: VmHandle, f: (q: QmpSession) => Promise<T>): Promise<T> {
    const before = this.qmpTurns.get(handle.instanceId) ?? Promise.resolve();
    const turn = before
      .catch(() => undefined)
      .then(async () => {
        if (!(await this.isAlive(handle)))
          throw qmpError(`QEMU pid ${handle.pid} of ${handle.instanceId} is not running`);
        // Through the verified process's working directory: the placement's, where QEMU made its socket.
        const session = await QmpSession.open(`/proc/${handle.pid}/cwd/${QMP_SOCKET_FILE}`);
        try {
          return await f(session);
        } finally {
          session.close();
        }
      });
    this.qmpTurns.set(handle.instanceId, turn);
    void turn
      .catch(() => undefined)
      .finally(() => {
        if (this.qmpTurns.get(handle.instanceId) === turn) this.qmpTurns.delete(handle.instanceId);
      });
    return turn;
  }

  /**
   * Moves spec.privateKernelArgs off the command line: writes the image's
   * initramfs plus a fragment holding them to the placement directory (mode
   * 0600) and boots that instead. Throws VMM_START_FAILED without an initramfs.
   */
  private withPrivateArgs(spec: VmSpec): VmSpec {
    if (!spec.privateKernelArgs?.length) return spec;
    if (!spec.initrdPath) throw vmmError("QEMU needs an initramfs to hand the guest its private arguments");
    const path = join(spec.dir, PRIVATE_INITRD_FILE);
    writeFileSync(path, Buffer.concat([readFileSync(spec.initrdPath), privateArgsArchive(spec.privateKernelArgs)]), {
      mode: 0o600,
    });
    const { privateKernelArgs: _, ...rest } = spec;
    return { ...rest, initrdPath: path };
  }

  /** Removes the private initramfs: QEMU read it at machine start and never again (`-no-reboot`: a guest reboot ends QEMU). */
  forgetBootSecrets(spec: Pick<VmSpec, "dir">): void {
    rmSync(join(spec.dir, PRIVATE_INITRD_FILE), { force: true });
  }

  /** True only for a live (not zombie) PID with the same start time and the instance ID in its cmdline. */
  async isAlive(handle: VmHandle): Promise<boolean> {
    const st = await readProcStat(handle.pid);
    if (!st || st.state === "Z" || st.state === "X" || st.startTime !== handle.startTime) return false;
    const cmdline = await readFile(`/proc/${handle.pid}/cmdline`, "utf8").catch(() => "");
    return cmdline.split("\0").includes(handle.instanceId);
  }

  /** SIGTERM, then SIGKILL after `graceMs` (ms); resolves once the process is gone (no-op if already gone). Throws CLEANUP_FAILED if it survives SIGKILL for 10 s. */
  async stop(handle: VmHandle, graceMs: number): Promise<void> {
    // Not ours to signal (or already exiting): just wait until it has really exited.
    if (!(await this.isAlive(handle))) {
      if (!(await this.waitGone(handle, 10_000)))
        throw new AgentError("CLEANUP_FAILED", `QEMU pid ${handle.pid} did not finish exiting`, { subsystem: "vmm" });
      return;
    }
    process.kill(handle.pid, "SIGTERM");
    if (await this.waitGone(handle, graceMs)) return;
    if (await this.isAlive(handle)) process.kill(handle.pid, "SIGKILL");
    if (!(await this.waitGone(handle, 10_000)))
      throw new AgentError("CLEANUP_FAILED", `QEMU pid ${handle.pid} survived SIGKILL`, { subsystem: "vmm" });
  }

  /** Waits until the process has exited (see processExited) or `ms` elapse; true when gone. */
  async waitGone(handle: VmHandle, ms: number): Promise<boolean> {
    const deadline = performance.now() + ms;
    while (!(await processExited(handle))) {
      if (performance.now() > deadline) return false;
      await Bun.sleep(20);
    }
    return true;
  }

  /**
   * Stops the verified VM's vCPUs by QMP `stop` and checks `query-status`
   * says so (issue 21, pause); its memory stays resident. Pausing a paused VM
   * resolves. Throws VMM_CONTROL_FAILED when the process is not this VM,
   * its QMP socket is missing (a VMM started before QMP was added) or QEMU
   * does not confirm.
   */
  async pause(handle: VmHandle): Promise<void> {
    await this.setRunning(handle, false);
  }

  /** QMP `cont`, checked by `query-status`; resuming a running VM resolves. Errors as pause. */
  async resume(handle: VmHandle): Promise<void> {
    await this.setRunning(handle, true);
  }

  /** The QMP exchange in progress per VM (instance ID): QEMU serves one QMP client at a time, so they queue. */
  private readonly qmpTurns = new Map<string, Promise<unknown>>();

  private setRunning(handle: VmHandle, running: boolean): Promise<void> {
    const what = running ? "resume" : "pause";
    return this.withQmp(handle, async (session) => {
      await session.execute(running ? "cont" : "stop");
      const status = (await session.execute("query-status")) as { running?: boolean; status?: string } | undefined;
      if (status?.running !== running)
        throw qmpError(`${what} of ${handle.instanceId}: query-status says ${status?.status ?? "nothing"}`);
    });
  }

  /** Connects to the control socket, retrying until `timeoutMs`. Throws VMM_START_FAILED on timeout. */
  connectControl(spec: Pick<VmSpec, "controlSocketPath">, timeoutMs: number): Promise<GuestChannel> {
    return connectUnixChannel(spec.controlSocketPath, timeoutMs);
  }
}

/** QEMU's version as `major.minor.micro` (QMP query-version). */
async function qemuVersion(q: QmpSession): Promise<string> {
  const v = (await q.execute("query-version")) as { qemu?: { major?: number; minor?: number; micro?: number } };
  return `${v.qemu?.major}.${v.qemu?.minor}.${v.qemu?.micro}`;
}

/**
 * Waits until no child of QEMU `pid` still has `path` on its command line
 * (the `/bin/sh -c cat > path` of an exec: migration, which may still be
 * writing after QEMU reports `completed`); throws VMM_CONTROL_FAILED after 10 s.
 */
async function waitChildrenGone(pid: number, path: string): Promise<void> {
  const deadline = performance.now() + 10_000;
  for (;;) {
    const children = readdirSync(`/proc/${pid}/task`).flatMap((t) =>
      (readFileSyncOr(`/proc/${pid}/task/${t}/children`) ?? "").split(" ").filter(Boolean),
    );
    const writers = children.filter((c) => (readFileSyncOr(`/proc/${c}/cmdline`) ?? "").includes(path));
    if (writers.length === 0) return;
    if (performance.now() > deadline) throw qmpError(`the writer of ${path} did not finish within 10 s`);
    await Bun.sleep(10);
  }
}

/** The file's text, or undefined when it cannot be read. */
function readFileSyncOr(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/** Polls query-migrate until `completed`; throws VMM_CONTROL_FAILED on `failed`/`cancelled` or after MIGRATION_TIMEOUT_MS. */
async function waitMigration(q: QmpSession, what: string): Promise<void> {
  const deadline = performance.now() + MIGRATION_TIMEOUT_MS;
  for (;;) {
    const m = (await q.execute("query-migrate")) as { status?: string; "error-desc"?: string };
    if (m.status === "completed") return;
    if (m.status === "failed" || m.status === "cancelled")
      throw qmpError(`${what}: migration ${m.status}${m["error-desc"] ? `: ${m["error-desc"]}` : ""}`);
    if (performance.now() > deadline) throw qmpError(`${what}: migration not done within ${MIGRATION_TIMEOUT_MS} ms`);
    await Bun.sleep(10);
  }
}

/**
 * The RAM file a resumed suspendable VM maps shared (issue 21: a VM suspended and resumed can be
 * suspended again): `<dir>/guest.ram`, a hard link to the snapshot's frozen RAM when nothing else
 * holds that file (the VM then writes into the snapshot it was resumed from, which nothing restores
 * again: the next suspend makes a new one), else a copy (reflink where the file system can), since a
 * fork's link to the same file must keep the frozen content. Throws VMM_START_FAILED when the copy fails.
 */
export async function ownRamAgain(frozen: string, spec: Pick<VmSpec, "dir">): Promise<string> {
  const live = guestRamPath(spec);
  rmSync(live, { force: true });
  if (statSync(frozen).nlink === 1) {
    linkSync(frozen, live);
    return live;
  }
  const cp = Bun.spawn(["cp", "--reflink=auto", "--sparse=always", frozen, live], { stdout: "ignore", stderr: "pipe" });
  const err = await new Response(cp.stderr).text();
  if ((await cp.exited) !== 0) {
    rmSync(live, { force: true });
    throw vmmError(`cannot copy the snapshot's RAM to ${live}: ${err.trim().slice(0, 300)}`);
  }
  return live;
}
