/**
 * The side effects of one placement on this host (spec "From command to
 * microVM": Prepare, Start, Stop). The daemon decides when; this module does
 * the work and reports a stable error code when a step fails.
 *
 * Prepare: verify the image, create the digest-named allocation directory,
 * clone the root disk, build the network namespace and TAP, write
 * runtime.json with a fresh 256-bit bootstrap nonce. Start: boot the VMM and
 * complete the guest handshake. Stop: attempt every safe step even when an
 * earlier one fails, then confirm nothing remains.
 * Must never: name a path after client text, or report absent while any
 * resource of the placement remains.
 */
import { closeSync, existsSync, ftruncateSync, linkSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createHash, randomBytes } from "node:crypto";
import type { AgentErrorCode } from "../protocol/errors.ts";
import { GUEST_CMDLINE_KEYS, type GuestIdentity } from "../protocol/guest.ts";
import type { PlacementSpec } from "../protocol/agent.ts";
import { imageDigest, MANIFEST_FILE_NAME, type ImageManifest } from "../protocol/image.ts";
import { verifyImage } from "../image/verify.ts";
import { destroyPlacementNetwork, listPlacementNetworks, PLACEMENT_TAP_NAME } from "./isolation/placementNet.ts";
import { SCRATCH_DISK_FILE, type VmHandle, type VmSpec, type VmmDriver } from "./vmm/driver.ts";
import { GuestSession } from "./guestSession.ts";
import type { PlacementIsolation } from "./isolation/isolation.ts";
import { confineVmm, networkKernelArgs, prepareCgroup, prepareNetwork, teardownIsolation } from "./isolation/isolationOps.ts";

/** How long Stop waits for the guest's own shutdown before stopping the VMM, ms (the guest gives its workload 2 s). */
export const GUEST_SHUTDOWN_WAIT_MS = 10_000;

/** An error with a stable agent error code. */
export class PlacementError extends Error {
  constructor(
    readonly code: AgentErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "PlacementError";
  }
}

/** Maps any thrown value to a PlacementError, keeping a known `code`. */
export function asPlacementError(e: unknown, fallback: AgentErrorCode): PlacementError {
  if (e instanceof PlacementError) return e;
  const code = (e as { code?: unknown })?.code;
  const known: AgentErrorCode[] = ["IMAGE_DIGEST_MISMATCH", "IMAGE_SIGNATURE_INVALID", "IMAGE_NOT_FOUND", "NETWORK_SETUP_FAILED", "VMM_START_FAILED", "CLEANUP_FAILED", "INSUFFICIENT_LOCAL_DISK"];
  return new PlacementError(known.includes(code as AgentErrorCode) ? (code as AgentErrorCode) : fallback, (e as Error)?.message ?? String(e));
}

/** Directory name of a placement: `bb-` + SHA-256 of its identity (never client text). */
export function placementDirName(allocationId: string, placementId: string, generation: number): string {
  return `bb-${createHash("sha256").update(`${allocationId}\u0000${placementId}\u0000${generation}`).digest("hex").slice(0, 24)}`;
}

/** What a placement needs from the daemon. */
export interface PlacementContext {
  allocationsDir: string;
  driver: VmmDriver;
  /** Finds a verified image by digest; throws IMAGE_NOT_FOUND / IMAGE_DIGEST_MISMATCH. */
  resolveImage(digest: string): Promise<{ dir: string; manifest: ImageManifest }>;
  guestBootTimeoutMs: number;
  /** Network and cgroup isolation settings (defaults: no uplink, cgroups under the agent's own). */
  isolation?: PlacementIsolation;
}

/** The placement identity the ops work on. */
export interface PlacementRef {
  allocationId: string;
  placementId: string;
  generation: number;
  dirName: string;
  spec: PlacementSpec;
}

/** runtime.json: what Start needs, written by Prepare (mode 0600: it holds the nonce). */
interface RuntimeFile {
  nonce: string;
  imageDigest: string;
  imageDir: string;
  kernelArgs: string[];
}

