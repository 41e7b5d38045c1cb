/**
 * The side effects of one placement on this host (spec "From command to
 * microVM": Prepare, Start, Stop, adoption). The reconciler decides when;
 * this module does the work through the ports on PlacementContext (VMM,
 * isolation, images, timers, randomness) and reports a stable error code
 * when a step fails.
 *
 * Prepare: verify the image, create the digest-named allocation directory,
 * clone the root disk, build the network namespace and TAP, write
 * runtime.json with a fresh 256-bit bootstrap nonce. Start: check the
 * execution lease right before the VMM launches, boot it and complete the
 * guest handshake. Stop: attempt every safe step even when an earlier one
 * fails, then confirm nothing remains.
 * Must never: name a path after client text, launch a VMM without a live
 * lease, or report absent while any resource of the placement remains.
 * Start and adoption also send the guest `control_config` (the connection
 * verification keys) once its handshake or ping succeeded.
 */
import {
  chmodSync,
  copyFileSync,
  existsSync,
  linkSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { GUEST_CMDLINE_KEYS, type GuestIdentity } from "../protocol/guest.ts";
import { guestIpv6KernelArgs } from "./isolation/guestIpv6.ts";
import type { CommandSpec, VmExit } from "../protocol/agent.ts";
import { describeVmExit, readConsoleTail } from "./vmm/guestExit.ts";
import { PLACEMENT_TAP_NAME } from "./isolation/placementNet.ts";
import { SCRATCH_DISK_FILE, type VmHandle, type VmSnapshot, type VmSpec, type VmmDriver } from "./vmm/driver.ts";
import { restoredMessage } from "./guestRestored.ts";
import { placementDiskMiB } from "../domain/capacity.ts";
import { GuestSession } from "./guestSession.ts";
import type { IsolationPort } from "./isolation/isolationPort.ts";
import type { ImagePort, ResolvedImageDir } from "./image/imagePort.ts";
import type { AgentRandom, Timers } from "./ports.ts";
import type { Clock } from "../protocol/clock.ts";
import { AgentError } from "./errors.ts";
import type { StartOrigin, TemplateFallbackReason } from "../protocol/agent.ts";
import { ALLOCATION_ID_PREFIX, ID_HEX_DIGITS } from "../protocol/ids.ts";
import {
  TEMPLATE_SNAPSHOT_DIR,
  type StoredTemplate,
  type TemplateBuild,
  type TemplateKey,
  type TemplateStore,
} from "./templates.ts";

/** The ports and settings placement work runs with. */
export interface PlacementContext {
  /** `<dataDir>/allocations`: parent of every `bb-<digest>` allocation directory. */
  allocationsDir: string;
  /** The VMM (QEMU microvm, Firecracker, or a test double). */
  driver: VmmDriver;
  /** Verified images and root-disk clones. */
  images: ImagePort;
  /** Namespaces, TAP, nftables and cgroups. */
  isolation: IsolationPort;
  timers: Timers;
  /** Source of the bootstrap nonce. */
  random: AgentRandom;
  /** How long the guest has to send a matching GuestReady after the VMM starts, ms. */
  guestBootTimeoutMs: number;
  /**
   * The deployment's connection verification keys (key ID → base64 Ed25519
   * public key), sent to every guest as `control_config` once it is ready
   * and again on adoption; absent (no private networking): none is sent and
   * the guest's control service stays GUEST_NOT_READY.
   */
  controlVerificationKeys?: Readonly<Record<string, string>>;
  /**
   * The host's templates (issue 21, "Templates"; ADR 0182): a placement of a
   * templated class starts from one (startWarm). Absent: such placements
   * boot cold (TEMPLATE_UNSUPPORTED).
   */
  templates?: TemplateStore;
  /** Told why a templated placement booted cold, or that a template was made (the agent log). */
  onTemplate?: (event: { placementId: string; what: "built" | "fallback"; reason?: string; detail?: string }) => void;
  /** The agent's clock: its wall time goes to every ready guest as `clock` (GuestSession.keepClock); absent: none is sent. */
  clock?: Clock;
  /**
   * Pushes workload output to the scheduler (logs/shipper.ts): `settle` stores
   * the output up to the job's exit marker before the exit code is reported;
   * Stop sends the last of it (`finish`) before the console goes.
   */
  consoleLogs?: {
    finish(ref: PlacementRef): Promise<void>;
    settle(ref: PlacementRef, exitCode?: number): Promise<void>;
  };
}

/** The placement identity the ops work on. */
export interface PlacementRef {
  allocationId: string;
  placementId: string;
  generation: number;
  dirName: string;
  /** The command's spec, with the allocation's private IPv6 address when the deployment has private networking. */
  spec: CommandSpec;
}

/** How often Stop checks whether the guest powered off after `shutdown`, ms (it syncs and resets at once: its exit is seen within ~10 ms). */
export const GUEST_SHUTDOWN_POLL_MS = 10;
/** How many checks before Stop stops the VMM itself (1,000 × 10 ms = 10 s; the guest gives its workload 2 s). */
export const GUEST_SHUTDOWN_POLLS = 1_000;

/** runtime.json: what Start needs, written by Prepare (mode 0600: it holds the nonce). */
interface RuntimeFile {
  nonce: string;
  imageDigest: string;
  imageDir: string;
  kernelArgs: string[];
}

/** File name of a placement's private ext4 root disk (a clone of the image's, or of a fork's parent's or a template's). */
const ROOT_DISK_FILE = "rootfs.ext4";

function paths(ctx: PlacementContext, ref: PlacementRef) {
  const dir = join(ctx.allocationsDir, ref.dirName);
  return {
    dir,
    logs: join(dir, "logs"),
    console: join(dir, "logs", "console.log"),
    rootDisk: join(dir, ROOT_DISK_FILE),
    rootSquashfs: join(dir, "rootfs.squashfs"),
    scratch: join(dir, SCRATCH_DISK_FILE),
    runtime: join(dir, "runtime.json"),
    metadata: join(dir, "metadata.json"),
    control: join(dir, "ctl.sock"),
  };
}

/** Console log path of a placement (for operators and the dev demo). */
export function consoleLogPath(ctx: Pick<PlacementContext, "allocationsDir">, dirName: string): string {
  return join(ctx.allocationsDir, dirName, "logs", "console.log");
}

/**
 * Prepare (ensure_present). With `forkFrom` (the directory name of a fork's
 * suspended parent, issue 21), the writable disks are clones of the
 * parent's, as its snapshot expects them, not of the image. Rolls back on
 * failure; throws AgentError (CLEANUP_FAILED, with the first error as
 * `cause`, if the rollback is incomplete).
 */
export async function preparePlacement(ctx: PlacementContext, ref: PlacementRef, forkFrom?: string): Promise<void> {
  const p = paths(ctx, ref);
  const parent = forkFrom === undefined ? null : paths(ctx, { ...ref, dirName: forkFrom });
  try {
    guestIpv6KernelArgs(ref.spec.ipv6Address); // a malformed address fails Prepare before anything is built
    const image = await ctx.images.resolve(ref.spec.imageDigest);
    const squashfs = image.manifest.rootfsFormat === "squashfs";
    // A squashfs root is shared and read-only: only an ext4 clone is charged to the placement's ephemeral disk.
    if (!squashfs && image.manifest.rootfs.sizeBytes > ref.spec.ephemeralDiskMiB * 1024 * 1024)
      throw new AgentError(
        "INSUFFICIENT_LOCAL_DISK",
        `root disk ${image.manifest.rootfs.sizeBytes} B exceeds ephemeralDiskMiB ${ref.spec.ephemeralDiskMiB}`,
      );
    mkdirSync(p.logs, { recursive: true, mode: 0o700 });
    writeFileSync(
      p.metadata,
      JSON.stringify({
        allocationId: ref.allocationId,
        placementId: ref.placementId,
        generation: ref.generation,
        imageDigest: ref.spec.imageDigest,
      }) + "\n",
    );
    await makeDisks(ctx, image, ref.spec.ephemeralDiskMiB, p, parent ? { from: parent } : {});
    if (await ctx.isolation.networkExists(ref.dirName)) await ctx.isolation.destroyNetwork(ref.dirName); // a half-built leftover: rebuild with the current policy
    await ctx.isolation.prepareNetwork(ref.dirName, p.dir); // firewall loaded before any VMM can start
    const runtime: RuntimeFile = {
      nonce: Buffer.from(ctx.random.bytes(32)).toString("hex"),
      imageDigest: ref.spec.imageDigest,
      imageDir: image.dir,
      kernelArgs: image.manifest.kernelArgs,
    };
    writeFileSync(p.runtime, JSON.stringify(runtime) + "\n", { mode: 0o600 });
  } catch (e) {
    const err = AgentError.from(e, "INTERNAL");
    const left = await stopPlacement(ctx, ref, null, null).catch((x: unknown) => [String(x)]);
    if (left.length)
      throw new AgentError("CLEANUP_FAILED", `prepare failed (${err.code}) and its rollback left: ${left.join(", ")}`, {
        cause: err,
      });
    throw err;
  }
}

/** The disk files of a VM: an ext4 root, or a squashfs root and its scratch disk. */
interface DiskPaths {
  rootDisk: string;
  rootSquashfs: string;
  scratch: string;
}

/** Removes the disk files of `at` (absent ones are fine). */
function removeDisks(at: DiskPaths): void {
  for (const f of [at.rootDisk, at.rootSquashfs, at.scratch]) rmSync(f, { force: true });
}

/**
 * Makes the writable disks of `to` afresh (removing any there): an ext4
 * root cloned from the image, or the image's squashfs linked beside a new
 * scratch disk of `scratchMiB`; with `from`, the writable disk is a clone of
 * those disks instead (a fork's parent), with `writable`, a clone of that
 * one file (a template's disk). Throws what the image port throws
 * (INSUFFICIENT_LOCAL_DISK).
 */
async function makeDisks(
  ctx: PlacementContext,
  image: ResolvedImageDir,
  scratchMiB: number,
  to: DiskPaths,
  src: { from?: DiskPaths; writable?: string },
): Promise<void> {
  removeDisks(to); // leftovers of an interrupted Prepare, or disks made again
  const root = join(image.dir, image.manifest.rootfs.path);
  if (image.manifest.rootfsFormat === "squashfs") {
    await ctx.images.linkSharedRoot(root, to.rootSquashfs);
    const clone = src.writable ?? src.from?.scratch;
    if (clone) await ctx.images.cloneRootDisk(clone, to.scratch);
    else await ctx.images.makeScratchDisk(to.scratch, scratchMiB);
  } else {
    await ctx.images.cloneRootDisk(src.writable ?? src.from?.rootDisk ?? root, to.rootDisk);
  }
}

/** Hook of startPlacement. */
export interface StartHooks {
  /**
   * Wraps the VMM launch, called after every slow step of Start: throws
   * (LEASE_EXPIRED) to refuse it (spec "Start": the agent requires a live
   * execution lease), else runs `start` and records the VM it returns
   * before the handshake begins.
   */
  launch(start: () => Promise<VmHandle>): Promise<VmHandle>;
}

/**
 * Start (ensure_running): boots the VMM and completes the guest handshake
 * (GuestReady, then `control_config` when the context has keys, then a ping).
 * Returns the handle and the connected session. Throws AgentError
 * (LEASE_EXPIRED before launch; VMM_START_FAILED; GUEST_BOOT_TIMEOUT, the
 * VMM then still running for Stop to remove).
 */
export async function startPlacement(
  ctx: PlacementContext,
  ref: PlacementRef,
  hooks: StartHooks,
): Promise<{ handle: VmHandle; session: GuestSession }> {
  const p = paths(ctx, ref);
  const runtime = JSON.parse(readFileSync(p.runtime, "utf8")) as RuntimeFile;
  const identity: GuestIdentity = {
    allocationId: ref.allocationId,
    placementId: ref.placementId,
    generation: ref.generation,
    nonce: runtime.nonce,
  };
  const spec = await vmSpecOf(ctx, ref, runtime);
  const handle = await launchConfined(ctx, ref, hooks, () => ctx.driver.start(spec));
  const channel = await ctx.driver.connectControl(spec, 10_000).catch((e: Error) => {
    throw new AgentError("VMM_START_FAILED", "cannot connect to the guest control channel", {
      subsystem: "vmm",
      cause: e,
    });
  });
  const session = new GuestSession(channel, identity, ctx.timers);
  if (!(await session.waitReady(ctx.guestBootTimeoutMs))) {
    session.close();
    throw new AgentError("GUEST_BOOT_TIMEOUT", `no matching GuestReady within ${ctx.guestBootTimeoutMs} ms`, {
      subsystem: "guest",
    });
  }
  await greet(ctx, session);
  ctx.driver.forgetBootSecrets(spec);
  return { handle, session };
}

/** After a matching GuestReady: the control service's keys, the clock, then a ping. Throws GUEST_BOOT_TIMEOUT when the ping goes unanswered. */
async function greet(ctx: PlacementContext, session: GuestSession): Promise<void> {
  if (ctx.controlVerificationKeys) session.configureControl(ctx.controlVerificationKeys);
  if (ctx.clock) session.keepClock(ctx.clock);
  if (!(await session.ping(10_000))) {
    session.close();
    throw new AgentError("GUEST_BOOT_TIMEOUT", "guest did not answer the ping", { subsystem: "guest" });
  }
}

/** Builds the cgroup, launches the VMM through `hooks` (`start` boots or restores it) and moves it in. Throws AgentError VMM_START_FAILED (or the hook's code). */
async function launchConfined(
  ctx: PlacementContext,
  ref: PlacementRef,
  hooks: StartHooks,
  start: () => Promise<VmHandle>,
  diskMiB = placementDiskMiB(ref.spec), // the RAM file of a suspendable VM included
): Promise<VmHandle> {
  let handle: VmHandle;
  try {
    // Limits exist before the VMM does.
    const confine = ctx.isolation.prepareCgroup(ref.dirName, paths(ctx, ref).dir, {
      ...ref.spec,
      ephemeralDiskMiB: diskMiB,
    });
    handle = await hooks.launch(start);
    await confine(handle.pid).catch(async (e: Error) => {
      await ctx.driver.stop(handle, 1_000).catch(() => {});
      throw e;
    });
  } catch (e) {
    throw AgentError.from(e, "VMM_START_FAILED", "vmm");
  }
  return handle;
}

/** The VM spec a placement boots (or is restored) with, from its runtime.json and image (`resolved`, else resolved here). Throws what resolving the image throws. */
async function vmSpecOf(
  ctx: PlacementContext,
  ref: PlacementRef,
  runtime: RuntimeFile,
  resolved?: ResolvedImageDir,
): Promise<VmSpec> {
  const p = paths(ctx, ref);
  const image = resolved ?? (await ctx.images.resolve(runtime.imageDigest));
  return {
    instanceId: ref.dirName,
    dir: p.dir,
    vcpus: Math.max(1, Math.ceil(ref.spec.cpuMillis / 1000)),
    memoryMiB: ref.spec.memoryMiB,
    kernelPath: join(image.dir, image.manifest.kernel.path),
    ...(image.manifest.initrd ? { initrdPath: join(image.dir, image.manifest.initrd.path) } : {}),
    ...(image.manifest.rootfsFormat === "squashfs"
      ? { rootDiskPath: p.rootSquashfs, scratchDiskPath: p.scratch }
      : { rootDiskPath: p.rootDisk }),
    netns: ref.dirName,
    tapName: PLACEMENT_TAP_NAME,
    kernelArgs: [
      ...runtime.kernelArgs,
      `${GUEST_CMDLINE_KEYS.allocationId}=${ref.allocationId}`,
      `${GUEST_CMDLINE_KEYS.placementId}=${ref.placementId}`,
      `${GUEST_CMDLINE_KEYS.generation}=${ref.generation}`,
      ...ctx.isolation.networkKernelArgs(p.dir),
      ...guestIpv6KernelArgs(ref.spec.ipv6Address),
    ],
    // The nonce is the placement's secret: never on a command line other host users can read.
    privateKernelArgs: [`${GUEST_CMDLINE_KEYS.nonce}=${runtime.nonce}`],
    consoleLogPath: p.console,
    controlSocketPath: p.control,
    ...(ref.spec.suspendable ? { suspendable: true } : {}),
  };
}

/** Prefix of a suspended placement's snapshot directory, `snapshot-g<generation>`, inside its allocation directory (so Stop removes it with the rest). */
export const SNAPSHOT_DIR_PREFIX = "snapshot-g";

/**
 * Suspend (ensure_suspended, issue 21): saves the VM's memory and device
 * state into `<dir>/snapshot-g<generation>` through the driver, which ends the VMM; the
 * guest session closes. Returns the snapshot. Throws AgentError:
 * VMM_UNSUPPORTED (the driver cannot suspend, or this VM cannot: a fork's or a
 * template's QEMU VM keeps its memory private), VMM_CONTROL_FAILED, or what the driver
 * throws; the VM may then still run (the caller asks the driver).
 */
export async function suspendPlacement(
  ctx: PlacementContext,
  ref: PlacementRef,
  handle: VmHandle,
  session: GuestSession | null,
): Promise<VmSnapshot> {
  if (!ctx.driver.suspend || !ref.spec.suspendable)
    throw new AgentError(
      "VMM_UNSUPPORTED",
      ref.spec.suspendable ? `the ${ctx.driver.name} driver cannot suspend` : "the placement is not suspendable",
      { subsystem: "vmm" },
    );
  const p = paths(ctx, ref);
  const runtime = JSON.parse(readFileSync(p.runtime, "utf8")) as RuntimeFile;
  const spec = await vmSpecOf(ctx, ref, runtime);
  const dir = join(p.dir, `${SNAPSHOT_DIR_PREFIX}${ref.generation}`);
  rmSync(dir, { recursive: true, force: true }); // a leftover of a suspend of this generation that failed
  mkdirSync(dir, { mode: 0o700 });
  const snapshot = await ctx.driver.suspend(handle, spec, dir);
  session?.close();
  // The older snapshots' VMs are gone now: only the new one is restored from.
  for (const name of readdirSync(p.dir))
    if (name.startsWith(SNAPSHOT_DIR_PREFIX) && join(p.dir, name) !== dir)
      rmSync(join(p.dir, name), { recursive: true, force: true });
  return snapshot;
}

/** Makes `dir` afresh with a hard link (a copy across file systems) of every file of `from`. Throws the file system's error. */
function linkSnapshotFiles(from: string, dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { mode: 0o700 });
  for (const name of readdirSync(from)) {
    const f = join(from, name);
    if (!statSync(f).isFile()) continue;
    try {
      linkSync(f, join(dir, name));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EXDEV") throw e;
      copyFileSync(f, join(dir, name));
    }
  }
}

