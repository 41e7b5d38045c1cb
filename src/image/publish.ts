/**
 * `bb image publish`: lays signed image directories out for any static web
 * server, in the layout the agent's image source reads (spec "Prepare
 * (ensure_present)": "the configured manifest base URL"):
 * `BASE/<digest hex>/manifest.json` and `BASE/<digest hex>/<artifact>`.
 *
 * Each image is verified first (digest, every artifact's size and SHA-256)
 * and appears by one rename, so a server never serves half an image.
 * Artifacts are hard links when BASE is on the same file system, copies
 * otherwise. Must never: publish an image that does not verify, or replace
 * an already published digest with other bytes.
 */
import { copyFile, link, mkdir, rename, rm, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { type ImageManifest, MANIFEST_FILE_NAME, imageDigest } from "../protocol/image.ts";
import { readManifestFile } from "./keyFile.ts";
import { verifyImage } from "./verify.ts";

/** One published image. */
export interface PublishedImage {
  /** `sha256:<hex>`. */
  digest: string;
  /** `BASE/<hex>`. */
  dir: string;
  /** True when that digest was already published (nothing was written). */
  existed: boolean;
}

function artifactsOf(m: ImageManifest) {
  return [m.kernel, m.rootfs, ...(m.initrd ? [m.initrd] : [])];
}

/**
 * Publishes every image directory in `dirs` under `base` (created). Throws
 * IMAGE_DIGEST_MISMATCH / IMAGE_NOT_FOUND when an image does not verify,
 * before writing anything for it.
 */
export async function publishImages(dirs: string[], base: string): Promise<PublishedImage[]> {
  const out: PublishedImage[] = [];
  const root = resolve(base);
  await mkdir(root, { recursive: true, mode: 0o755 });
  for (const d of dirs) {
    const src = resolve(d);
    const digest = imageDigest(readManifestFile(src));
    const manifest = await verifyImage(src, digest);
    const hex = digest.slice("sha256:".length);
    const dst = join(root, hex);
    if (await stat(join(dst, MANIFEST_FILE_NAME)).catch(() => null)) {
      await verifyImage(dst, digest); // the same digest names the same bytes
      out.push({ digest, dir: dst, existed: true });
      continue;
    }
    const tmp = join(root, `.publishing-${hex}-${process.pid}`);
    await rm(tmp, { recursive: true, force: true });
    await mkdir(tmp, { mode: 0o755 });
    try {
      for (const a of [...artifactsOf(manifest).map((x) => x.path), MANIFEST_FILE_NAME]) {
        await link(join(src, a), join(tmp, a)).catch(() => copyFile(join(src, a), join(tmp, a)));
      }
      await rm(dst, { recursive: true, force: true });
      await rename(tmp, dst);
    } catch (e) {
      await rm(tmp, { recursive: true, force: true });
      throw e;
    }
    out.push({ digest, dir: dst, existed: false });
  }
  return out;
}
