/**
 * `bb image build`: converts an OCI image (an OCI layout directory or a
 * docker-archive tarball, no registry) into a signed Beachball image with a
 * squashfs root.
 *
 * Steps (spec "Images", "Boot OCI images"): read the input, verifying its
 * documents (layout.ts); apply the layers in order into an in-memory tree
 * (rootTree.ts), each blob's digest and each layer's diff ID checked in
 * the same pass that parses it (one read of each blob); add the guest binary under
 * `/.beachball/` and `/etc/beachball/workload.json` from the image config;
 * write the tree as one canonical tar stream straight into `mksquashfs
 * -tar` (squashfsFromTar.ts; so no layer path is ever created on the build
 * host, and mksquashfs compresses while the tree is written); file bodies
 * are read by offset from the uncompressed layer blob (refused if it
 * changed since it was hashed) or from a private uncompressed copy of a
 * compressed one, made while it was hashed;
 * build the initramfs (ociInitrd.ts); write a schema-2 manifest with its
 * `source` and sign it. The output directory appears by one rename, only
 * when everything succeeded.
 *
 * Deterministic: the same input, guest binary, kernel package and busybox
 * give the same artifact digests and the same image digest. Files keep
 * their layer times; the root directory, the file system and the files
 * Beachball adds take the image config's `created` time, never the clock
 * (SOURCE_DATE_EPOCH: mksquashfs 4.5 ignores -root-time with -tar).
 * Must never: leave a partial output directory, or sign an image whose
 * blobs did not verify (every blob is read to its end, where its digest is
 * checked, before the squashfs is written).
 */
import { SUPPORTED_ARCHITECTURE } from "../../protocol/platform.ts";
import { mkdir, open, rename, rm, stat, writeFile } from "node:fs/promises";
import { createHash } from "node:crypto";
import { Readable } from "node:stream";
import { createGunzip, createZstdDecompress } from "node:zlib";
import { dirname, join, resolve } from "node:path";
import { type ImageManifest, MANIFEST_FILE_NAME, imageDigest } from "../../protocol/image.ts";
import { WORKLOAD_CONFIG_PATH, type WorkloadConfig } from "../../protocol/guest.ts";
import { imageError } from "../errors.ts";
import { signManifest } from "../signing.ts";
import { sha256File } from "../verify.ts";
import { DEV_GUEST_BOOTSTRAP_VERSION } from "../devBuild.ts";
import { SQUASHFS_ROOT_MODULES, ensureDevKernel } from "../devKernel.ts";
import {
  type LayerInput,
  type OciImageConfig,
  type OciImageInput,
  fileIdentity,
  readDockerArchive,
  readOciLayout,
} from "./layout.ts";
import { RootTree } from "./rootTree.ts";
import { showName } from "./byteName.ts";
import { squashfsCanStoreXattr } from "./squashfsXattrs.ts";
import { TAR_END, readTar } from "./tar.ts";
import { GUEST_BINARY_IN_IMAGE, GUEST_DIR_IN_IMAGE, buildSquashfsInitrd } from "./ociInitrd.ts";
import { squashfsFromTar } from "./squashfsFromTar.ts";
import { hashFileOffThread } from "./blobHash.ts";

/** Largest uncompressed layer accepted, bytes (64 GiB). */
export const MAX_LAYER_BYTES = 64 * 2 ** 30;
/** squashfs compressor: zstd decompresses quickly even under TCG. */
export const SQUASHFS_COMPRESSOR = "zstd";
/** Default zstd level (mksquashfs's own default); lower builds faster, decompression speed barely changes. */
export const DEFAULT_SQUASHFS_ZSTD_LEVEL = 15;
/** Artifact file names of a converted image. */
export const OCI_IMAGE_FILES = { kernel: "vmlinux", rootfs: "rootfs.squashfs", initrd: "initrd.cpio" } as const;
/** Most dropped-metadata items listed one by one in a build result and its log (the count is always whole). */
export const MAX_DROPPED_LISTED = 50;

/** What to convert. */
export type OciBuildInput = { kind: "oci-layout"; dir: string } | { kind: "docker-archive"; path: string };

