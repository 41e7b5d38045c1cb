/**
 * The image port: what a placement's Prepare and Start need from images
 * (spec "Prepare (ensure_present)", "Images"): a verified image by digest,
 * the digests already cached (reported in heartbeats), the placement's root
 * disk (a private ext4 clone, or a link to a shared squashfs plus a scratch
 * disk), and eviction of unused images. HostImages (hostImages.ts) is the real adapter over the
 * verified cache or configured image directories; FakeImages
 * (fakeImages.ts) serves tests and the simulation.
 * Must never: return an image that was not verified against its digest.
 */
import type { ImageManifest } from "../../protocol/image.ts";

/** A verified image: its directory (manifest.json plus artifacts named as the manifest says) and manifest. */
export interface ResolvedImageDir {
  dir: string;
  manifest: ImageManifest;
}

/** See the module header. */
export interface ImagePort {
  /** The verified image with `digest`. Throws with a stable code: IMAGE_NOT_FOUND, IMAGE_DIGEST_MISMATCH or IMAGE_SIGNATURE_INVALID. */
  resolve(digest: string): Promise<ResolvedImageDir>;
  /** Digests (`sha256:<hex>`) of verified images held locally; [] when there is no cache. */
  cachedDigests(): Promise<string[]>;
  /** Clones ext4 root disk `src` to the placement's `dst` (absent beforehand), reflink where possible. Throws INSUFFICIENT_LOCAL_DISK. */
  cloneRootDisk(src: string, dst: string): Promise<void>;
  /** Links the shared, read-only squashfs root `src` into the placement as `dst` (a copy only across file systems). Throws INSUFFICIENT_LOCAL_DISK. */
  linkSharedRoot(src: string, dst: string): Promise<void>;
  /** Makes the placement's sparse scratch ext4 of `sizeMiB` at `path` (absent beforehand). Throws INSUFFICIENT_LOCAL_DISK. */
  makeScratchDisk(path: string, sizeMiB: number): Promise<void>;
  /** Evicts unused cached images past the cache's size bound, never one in `inUse` (digests); no-op without a cache. */
  maintain(inUse: ReadonlySet<string>): Promise<void>;
}