/** Directory, inside a fork's allocation directory, of the links to its parent's snapshot files (Stop removes it with the rest). */
export const FORK_SNAPSHOT_DIR = "snapshot-fork";

/**
 * Prepare of a fork (ensure_present with `forkOf`, issue 21): prepares the
 * placement with clones of the suspended parent's disks (`parentDirName`),
 * then hard-links every file of the parent's `snapshot` into
 * `<dir>/snapshot-fork` (a copy across file systems), so the fork restores
 * from files that stay while it needs them, whatever happens to its parent
 * afterwards. Returns the fork's snapshot (its own directory). The caller
 * keeps the parent suspended meanwhile (its disks must hold what the
 * snapshot expects). Throws what preparePlacement throws, and AgentError
 * SNAPSHOT_MISSING when the snapshot's files cannot be linked or copied
 * (rolled back).
 */
export async function prepareFork(
  ctx: PlacementContext,
  ref: PlacementRef,
  parentDirName: string,
  snapshot: VmSnapshot,
): Promise<VmSnapshot> {
  await preparePlacement(ctx, ref, parentDirName);
  const dir = join(paths(ctx, ref).dir, FORK_SNAPSHOT_DIR);
  try {
    linkSnapshotFiles(snapshot.dir, dir);
  } catch (e) {
    await stopPlacement(ctx, ref, null, null).catch(() => undefined);
    throw new AgentError(
      "SNAPSHOT_MISSING",
      `cannot take the parent's snapshot ${snapshot.dir}: ${(e as Error).message}`,
      {
        subsystem: "vmm",
      },
    );
  }
  return { ...snapshot, dir };
}