/** Options of buildOciImage. Paths may be relative to the working directory. */
export interface OciBuildOptions {
  input: OciBuildInput;
  /** Manifest to pick: an `org.opencontainers.image.ref.name` annotation or a docker RepoTag. */
  ref?: string;
  /** Image directory to create (replaced when it exists). */
  outDir: string;
  /** Kernel download cache (shared with the dev image). */
  cacheDir: string;
  /** The guest binary (`bb` or the guest-only build) put under /.beachball/. */
  guestBinaryPath: string;
  /** Operator's Ed25519 private key (base64 seed) that signs the manifest. */
  privateKey: string;
  /** Static busybox for the initramfs (default /bin/busybox). */
  busyboxPath?: string;
  /** zstd level of the squashfs, 1–22 (default 15). */
  compressionLevel?: number;
  /** Progress lines (default: silent). */
  log?: (msg: string) => void;
}

/** Result of buildOciImage. */
export interface OciBuildResult {
  manifest: ImageManifest;
  /** `sha256:<hex>`. */
  digest: string;
  /** Absolute output directory. */
  dir: string;
  /** Entries in the merged root, and the squashfs size in bytes. */
  stats: { entries: number; rootfsBytes: number; layers: number };
  /**
   * Metadata the squashfs cannot hold, left out of the image: extended
   * attributes outside squashfsXattrs.ts's namespaces (e.g.
   * `system.posix_acl_access`) and PAX ACL records. `count` is the total;
   * `items` the first MAX_DROPPED_LISTED as `<path>: <name>` (names quoted
   * as in errors). Empty when nothing was left out.
   */
  dropped: { count: number; items: string[] };
}

/** The workload description for an image config (Entrypoint, Cmd, Env, WorkingDir, User). */
export function workloadFromConfig(c: OciImageConfig): WorkloadConfig {
  const cfg = c.config ?? {};
  const env = [...(cfg.Env ?? [])];
  if (!env.some((e) => e.startsWith("PATH=")))
    env.unshift("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  const w: WorkloadConfig = {
    entrypoint: [...(cfg.Entrypoint ?? [])],
    cmd: [...(cfg.Cmd ?? [])],
    env,
    workingDir: cfg.WorkingDir ?? "",
    user: cfg.User ?? "",
  };
  if (w.entrypoint.length + w.cmd.length === 0) w.cmd = ["/bin/sh"];
  return w;
}

/** `createdAt` for the manifest: the config's `created` normalized, or the epoch when absent or invalid. */
export function createdAtOf(c: OciImageConfig): string {
  const t = c.created ? Date.parse(c.created) : NaN;
  return new Date(Number.isFinite(t) && t >= 0 && t < 2 ** 32 * 1000 ? t : 0).toISOString();
}

/** Decompressed bytes of a layer. */
function decompressed(layer: LayerInput): AsyncIterable<Uint8Array> {
  if (layer.compression === "none") return layer.open();
  const d = layer.compression === "gzip" ? createGunzip() : createZstdDecompress();
  const src = Readable.from(layer.open());
  src.on("error", (e) => d.destroy(e));
  src.pipe(d);
  return (async function* () {
    try {
      for await (const c of d as AsyncIterable<Buffer>) yield c;
    } catch (e) {
      // zlib's own errors (Z_DATA_ERROR, ERR_…) mean bad compressed bytes; the blob stream's IMAGE_… codes pass as they are.
      const code = (e as { code?: string }).code;
      if (code && !code.startsWith("IMAGE_"))
        throw imageError(
          "IMAGE_LAYER_INVALID",
          `layer ${layer.digest} does not decompress (${layer.compression}): ${(e as Error).message}`,
        );
      throw e;
    }
  })();
}

/** Bytes gathered before one write to a layer's private copy. */
const LAYER_COPY_BATCH_BYTES = 1 << 20;

/**
 * Counts what passes through (bounded by MAX_LAYER_BYTES), hashes it when
 * `hash` is set and, unless `copyPath` is null, appends it to that private
 * file, so file bodies are later read from there by offset. With null (an
 * uncompressed blob) bodies are read from the blob, whose identity is
 * checked unchanged once they were read (layout.ts fileIdentity).
 */
