/**
 * Local image verification: a directory holding `manifest.json` and its
 * artifacts is trusted only if the manifest hashes to the expected digest
 * and every artifact has its exact size and SHA-256.
 *
 * Implements the verification half of the spec's "Prepare (ensure_present)"
 * and "Images" for image directories; signatures are checked by signing.ts
 * and the downloading cache lives in cache.ts.
 * Must never: follow an artifact path outside the image directory, or return
 * a manifest whose artifacts were not hashed since they last changed.
 */
import { open, stat } from "node:fs/promises";
import { join } from "node:path";
import {
  type Artifact,
  type ImageManifest,
  MANIFEST_FILE_NAME,
  imageDigest,
  manifestShapeProblem,
} from "../protocol/image.ts";

import { imageError } from "./errors.ts";

export { type ImageErrorCode, imageError } from "./errors.ts";

/** Successful verifications, keyed by directory; valid while every file's stat key is unchanged. */
const verified = new Map<string, { digest: string; statKey: string; manifest: ImageManifest }>();
/** Bound of the memo (images per host are few). */
const MAX_MEMO_ENTRIES = 256;

/** Bytes read at a time by sha256File (large reads: half the CPU of a file stream's small chunks). */
const SHA256_FILE_READ_BYTES = 1 << 20;

/** Reads a file through SHA-256 (SHA256_FILE_READ_BYTES at a time); returns lowercase hex. Throws on I/O errors. */
export async function sha256File(path: string): Promise<string> {
  const hasher = new Bun.CryptoHasher("sha256");
  const fh = await open(path, "r");
  try {
    const buf = Buffer.allocUnsafe(SHA256_FILE_READ_BYTES);
    for (;;) {
      const { bytesRead } = await fh.read(buf, 0, buf.length, null);
      if (bytesRead === 0) break;
      hasher.update(buf.subarray(0, bytesRead));
    }
  } finally {
    await fh.close();
  }
  return hasher.digest("hex");
}

/** `path:size:mtimeMs:ino` for each file, or throws IMAGE_NOT_FOUND. */
async function statKey(paths: string[]): Promise<string> {
  const parts: string[] = [];
  for (const p of paths) {
    const s = await stat(p).catch(() => null);
    if (!s || !s.isFile()) throw imageError("IMAGE_NOT_FOUND", `image file missing: ${p}`);
    parts.push(`${p}:${s.size}:${s.mtimeMs}:${s.ino}`);
  }
  return parts.join("|");
}

function artifactsOf(m: ImageManifest): Artifact[] {
  return [m.kernel, m.rootfs, ...(m.initrd ? [m.initrd] : [])];
}

/** Reads and shape-checks manifest.json; IMAGE_NOT_FOUND if absent, IMAGE_DIGEST_MISMATCH if malformed. */
async function readManifest(dir: string): Promise<ImageManifest> {
  const file = Bun.file(join(dir, MANIFEST_FILE_NAME));
  if (!(await file.exists())) throw imageError("IMAGE_NOT_FOUND", `no ${MANIFEST_FILE_NAME} in ${dir}`);
  let m: unknown;
  try {
    m = await file.json();
  } catch {
    throw imageError("IMAGE_DIGEST_MISMATCH", `${MANIFEST_FILE_NAME} in ${dir} is not valid JSON`);
  }
  const problem = manifestShapeProblem(m);
  if (problem) throw imageError("IMAGE_DIGEST_MISMATCH", `${MANIFEST_FILE_NAME} in ${dir} is malformed: ${problem}`);
  return m as ImageManifest;
}

/**
 * Verifies the image in `dir` against `expectedDigest` (`sha256:<hex>`):
 * the manifest's digest (spec "Images") and each artifact's exact size and
 * SHA-256, hashed as a stream. Successful results are memoized per
 * (path, size, mtimeMs, inode) of the manifest and every artifact, so a
 * repeated call on unchanged files does not rehash them.
 *
 * Throws an Error with `code` "IMAGE_NOT_FOUND" (directory, manifest or an
 * artifact missing) or "IMAGE_DIGEST_MISMATCH" (malformed manifest, digest,
 * size or hash differs).
 */
export async function verifyImage(dir: string, expectedDigest: string): Promise<ImageManifest> {
  const dirStat = await stat(dir).catch(() => null);
  if (!dirStat?.isDirectory()) throw imageError("IMAGE_NOT_FOUND", `image directory missing: ${dir}`);
  const manifest = await readManifest(dir);
  const digest = imageDigest(manifest);
  if (digest !== expectedDigest) {
    throw imageError("IMAGE_DIGEST_MISMATCH", `manifest digest ${digest} in ${dir} != expected ${expectedDigest}`);
  }
  const files = [join(dir, MANIFEST_FILE_NAME), ...artifactsOf(manifest).map((a) => join(dir, a.path))];
  const key = await statKey(files);
  const memo = verified.get(dir);
  if (memo && memo.digest === digest && memo.statKey === key) return memo.manifest;
  for (const a of artifactsOf(manifest)) {
    const p = join(dir, a.path);
    const size = Bun.file(p).size;
    if (size !== a.sizeBytes) throw imageError("IMAGE_DIGEST_MISMATCH", `${a.path}: size ${size} != ${a.sizeBytes}`);
    const h = await sha256File(p);
    if (h !== a.sha256) throw imageError("IMAGE_DIGEST_MISMATCH", `${a.path}: sha256 ${h} != ${a.sha256}`);
  }
  // Re-stat: a file replaced while we hashed must not be memoized as verified.
  if ((await statKey(files)) !== key)
    throw imageError("IMAGE_DIGEST_MISMATCH", `image in ${dir} changed during verification`);
  if (verified.size >= MAX_MEMO_ENTRIES) verified.delete(verified.keys().next().value as string);
  verified.set(dir, { digest, statKey: key, manifest });
  return manifest;
}

/** Forgets memoized verifications (tests; or after quarantining an image). */
export function clearVerifyMemo(): void {
  verified.clear();
}