/**
 * Restore (ensure_running of a suspended placement, or of a fork from its
 * parent's snapshot; issue 21): starts its VMM from `snapshot` through
 * `hooks` (the lease check), hands the guest
 * its `restored` message (the placement's current generation with a fresh
 * nonce, written to runtime.json before the launch so an adopting agent
 * knows it; new entropy; the host's clock), and waits for the matching
 * GuestReady, then greets it as Start does. Throws AgentError:
 * VMM_UNSUPPORTED (the driver cannot restore), SNAPSHOT_INCOMPATIBLE,
 * VMM_START_FAILED, GUEST_BOOT_TIMEOUT (the VMM then runs for Stop).
 */
export async function restorePlacement(
  ctx: PlacementContext,
  ref: PlacementRef,
  snapshot: VmSnapshot,
  hooks: StartHooks,
  clock: Clock,
): Promise<{ handle: VmHandle; session: GuestSession }> {
  const fork = ref.spec.forkOf;
  const driver = ctx.driver;
  if (!driver.restore)
    throw new AgentError("VMM_UNSUPPORTED", `the ${driver.name} driver cannot restore`, { subsystem: "vmm" });
  const p = paths(ctx, ref);
  const runtime = JSON.parse(readFileSync(p.runtime, "utf8")) as RuntimeFile;
  const { message, identity } = restoredMessage(
    { allocationId: ref.allocationId, placementId: ref.placementId, generation: ref.generation, spec: ref.spec },
    { random: ctx.random, clock },
    fork ? { payloadAllowed: fork.payloadAllowed } : {},
  );
  writeFileSync(p.runtime, JSON.stringify({ ...runtime, nonce: identity.nonce } satisfies RuntimeFile) + "\n", {
    mode: 0o600,
  });
  const full = await vmSpecOf(ctx, ref, { ...runtime, nonce: identity.nonce });
  // Only a resume from the VM's own snapshot stays suspendable (its RAM shared again, ADR 0180); a fork's or a
  // template's VM stays copy-on-write over a snapshot that other VMs restore too.
  const resume = !fork && snapshot.dir.startsWith(join(p.dir, SNAPSHOT_DIR_PREFIX));
  const { suspendable: _, ...shared } = full;
  const spec = resume ? full : shared;
  const handle = await launchConfined(ctx, ref, hooks, () => driver.restore!(spec, snapshot));
  const channel = await driver.connectControl(spec, 10_000).catch((e: Error) => {
    throw new AgentError("VMM_START_FAILED", "cannot connect to the restored guest's control channel", {
      subsystem: "vmm",
      cause: e,
    });
  });
  const session = new GuestSession(channel, identity, ctx.timers);
  const ready = session.waitReady(ctx.guestBootTimeoutMs);
  session.restored(message);
  if (!(await ready)) {
    session.close();
    throw new AgentError(
      "GUEST_BOOT_TIMEOUT",
      `the restored guest sent no matching GuestReady within ${ctx.guestBootTimeoutMs} ms`,
      {
        subsystem: "guest",
      },
    );
  }
  await greet(ctx, session);
  driver.forgetBootSecrets(spec); // the new nonce rests only in runtime.json once the guest holds it
  return { handle, session };
}