function hashingCopy(
  src: AsyncIterable<Uint8Array>,
  out: { hash: ReturnType<typeof createHash>; size: number },
  copyPath: string | null,
  hash: boolean,
): AsyncIterable<Uint8Array> {
  return (async function* () {
    const fh = copyPath === null ? null : await open(copyPath, "wx", 0o600);
    const parts: Uint8Array[] = [];
    let buffered = 0;
    const flush = async () => {
      if (buffered === 0 || !fh) return;
      await fh.write(parts.length === 1 ? parts[0]! : Buffer.concat(parts, buffered));
      parts.length = 0;
      buffered = 0;
    };
    try {
      for await (const c of src) {
        out.size += c.length;
        if (out.size > MAX_LAYER_BYTES)
          throw imageError("IMAGE_LAYER_INVALID", `a layer is larger than ${MAX_LAYER_BYTES} bytes uncompressed`);
        if (hash) out.hash.update(c);
        if (fh) {
          parts.push(c);
          buffered += c.length;
          if (buffered >= LAYER_COPY_BATCH_BYTES) await flush();
        }
        yield c;
      }
      await flush();
    } finally {
      await fh?.close();
    }
  })();
}

async function readInput(opts: OciBuildOptions, work: string): Promise<OciImageInput> {
  if (opts.input.kind === "oci-layout") return readOciLayout(resolve(opts.input.dir), opts.ref);
  return readDockerArchive(resolve(opts.input.path), join(work, "archive"), opts.ref);
}

/** Path, size and SHA-256 (hex) of artifact `name` in `dir`, for the manifest; hashed on this thread. */
async function artifact(dir: string, name: string): Promise<ImageManifest["rootfs"]> {
  return { path: name, sizeBytes: (await stat(join(dir, name))).size, sha256: await sha256File(join(dir, name)) };
}

/** As artifact, hashed in the hashing worker (blobHash.ts), so it runs beside this thread's work. */
async function artifactOffThread(dir: string, name: string): Promise<ImageManifest["rootfs"]> {
  const { hex, size } = await hashFileOffThread(join(dir, name), Number.MAX_SAFE_INTEGER);
  return { path: name, sizeBytes: size, sha256: hex };
}

/**
 * Applies one layer's tar stream to the tree. When reading fails before the
 * stream's end (where a layout blob's digest is checked, LayerInput.open),
 * the blob is hashed again: a blob that is not its digest's is refused
 * IMAGE_BLOB_DIGEST_MISMATCH, whatever its bytes broke first.
 */
async function applyVerified(layer: LayerInput, apply: () => Promise<void>): Promise<void> {
  try {
    await apply();
  } catch (e) {
    if (layer.verify && (e as { code?: string }).code !== "IMAGE_BLOB_DIGEST_MISMATCH") await layer.verify();
    throw e;
  }
}

/**
 * Converts the OCI image to a signed squashfs image in `opts.outDir` (see
 * the module header). Throws the image build codes of
 * src/protocol/errors.ts IMAGE_BUILD_ERROR_CODES (IMAGE_SOURCE_INVALID,
 * IMAGE_BLOB_DIGEST_MISMATCH, IMAGE_LAYER_PATH_ESCAPE, IMAGE_LAYER_INVALID,
 * IMAGE_LAYER_UNSUPPORTED) for a bad input, and plain Errors when a tool
 * (mksquashfs, ldd, apt for the kernel) fails. Nothing is left at
 * `outDir` (or beside it) when it throws.
 */