function paths(ctx: PlacementContext, ref: PlacementRef) {
  const dir = join(ctx.allocationsDir, ref.dirName);
  return {
    dir,
    logs: join(dir, "logs"),
    console: join(dir, "logs", "console.log"),
    rootDisk: join(dir, "rootfs.ext4"),
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

async function run(cmd: string[]): Promise<void> {
  const p = Bun.spawn(cmd, { stdout: "ignore", stderr: "pipe" });
  const err = await new Response(p.stderr).text();
  if ((await p.exited) !== 0) throw new Error(`${cmd[0]} failed: ${err.trim().slice(0, 300)}`);
}

/**
 * A squashfs root's placement files (spec "Prepare"): a hard link to the
 * shared, read-only artifact (a copy only when the cache is on another file
 * system), and a freshly formatted sparse scratch ext4 of `diskMiB` (no
 * journal: it is thrown away with the placement). Throws
 * INSUFFICIENT_LOCAL_DISK when either cannot be made.
 */
async function prepareSquashfsRoot(artifact: string, link: string, scratch: string, diskMiB: number): Promise<void> {
  try {
    linkSync(artifact, link);
  } catch {
    await run(["cp", "--sparse=always", "--reflink=auto", artifact, link]).catch((e: Error) => {
      throw new PlacementError("INSUFFICIENT_LOCAL_DISK", `cannot link or copy the squashfs root: ${e.message}`);
    });
  }
  try {
    const fd = openSync(scratch, "wx", 0o600);
    try {
      ftruncateSync(fd, diskMiB * 1024 * 1024);
    } finally {
      closeSync(fd);
    }
    await run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-E", "lazy_itable_init=1,root_owner=0:0", "-L", "bbscratch", scratch]);
  } catch (e) {
    throw new PlacementError("INSUFFICIENT_LOCAL_DISK", `cannot make the scratch disk: ${(e as Error).message}`);
  }
}

/** Prepare (ensure_present). Rolls back on failure; throws PlacementError (CLEANUP_FAILED if the rollback is incomplete). */
export async function preparePlacement(ctx: PlacementContext, ref: PlacementRef): Promise<void> {
  const p = paths(ctx, ref);
  try {
    const image = await ctx.resolveImage(ref.spec.imageDigest);
    const squashfs = image.manifest.rootfsFormat === "squashfs";
    // A squashfs root is shared and read-only: only an ext4 clone is charged to the placement's ephemeral disk.
    if (!squashfs && image.manifest.rootfs.sizeBytes > ref.spec.ephemeralDiskMiB * 1024 * 1024)
      throw new PlacementError("INSUFFICIENT_LOCAL_DISK", `root disk ${image.manifest.rootfs.sizeBytes} B exceeds ephemeralDiskMiB ${ref.spec.ephemeralDiskMiB}`);
    mkdirSync(p.logs, { recursive: true, mode: 0o700 });
    writeFileSync(p.metadata, JSON.stringify({ allocationId: ref.allocationId, placementId: ref.placementId, generation: ref.generation, imageDigest: ref.spec.imageDigest }) + "\n");
    if (squashfs) await prepareSquashfsRoot(join(image.dir, image.manifest.rootfs.path), p.rootSquashfs, p.scratch, ref.spec.ephemeralDiskMiB);
    else await run(["cp", "--sparse=always", "--reflink=auto", join(image.dir, image.manifest.rootfs.path), p.rootDisk]).catch((e: Error) => {
      throw new PlacementError("INSUFFICIENT_LOCAL_DISK", `cannot clone the root disk: ${e.message}`);
    });
    if ((await listPlacementNetworks()).includes(ref.dirName)) await destroyPlacementNetwork(ref.dirName); // a half-built leftover: rebuild with the current policy
    await prepareNetwork(ctx, ref.dirName, p.dir); // firewall loaded before any VMM can start
    const runtime: RuntimeFile = { nonce: randomBytes(32).toString("hex"), imageDigest: ref.spec.imageDigest, imageDir: image.dir, kernelArgs: image.manifest.kernelArgs };
    writeFileSync(p.runtime, JSON.stringify(runtime) + "\n", { mode: 0o600 });
  } catch (e) {
    const err = asPlacementError(e, "INTERNAL");
    const left = await stopPlacement(ctx, ref, null, null).catch((x: unknown) => [String(x)]);
    if (left.length) throw new PlacementError("CLEANUP_FAILED", `${err.message}; rollback left: ${left.join(", ")}`);
    throw err;
  }
}

/** Start (ensure_running): boots the VMM and completes the guest handshake. Returns the handle and the connected session. */
export async function startPlacement(
  ctx: PlacementContext,
  ref: PlacementRef,
  onStarted: (h: VmHandle) => void,
): Promise<{ handle: VmHandle; session: GuestSession }> {
  const p = paths(ctx, ref);
  const runtime = JSON.parse(readFileSync(p.runtime, "utf8")) as RuntimeFile;
  const image = await ctx.resolveImage(runtime.imageDigest);
  const identity: GuestIdentity = { allocationId: ref.allocationId, placementId: ref.placementId, generation: ref.generation, nonce: runtime.nonce };
  const spec: VmSpec = {
    instanceId: ref.dirName,
    dir: p.dir,
    vcpus: Math.max(1, Math.ceil(ref.spec.cpuMillis / 1000)),
    memoryMiB: ref.spec.memoryMiB,
    kernelPath: join(image.dir, image.manifest.kernel.path),
    ...(image.manifest.initrd ? { initrdPath: join(image.dir, image.manifest.initrd.path) } : {}),
    ...(image.manifest.rootfsFormat === "squashfs" ? { rootDiskPath: p.rootSquashfs, scratchDiskPath: p.scratch } : { rootDiskPath: p.rootDisk }),
    netns: ref.dirName,
    tapName: PLACEMENT_TAP_NAME,
    kernelArgs: [
      ...runtime.kernelArgs,
      `${GUEST_CMDLINE_KEYS.allocationId}=${identity.allocationId}`,
      `${GUEST_CMDLINE_KEYS.placementId}=${identity.placementId}`,
      `${GUEST_CMDLINE_KEYS.generation}=${identity.generation}`,
      ...networkKernelArgs(ctx, p.dir),
    ],
    // The nonce is the placement's secret: never on a command line other host users can read.
    privateKernelArgs: [`${GUEST_CMDLINE_KEYS.nonce}=${identity.nonce}`],
    consoleLogPath: p.console,
    controlSocketPath: p.control,
  };
  let handle: VmHandle;
  try {
    const cgroup = prepareCgroup(ctx, ref.dirName, p.dir, ref.spec); // limits exist before the VMM does
    handle = await ctx.driver.start(spec);
    onStarted(handle);
    await confineVmm(cgroup, handle.pid, ref.spec.ephemeralDiskMiB).catch(async (e: Error) => {
      await ctx.driver.stop(handle, 1_000).catch(() => {});
      throw e;
    });
  } catch (e) {
    throw asPlacementError(e, "VMM_START_FAILED");
  }
  const channel = await ctx.driver.connectControl(spec, 10_000).catch((e: Error) => {
    throw new PlacementError("VMM_START_FAILED", `control channel: ${e.message}`);
  });
  const session = new GuestSession(channel, identity);
  if (!(await session.waitReady(ctx.guestBootTimeoutMs))) {
    session.close();
    throw new PlacementError("GUEST_BOOT_TIMEOUT", `no matching GuestReady within ${ctx.guestBootTimeoutMs} ms`);
  }
  if (!(await session.ping(10_000))) {
    session.close();
    throw new PlacementError("GUEST_BOOT_TIMEOUT", "guest did not answer the ping");
  }
  return { handle, session };
}

/**
 * Reconnects to a VM that survived an agent restart. A running guest must
 * answer a ping; a guest that was still booting (`confirmIdentity`) must
 * send a GuestReady with the exact identity and nonce within `timeoutMs`.
 * Null if it does neither.
 */
export async function adoptPlacement(ctx: PlacementContext, ref: PlacementRef, confirmIdentity: boolean, timeoutMs: number): Promise<GuestSession | null> {
  const p = paths(ctx, ref);
  const runtime = JSON.parse(readFileSync(p.runtime, "utf8")) as RuntimeFile;
  const channel = await ctx.driver.connectControl({ controlSocketPath: p.control }, 5_000).catch(() => null);
  if (!channel) return null;
  const session = new GuestSession(channel, { allocationId: ref.allocationId, placementId: ref.placementId, generation: ref.generation, nonce: runtime.nonce });
  const ok = confirmIdentity ? await session.waitReady(timeoutMs, true) : await session.ping(10_000);
  if (ok) return session;
  session.close();
  return null;
}

/**
 * Stop (ensure_absent): asks the guest to shut down, stops the VMM, removes
 * the namespace, TAP, veth, nftables tables and cgroup (net/isolationOps.ts),
 * deletes disks, sockets, logs and the directory.
 * Every step is attempted; returns what remains (empty when absent).
 */
export async function stopPlacement(ctx: PlacementContext, ref: PlacementRef, handle: VmHandle | null, session: GuestSession | null): Promise<string[]> {
  const p = paths(ctx, ref);
  const left: string[] = [];
  if (session?.connected && handle) {
    session.shutdown();
    // The guest syncs and resets at once (reboot=t): poll finely so its exit is seen within ~10 ms.
    const deadline = performance.now() + GUEST_SHUTDOWN_WAIT_MS;
    while (performance.now() < deadline && (await ctx.driver.isAlive(handle))) await Bun.sleep(10);
  }
  session?.close();
  if (handle) {
    await ctx.driver.stop(handle, 10_000).catch((e: Error) => left.push(`vmm: ${e.message}`));
    if (await ctx.driver.isAlive(handle)) left.push(`vmm pid ${handle.pid}`);
  }
  left.push(...(await teardownIsolation(ctx, ref.dirName, p.dir).catch((e: Error) => [`isolation: ${e.message}`])));
  try {
    rmSync(p.dir, { recursive: true, force: true });
  } catch (e) {
    left.push(`dir: ${(e as Error).message}`);
  }
  if (existsSync(p.dir)) left.push(`dir ${p.dir}`);
  if ((await listPlacementNetworks().catch(() => [ref.dirName])).includes(ref.dirName)) left.push(`netns ${ref.dirName}`);
  return left;
}

/** Size in bytes of a file, or 0. */
export function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/**
 * Image resolver over a list of image directories: finds the directory whose
 * manifest has `digest`; when `trustedKeys` (base64 Ed25519 public keys) is
 * non-empty, refuses a manifest no trusted key signed (spec "Images"); then
 * verifies every artifact's size and SHA-256 (memoized by the verifier).
 * Throws PlacementError IMAGE_NOT_FOUND, IMAGE_DIGEST_MISMATCH or
 * IMAGE_SIGNATURE_INVALID.
 */
export function imageResolver(imageDirs: string[], trustedKeys?: string[]): (digest: string) => Promise<{ dir: string; manifest: ImageManifest }> {
  return async (digest) => {
    for (const dir of imageDirs) {
      let m: ImageManifest;
      try {
        m = JSON.parse(readFileSync(join(dir, MANIFEST_FILE_NAME), "utf8")) as ImageManifest;
        if (imageDigest(m) !== digest) continue;
      } catch {
        continue;
      }
      if (trustedKeys?.length) {
        const { verifyManifestSignature } = await import("../image/signing.ts");
        try {
          verifyManifestSignature(m, trustedKeys);
        } catch (e) {
          const code = (e as { code?: unknown }).code === "IMAGE_DIGEST_MISMATCH" ? "IMAGE_DIGEST_MISMATCH" : "IMAGE_SIGNATURE_INVALID";
          throw new PlacementError(code, `image ${digest} in ${dir}: ${(e as Error).message}`);
        }
      }
      try {
        return { dir, manifest: await verifyImage(dir, digest) };
      } catch (e) {
        throw asPlacementError(e, "IMAGE_DIGEST_MISMATCH");
      }
    }
    throw new PlacementError("IMAGE_NOT_FOUND", `no image ${digest} in ${imageDirs.join(", ") || "(no image directories)"}`);
  };
}