/** Directory, inside a placement started from a template, of the links to the template's snapshot files. */
export const TEMPLATE_LINK_DIR = "snapshot-template";

/** The private IPv6 address a template's guest boots with when the deployment has private networking (ULA, never routed: the restore moves it). */
const TEMPLATE_IPV6 = "fd00::b";

/** Codes after which a templated start does not fall back to a cold boot: the placement may not run at all now. */
const NO_FALLBACK = new Set(["LEASE_EXPIRED", "INTERNAL", "CLEANUP_FAILED"]);

/**
 * Start of a placement whose class has a template (issue 21, "Templates";
 * ADR 0182). Finds the host's template for the placement's image and size
 * (checked against its digests); when there is none, makes it first inside
 * this placement's own reservation, cgroup and network (templateBuild);
 * then gives the placement clones of the template's disk and links to its
 * snapshot and restores it as restorePlacement does, so the payload is
 * delivered as after a boot. Boots cold (startPlacement) instead, saying why
 * in the result's `start`, when the driver cannot snapshot, another start
 * is making the template, making or checking it failed, or the restore
 * failed before the VM ran. Throws what startPlacement throws, and
 * LEASE_EXPIRED, INTERNAL or CLEANUP_FAILED from any step (no fallback).
 */
export async function startWarm(
  ctx: PlacementContext,
  ref: PlacementRef,
  hooks: StartHooks,
  clock: Clock,
): Promise<{ handle: VmHandle; session: GuestSession; start: StartOrigin }> {
  const cold = async (fallback: TemplateFallbackReason, detail?: string) => {
    ctx.onTemplate?.({
      placementId: ref.placementId,
      what: "fallback",
      reason: fallback,
      ...(detail ? { detail } : {}),
    });
    return { ...(await startPlacement(ctx, ref, hooks)), start: { from: "boot" as const, fallback } };
  };
  const { templates, driver } = ctx;
  if (!templates || !driver.suspend || !driver.restore) return cold("TEMPLATE_UNSUPPORTED");
  const p = paths(ctx, ref);
  const runtime = JSON.parse(readFileSync(p.runtime, "utf8")) as RuntimeFile;
  const image = await ctx.images.resolve(runtime.imageDigest);
  const spec = await vmSpecOf(ctx, ref, runtime, image);
  const key: TemplateKey = {
    imageDigest: runtime.imageDigest,
    driver: driver.name,
    vcpus: spec.vcpus,
    memoryMiB: spec.memoryMiB,
    ephemeralDiskMiB: ref.spec.ephemeralDiskMiB,
    rootfsFormat: image.manifest.rootfsFormat === "squashfs" ? "squashfs" : "ext4",
    networkArgs: ctx.isolation.networkKernelArgs(p.dir),
    ipv6: ref.spec.ipv6Address !== undefined,
  };
  let found: Awaited<ReturnType<TemplateStore["find"]>>;
  try {
    found = await templates.find(key);
  } catch (e) {
    return cold("TEMPLATE_MISMATCH", (e as Error).message);
  }
  if (found.kind === "mismatch") return cold("TEMPLATE_MISMATCH", found.why);
  let template: StoredTemplate;
  let built = false;
  if (found.kind === "found") template = found.template;
  else {
    let build: TemplateBuild | null;
    try {
      build = templates.beginBuild(key);
    } catch (e) {
      return cold("TEMPLATE_BUILD_FAILED", (e as Error).message); // no room for the build's directory, say
    }
    if (!build) return cold("TEMPLATE_BUILDING");
    try {
      // The placement's own disks are made again from the template: not held beside the build's.
      removeDisks(p);
      template = await templateBuild(ctx, ref, hooks, spec, image, runtime, build);
      built = true;
      ctx.onTemplate?.({ placementId: ref.placementId, what: "built", detail: template.keyHex });
    } catch (e) {
      build.abandon();
      const err = AgentError.from(e, "VMM_START_FAILED");
      if (NO_FALLBACK.has(err.code)) throw err;
      await makeDisks(ctx, image, ref.spec.ephemeralDiskMiB, p, {}); // the cold boot's own disks, as Prepare made them
      return cold("TEMPLATE_BUILD_FAILED", err.chain());
    }
  }
  const restored: { vm: VmHandle | null } = { vm: null }; // the VM the restore launched, if it got that far
  try {
    await makeDisks(ctx, image, ref.spec.ephemeralDiskMiB, p, { writable: template.diskPath });
    const linked = join(p.dir, TEMPLATE_LINK_DIR);
    linkSnapshotFiles(template.snapshot.dir, linked);
    const r = await restorePlacement(
      ctx,
      ref,
      { ...template.snapshot, dir: linked },
      { launch: (start) => hooks.launch(start).then((h) => (restored.vm = h)) },
      clock,
    );
    return { ...r, start: { from: "template", ...(built ? { built: true } : {}) } };
  } catch (e) {
    const err = AgentError.from(e, "VMM_START_FAILED");
    // A guest that did not answer leaves its VM for Stop.
    if (NO_FALLBACK.has(err.code) || err.code === "GUEST_BOOT_TIMEOUT") throw err;
    // Never a cold boot beside a restored VM that still runs (its disks would go from under it).
    const vm = restored.vm;
    if (vm && (await driver.isAlive(vm))) {
      await driver.stop(vm, 1_000).catch(() => undefined);
      if (await driver.isAlive(vm))
        throw new AgentError("CLEANUP_FAILED", `the restored VM pid ${vm.pid} survived a stop`, {
          subsystem: "vmm",
          cause: err,
        });
    }
    if (err.code === "SNAPSHOT_INCOMPATIBLE") templates.remove(template.keyHex); // the next start makes one that fits
    rmSync(join(p.dir, TEMPLATE_LINK_DIR), { recursive: true, force: true });
    await makeDisks(ctx, image, ref.spec.ephemeralDiskMiB, p, {}); // the cold boot's own disks, as Prepare made them
    return cold(err.code === "SNAPSHOT_INCOMPATIBLE" ? "TEMPLATE_MISMATCH" : "TEMPLATE_RESTORE_FAILED", err.chain());
  }
}