export async function buildOciImage(opts: OciBuildOptions): Promise<OciBuildResult> {
  const log = opts.log ?? (() => {});
  const outDir = resolve(opts.outDir);
  const work = `${outDir}.building-${process.pid}`;
  await rm(work, { recursive: true, force: true });
  await mkdir(join(work, "bodies"), { recursive: true, mode: 0o700 });
  // Digest checks of layer blobs running in workers (see the layer loop), each settled before the build returns.
  const checks: Promise<void>[] = [];
  let bootParts: Promise<void> | null = null;
  try {
    const input = await readInput(opts, work);
    log(`${input.layers.length} layer(s) found; manifest ${input.manifestDigest}`);
    const guest = resolve(opts.guestBinaryPath);
    // The kernel (an apt query, a download the first time) and the initramfs need nothing from the layers:
    // they are made while the layers are applied and the squashfs is written.
    // Both are written into the build directory and hashed there (what is hashed is what is published) once the
    // squashfs is written, beside its own hash: mksquashfs has both cores until then, one hash needs only one.
    bootParts = (async () => {
      const kernel = await ensureDevKernel(opts.cacheDir, log);
      log("building the initramfs");
      const initrd = await buildSquashfsInitrd({
        busyboxPath: opts.busyboxPath ?? "/bin/busybox",
        modulesDir: kernel.modulesDir,
        modules: SQUASHFS_ROOT_MODULES,
        guestBinaryPath: guest,
      });
      await Bun.write(join(work, OCI_IMAGE_FILES.kernel), Bun.file(kernel.vmlinuxPath));
      await writeFile(join(work, OCI_IMAGE_FILES.initrd), initrd, { mode: 0o644 });
    })();
    bootParts.catch(() => {}); // awaited below (or settled in the catch); never an unhandled rejection meanwhile
    const tree = new RootTree();
    const unchanged: { path: string; id: string }[] = [];
    for (const [i, layer] of input.layers.entries()) {
      const seen = { hash: createHash("sha256"), size: 0 };
      // Bodies stay where the uncompressed layer bytes are (the tar reader skips them): in the blob itself
      // when it is not compressed, else in a private copy made while hashing.
      const direct = layer.compression === "none";
      const bodies = direct ? layer.path : join(work, "bodies", `layer-${i}.tar`);
      const stage = async (_chunks: AsyncIterable<Uint8Array>, at: { offset: number; size: number }) => ({
        path: bodies,
        offset: at.offset,
        size: at.size,
      });
      if (direct) {
        // An uncompressed blob is its own diff: its digest (checked by its stream while it is parsed here) must be
        // the diff ID. Its bytes are hashed while the file has `identity`, checked unchanged once the squashfs is written.
        if (layer.digest !== layer.diffId)
          throw imageError(
            "IMAGE_BLOB_DIGEST_MISMATCH",
            `layer ${i} (${layer.digest}) is uncompressed, so its diff ID ${layer.diffId} must be its digest`,
          );
        unchanged.push({ path: layer.path, id: layer.identity });
        if (layer.openSkipping && layer.verify) {
          // Hashed in a worker while only its headers are read here (bodies are jumped over); awaited before
          // anything is signed, and first when the build fails (a corrupt blob is a mismatch, whatever it broke).
          const check = layer.verify();
          check.catch(() => {});
          checks.push(check);
          seen.size = (await stat(layer.path)).size;
          if (seen.size > MAX_LAYER_BYTES)
            throw imageError("IMAGE_LAYER_INVALID", `a layer is larger than ${MAX_LAYER_BYTES} bytes uncompressed`);
          await tree.applyLayer(readTar(layer.openSkipping()), stage);
        } else {
          await applyVerified(layer, () =>
            tree.applyLayer(readTar(hashingCopy(layer.open(), seen, null, false)), stage),
          );
        }
      } else {
        await applyVerified(layer, () =>
          tree.applyLayer(readTar(hashingCopy(decompressed(layer), seen, bodies, true)), stage),
        );
        const diffId = `sha256:${seen.hash.digest("hex")}`;
        if (diffId !== layer.diffId)
          throw imageError(
            "IMAGE_BLOB_DIGEST_MISMATCH",
            `layer ${i} (${layer.digest}) unpacks to ${diffId}, not its diff ID ${layer.diffId}`,
          );
      }
      log(`layer ${i}: ${seen.size} bytes applied (${tree.size} entries)`);
    }
    if (tree.has(GUEST_DIR_IN_IMAGE))
      throw imageError(
        "IMAGE_LAYER_UNSUPPORTED",
        `the image already has /${GUEST_DIR_IN_IMAGE}, which Beachball reserves for its guest`,
      );
    const createdAt = createdAtOf(input.config);
    const mtime = Math.floor(Date.parse(createdAt) / 1000);
    const workloadPath = join(work, "workload.json");
    await writeFile(workloadPath, JSON.stringify(workloadFromConfig(input.config), null, 2) + "\n", { mode: 0o644 });
    tree.addFile(
      WORKLOAD_CONFIG_PATH.slice(1),
      { path: workloadPath, offset: 0, size: (await stat(workloadPath)).size },
      { mode: 0o644, mtime },
    );
    tree.addFile(
      GUEST_BINARY_IN_IMAGE,
      { path: guest, offset: 0, size: (await stat(guest)).size },
      { mode: 0o755, mtime },
    );

    log("writing the merged root into mksquashfs");
    const dropped = { count: 0, items: [] as string[] };
    await squashfsFromTar(
      join(work, OCI_IMAGE_FILES.rootfs),
      {
        compressor: SQUASHFS_COMPRESSOR,
        level: opts.compressionLevel ?? DEFAULT_SQUASHFS_ZSTD_LEVEL,
        root: tree.rootMeta,
        sourceDateEpoch: mtime,
      },
      async (sink) => {
        await tree.write(
          (c) => sink.write(c),
          (b) => sink.copyBody(b),
          {
            keep: squashfsCanStoreXattr,
            dropped: (path, name) => {
              if (++dropped.count <= MAX_DROPPED_LISTED)
                dropped.items.push(`${showName(`/${path}`)}: ${showName(name)}`);
            },
          },
        );
        await sink.write(TAR_END);
      },
    );
    // The bytes read again for the squashfs must be the bytes hashed: an input blob that changed since is refused.
    for (const u of unchanged) {
      if ((await fileIdentity(u.path)) !== u.id)
        throw imageError("IMAGE_BLOB_DIGEST_MISMATCH", `layer blob ${u.path} changed during the build`);
    }
    await rm(join(work, "bodies"), { recursive: true, force: true });
    await rm(join(work, "archive"), { recursive: true, force: true });

    for (const c of checks) await c;
    log("squashfs written");
    await bootParts;
    // The squashfs is hashed in the hashing worker while this thread hashes the kernel and the initramfs.
    const [rootfs, kernel, initrd] = await Promise.all([
      artifactOffThread(work, OCI_IMAGE_FILES.rootfs),
      artifact(work, OCI_IMAGE_FILES.kernel),
      artifact(work, OCI_IMAGE_FILES.initrd),
    ]);

    const unsigned: ImageManifest = {
      schemaVersion: 2,
      architecture: SUPPORTED_ARCHITECTURE,
      kernel,
      rootfs,
      rootfsFormat: "squashfs",
      initrd,
      kernelArgs: [],
      agentProtocolRange: "1",
      guestBootstrapVersion: DEV_GUEST_BOOTSTRAP_VERSION,
      source: {
        kind: "oci",
        reference: input.reference,
        manifestDigest: input.manifestDigest,
        configDigest: input.configDigest,
        platform: input.platform,
      },
      createdAt,
      signature: "",
    };
    const manifest = signManifest(unsigned, opts.privateKey);
    await writeFile(join(work, MANIFEST_FILE_NAME), JSON.stringify(manifest, null, 2) + "\n", { mode: 0o644 });
    const stats = { entries: tree.size, rootfsBytes: manifest.rootfs.sizeBytes, layers: input.layers.length };
    await rm(outDir, { recursive: true, force: true });
    await mkdir(dirname(outDir), { recursive: true });
    await rename(work, outDir);
    const digest = imageDigest(manifest);
    log(`built ${digest} in ${outDir}`);
    return { manifest, digest, dir: outDir, stats, dropped };
  } catch (e) {
    // Nothing of this build keeps running after it failed: let the kernel/initramfs work settle first.
    if (bootParts)
      await bootParts.then(
        () => {},
        () => {},
      );
    const mismatch = (await Promise.allSettled(checks)).find((r) => r.status === "rejected");
    await rm(work, { recursive: true, force: true });
    throw mismatch ? (mismatch as PromiseRejectedResult).reason : e;
  }
}
