/**
 * HostImages, the real image port (imagePort.ts): images come either from
 * the verified content-addressed cache fed by a signed image source
 * (cache.ts), or from configured image directories verified in place
 * (imageResolver); ext4 root disks are cloned with cloneRootDisk (reflink,
 * else sparse copy), squashfs roots are hard links to the shared artifact
 * beside a freshly formatted sparse scratch ext4. Spec "Prepare
 * (ensure_present)", "Images".
 * Must never: hand out an image whose signature (when keys are configured),
 * digest, sizes or hashes were not checked.
 */
import { closeSync, ftruncateSync, linkSync, openSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { imageDigest, MANIFEST_FILE_NAME, type ImageManifest } from "../../protocol/image.ts";
import { verifyImage } from "../../image/verify.ts";
import { AgentError } from "../errors.ts";
import { DEFAULT_IMAGE_CACHE_MAX_BYTES, ImageCache } from "./cache.ts";
import { cloneRootDisk } from "./cloneDisk.ts";
import type { ImagePort, ResolvedImageDir } from "./imagePort.ts";

/**
 * Image resolver over a list of image directories: finds the directory whose
 * manifest has `digest`; when `trustedKeys` (base64 Ed25519 public keys) is
 * non-empty, refuses a manifest no trusted key signed (spec "Images"); then
 * verifies every artifact's size and SHA-256 (memoized by the verifier).
 * Throws AgentError IMAGE_NOT_FOUND, IMAGE_DIGEST_MISMATCH or
 * IMAGE_SIGNATURE_INVALID (the image library's ImageError as `cause`).
 */
export function imageResolver(
  imageDirs: string[],
  trustedKeys?: string[],
): (digest: string) => Promise<ResolvedImageDir> {
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
        const { verifyManifestSignature } = await import("../../image/signing.ts");
        try {
          verifyManifestSignature(m, trustedKeys);
        } catch (e) {
          throw AgentError.from(e, "IMAGE_SIGNATURE_INVALID", "image");
        }
      }
      try {
        return { dir, manifest: await verifyImage(dir, digest) };
      } catch (e) {
        throw AgentError.from(e, "IMAGE_DIGEST_MISMATCH", "image");
      }
    }
    throw new AgentError(
      "IMAGE_NOT_FOUND",
      `no image ${digest} in ${imageDirs.join(", ") || "(no image directories)"}`,
      { subsystem: "image" },
    );
  };
}

/** Where HostImages finds images. */
export interface HostImagesOptions {
  /** Directories holding one image each (used when `source` is absent). */
  imageDirs: string[];
  /** Base64 Ed25519 public keys whose signatures are trusted (empty: unsigned dev images accepted from imageDirs). */
  trustedKeys: string[];
  /** Signed image source (dir or file:// base); when set, images go through the verified cache in `cacheDir`. */
  source?: string;
  /** The cache directory (`<dataDir>/images`). */
  cacheDir: string;
  /** Bound on the cache's shared artifact bytes (default DEFAULT_IMAGE_CACHE_MAX_BYTES). */
  cacheMaxBytes?: number;
  /** Told when an interrupted download resumes (for the agent log). */
  onRetry?: (info: { name: string; attempt: number; haveBytes: number; error: string }) => void;
  /** Told when eviction fails (it is retried on the next pass). */
  onEvictionError?: (e: Error) => void;
}

async function run(cmd: string[]): Promise<void> {
  const p = Bun.spawn(cmd, { stdout: "ignore", stderr: "pipe" });
  const err = await new Response(p.stderr).text();
  if ((await p.exited) !== 0) throw new Error(`${cmd[0]} failed: ${err.trim().slice(0, 300)}`);
}

/** The real image port. */
export class HostImages implements ImagePort {
  private readonly cache: ImageCache | null;
  private readonly fromDirs: (digest: string) => Promise<ResolvedImageDir>;

  constructor(private readonly opts: HostImagesOptions) {
    this.cache = opts.source
      ? new ImageCache(opts.cacheDir, opts.trustedKeys, opts.onRetry ? { onRetry: opts.onRetry } : {})
      : null;
    this.fromDirs = imageResolver(opts.imageDirs, opts.trustedKeys);
  }

  /** See ImagePort.resolve. */
  resolve(digest: string): Promise<ResolvedImageDir> {
    if (!this.cache) return this.fromDirs(digest);
    return this.cache
      .resolve(digest, this.opts.source!)
      .catch((e: unknown) => Promise.reject(AgentError.from(e, "IMAGE_DIGEST_MISMATCH", "image")));
  }

  /** See ImagePort.cachedDigests. */
  async cachedDigests(): Promise<string[]> {
    return this.cache ? this.cache.cachedDigests() : [];
  }

  /** See ImagePort.maintain: evicts least recently used images past cacheMaxBytes, never one in use. */
  async maintain(inUse: ReadonlySet<string>): Promise<void> {
    if (!this.cache) return;
    await this.cache
      .evict(this.opts.cacheMaxBytes ?? DEFAULT_IMAGE_CACHE_MAX_BYTES, inUse)
      .catch((e: Error) => this.opts.onEvictionError?.(e));
  }

  /** See ImagePort.linkSharedRoot. */
  async linkSharedRoot(src: string, dst: string): Promise<void> {
    try {
      linkSync(src, dst);
    } catch {
      await run(["cp", "--sparse=always", "--reflink=auto", src, dst]).catch((e: Error) => {
        throw new AgentError("INSUFFICIENT_LOCAL_DISK", "cannot link or copy the squashfs root", {
          subsystem: "image",
          cause: e,
        });
      });
    }
  }

  /** See ImagePort.makeScratchDisk: sparse, no journal (it is thrown away with the placement). */
  async makeScratchDisk(path: string, sizeMiB: number): Promise<void> {
    try {
      const fd = openSync(path, "wx", 0o600);
      try {
        ftruncateSync(fd, sizeMiB * 1024 * 1024);
      } finally {
        closeSync(fd);
      }
      await run([
        "mkfs.ext4",
        "-q",
        "-F",
        "-O",
        "^has_journal",
        "-E",
        "lazy_itable_init=1,root_owner=0:0",
        "-L",
        "bbscratch",
        path,
      ]);
    } catch (e) {
      throw new AgentError("INSUFFICIENT_LOCAL_DISK", "cannot make the scratch disk", { subsystem: "image", cause: e });
    }
  }

  /** See ImagePort.cloneRootDisk. */
  async cloneRootDisk(src: string, dst: string): Promise<void> {
    await cloneRootDisk(src, dst).catch((e: Error) => {
      throw new AgentError("INSUFFICIENT_LOCAL_DISK", "cannot clone the root disk", { subsystem: "image", cause: e });
    });
  }
}