/**
 * Makes the template of `build.key` (ADR 0182): boots the image in the
 * build's directory, on disks of its own, inside the placement's network
 * namespace and cgroup (so it uses nothing the placement's reservation does
 * not cover) and through `hooks` (the lease check), with an identity of its
 * own and a nonce that is never written down; waits for its GuestReady and a
 * ping (no control_config, no payload: the guest has seen nothing of any
 * allocation); suspends it into `<build>/snapshot`, which ends the VMM; and
 * publishes the snapshot and the disk. Throws AgentError (what Start
 * throws, GUEST_BOOT_TIMEOUT, what the driver's suspend throws); the VMM is
 * stopped first.
 */
async function templateBuild(
  ctx: PlacementContext,
  ref: PlacementRef,
  hooks: StartHooks,
  placementSpec: VmSpec,
  image: ResolvedImageDir,
  runtime: RuntimeFile,
  build: TemplateBuild,
): Promise<StoredTemplate> {
  const driver = ctx.driver;
  const dir = build.dir;
  const disks: DiskPaths = {
    rootDisk: join(dir, ROOT_DISK_FILE),
    rootSquashfs: join(dir, "rootfs.squashfs"),
    scratch: join(dir, SCRATCH_DISK_FILE),
  };
  await makeDisks(ctx, image, ref.spec.ephemeralDiskMiB, disks, {});
  mkdirSync(join(dir, "logs"), { mode: 0o700 });
  const hex = Buffer.from(ctx.random.bytes(ID_HEX_DIGITS / 2)).toString("hex");
  const identity: GuestIdentity = {
    allocationId: `${ALLOCATION_ID_PREFIX}${hex}`,
    placementId: `template-${hex.slice(0, 12)}`,
    generation: 1,
    nonce: Buffer.from(ctx.random.bytes(32)).toString("hex"),
  };
  const squashfs = image.manifest.rootfsFormat === "squashfs";
  const spec: VmSpec = {
    ...placementSpec,
    dir,
    ...(squashfs
      ? { rootDiskPath: disks.rootSquashfs, scratchDiskPath: disks.scratch }
      : { rootDiskPath: disks.rootDisk }),
    kernelArgs: [
      ...runtime.kernelArgs,
      `${GUEST_CMDLINE_KEYS.allocationId}=${identity.allocationId}`,
      `${GUEST_CMDLINE_KEYS.placementId}=${identity.placementId}`,
      `${GUEST_CMDLINE_KEYS.generation}=1`,
      ...ctx.isolation.networkKernelArgs(paths(ctx, ref).dir),
      ...(ref.spec.ipv6Address !== undefined ? guestIpv6KernelArgs(TEMPLATE_IPV6) : []),
    ],
    privateKernelArgs: [`${GUEST_CMDLINE_KEYS.nonce}=${identity.nonce}`],
    consoleLogPath: join(dir, "logs", "console.log"),
    controlSocketPath: join(dir, "ctl.sock"),
    suspendable: true,
  };
  // The RAM file the suspend freezes is written by the VMM: its file-size bound covers it.
  const handle = await launchConfined(
    ctx,
    ref,
    hooks,
    () => driver.start(spec),
    ref.spec.ephemeralDiskMiB + ref.spec.memoryMiB,
  );
  let session: GuestSession | null = null;
  try {
    const channel = await driver.connectControl(spec, 10_000);
    session = new GuestSession(channel, identity, ctx.timers);
    if (!(await session.waitReady(ctx.guestBootTimeoutMs)))
      throw new AgentError(
        "GUEST_BOOT_TIMEOUT",
        `the template's guest sent no GuestReady within ${ctx.guestBootTimeoutMs} ms`,
        {
          subsystem: "guest",
        },
      );
    if (!(await session.ping(10_000)))
      throw new AgentError("GUEST_BOOT_TIMEOUT", "the template's guest did not answer the ping", {
        subsystem: "guest",
      });
    driver.forgetBootSecrets(spec);
    const snapshotDir = join(dir, TEMPLATE_SNAPSHOT_DIR);
    mkdirSync(snapshotDir, { mode: 0o700 });
    const snapshot = await driver.suspend!(handle, spec, snapshotDir);
    session.close();
    const diskName = squashfs ? SCRATCH_DISK_FILE : ROOT_DISK_FILE;
    await digHoles(join(dir, diskName));
    return await ctx.templates!.publish(build, snapshot, diskName);
  } catch (e) {
    session?.close();
    if (await driver.isAlive(handle)) await driver.stop(handle, 1_000).catch(() => undefined);
    if (await driver.isAlive(handle))
      throw new AgentError("CLEANUP_FAILED", `the template's VMM pid ${handle.pid} survived a stop`, {
        subsystem: "vmm",
      });
    throw AgentError.from(e, "VMM_START_FAILED", "vmm");
  }
}

/**
 * Gives the zero-filled ranges of `path` back as holes (`fallocate
 * --dig-holes`): a booted guest's ext4 zeroes its inode tables in the
 * background, and every placement's sparse copy of a template's disk would
 * otherwise copy those zeros again. Best effort: a file system that cannot
 * punch holes keeps the file as it is.
 */
async function digHoles(path: string): Promise<void> {
  try {
    await Bun.spawn(["fallocate", "--dig-holes", path], { stdout: "ignore", stderr: "ignore" }).exited;
  } catch {
    /* no fallocate here: the copies are slower, not wrong */
  }
}

/**
 * Reconnects to a VM that survived an agent restart. A running guest must
 * answer a ping; a guest that was still booting (`confirmIdentity`) must
 * send a GuestReady with the exact identity and nonce within `timeoutMs`.
 * Null if it does neither. An adopted guest is sent `control_config` again.
 */
export async function adoptPlacement(
  ctx: PlacementContext,
  ref: PlacementRef,
  confirmIdentity: boolean,
  timeoutMs: number,
): Promise<GuestSession | null> {
  const p = paths(ctx, ref);
  const runtime = JSON.parse(readFileSync(p.runtime, "utf8")) as RuntimeFile;
  const channel = await ctx.driver.connectControl({ controlSocketPath: p.control }, 5_000).catch(() => null);
  if (!channel) return null;
  const session = new GuestSession(
    channel,
    { allocationId: ref.allocationId, placementId: ref.placementId, generation: ref.generation, nonce: runtime.nonce },
    ctx.timers,
  );
  const ok = confirmIdentity ? await session.waitReady(timeoutMs, true) : await session.ping(10_000);
  if (ok) {
    ctx.driver.forgetBootSecrets({ dir: p.dir }); // an agent that died between launch and GuestReady left it
    // This agent's keys replace whatever an earlier agent process configured (the keys change only with agent.json).
    if (ctx.controlVerificationKeys) session.configureControl(ctx.controlVerificationKeys);
    if (ctx.clock) session.keepClock(ctx.clock);
    return session;
  }
  session.close();
  return null;
}

/** Options of stopPlacement. */
export interface StopOptions {
  /** Move the console log here (mode 0600) before the directory goes: a failed placement's log kept for the operator. */
  keepConsoleAt?: string;
}

function keepConsole(from: string, to: string): void {
  try {
    mkdirSync(dirname(to), { recursive: true, mode: 0o700 });
    renameSync(from, to);
    chmodSync(to, 0o600);
  } catch {
    /* no console to keep (never started): nothing to retain */
  }
}

/**
 * What a VM that ended on its own left behind: the exit reason and the
 * redacted kernel tail of its console (vmm/guestExit.ts), the placement's
 * nonce scrubbed. `vmmAlive`: whether its VMM process still runs.
 */
export function diagnoseVmExit(
  ctx: Pick<PlacementContext, "allocationsDir">,
  ref: Pick<PlacementRef, "dirName">,
  vmmAlive: boolean,
): VmExit {
  return describeVmExit(
    readConsoleTail(consoleLogPath(ctx, ref.dirName)),
    vmmAlive,
    placementSecrets(ctx, ref.dirName),
  );
}

/** The placement's own secrets to scrub from anything taken from its console: its bootstrap nonce ([] without runtime.json). */
export function placementSecrets(ctx: Pick<PlacementContext, "allocationsDir">, dirName: string): string[] {
  try {
    const nonce = (JSON.parse(readFileSync(join(ctx.allocationsDir, dirName, "runtime.json"), "utf8")) as RuntimeFile)
      .nonce;
    return nonce ? [nonce] : [];
  } catch {
    return []; // no runtime.json: nothing of the placement's own to scrub
  }
}

/**
 * Stop (ensure_absent): asks the guest to shut down, stops the VMM, removes
 * the namespace, TAP, veth, nftables tables and cgroup (the isolation port),
 * keeps the console log when asked, deletes disks, sockets, logs and the
 * directory. Every step is attempted; returns what remains (empty when absent).
 */
export async function stopPlacement(
  ctx: PlacementContext,
  ref: PlacementRef,
  handle: VmHandle | null,
  session: GuestSession | null,
  opts: StopOptions = {},
): Promise<string[]> {
  const p = paths(ctx, ref);
  const left: string[] = [];
  if (session?.connected && handle) {
    session.shutdown();
    for (let i = 0; i < GUEST_SHUTDOWN_POLLS && (await ctx.driver.isAlive(handle)); i++)
      await ctx.timers.sleep(GUEST_SHUTDOWN_POLL_MS);
  }
  session?.close();
  if (handle) {
    await ctx.driver.stop(handle, 10_000).catch((e: Error) => left.push(`vmm: ${e.message}`));
    if (await ctx.driver.isAlive(handle)) left.push(`vmm pid ${handle.pid}`);
  }
  left.push(...(await ctx.isolation.teardown(ref.dirName, p.dir).catch((e: Error) => [`isolation: ${e.message}`])));
  await ctx.consoleLogs?.finish(ref);
  if (opts.keepConsoleAt) keepConsole(p.console, opts.keepConsoleAt);
  try {
    rmSync(p.dir, { recursive: true, force: true });
  } catch (e) {
    left.push(`dir: ${(e as Error).message}`);
  }
  if (existsSync(p.dir)) left.push(`dir ${p.dir}`);
  if (await ctx.isolation.networkExists(ref.dirName).catch(() => true)) left.push(`netns ${ref.dirName}`);
  return [...new Set(left)];
}

/** Size in bytes of a file, or 0. */
export function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}
