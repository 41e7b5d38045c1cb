/**
 * The on-disk side of the verified image cache (spec "Agent runtime and
 * local state": `images/manifests/`, `images/artifacts/`,
 * `images/quarantine/`; spec "Prepare (ensure_present)").
 *
 * Owns: the directory layout, bounded copies into private temp files
 * (mode 0600, on the cache's filesystem so a rename publishes atomically),
 * resuming an interrupted download into its partial file, publishing a
 * verified file (mode 0444, root-owned when running as root), and
 * quarantining a file that failed verification with a reason file.
 * Decides nothing about trust: cache.ts says what is verified. Must never:
 * publish a file under a name other than the hash it was checked against,
 * or delete a quarantined file.
 */
import { chmod, chown, mkdir, open, open as openFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createHash, randomBytes } from "node:crypto";

/** Paths of a cache rooted at `root` (all absolute when `root` is). */
export interface CacheLayout {
  root: string;
  /** `sha256-<hex>`: verified artifact bytes, mode 0444. */
  artifactsDir: string;
  /** `<digest-hex>.json`: verified, signed manifests. */
  manifestsDir: string;
  /** Files that failed verification, each with a `.reason.json`. */
  quarantineDir: string;
  /** Private temp files being downloaded (same filesystem as artifacts/). */
  tmpDir: string;
  /** `<digest-hex>/`: manifest.json plus hard links named as in the manifest. */
  viewsDir: string;
}

/** The layout under `root`. Pure. */
export function cacheLayout(root: string): CacheLayout {
  return {
    root,
    artifactsDir: join(root, "artifacts"),
    manifestsDir: join(root, "manifests"),
    quarantineDir: join(root, "quarantine"),
    tmpDir: join(root, "tmp"),
    viewsDir: join(root, "views"),
  };
}

/** Creates every directory of the layout (tmp/ and quarantine/ mode 0700). Idempotent. */
export async function ensureLayout(l: CacheLayout): Promise<void> {
  for (const d of [l.root, l.artifactsDir, l.manifestsDir, l.viewsDir])
    await mkdir(d, { recursive: true, mode: 0o755 });
  for (const d of [l.tmpDir, l.quarantineDir]) {
    await mkdir(d, { recursive: true, mode: 0o700 });
    await chmod(d, 0o700);
  }
}

/** A fresh unique name for a temp or quarantine file. */
function uniqueName(prefix: string): string {
  return `${prefix}-${randomBytes(8).toString("hex")}`;
}

/** Zeros to compare chunks against (chunks longer than this are compared in slices). */
const ZEROS = new Uint8Array(1 << 16);

/** True when every byte of `b` is zero. */
function isAllZero(b: Uint8Array): boolean {
  for (let off = 0; off < b.length; off += ZEROS.length) {
    const part = b.subarray(off, off + ZEROS.length);
    if (!Buffer.from(part.buffer, part.byteOffset, part.length).equals(ZEROS.subarray(0, part.length))) return false;
  }
  return true;
}

/** Result of copyBounded. */
export interface CopiedFile {
  /** The private temp file (mode 0600). */
  path: string;
  /** Bytes read from the source; `maxBytes + 1` means "more than maxBytes". */
  sizeBytes: number;
  /** SHA-256 (hex) of the bytes written, which are the first min(sizeBytes, maxBytes + 1) bytes. */
  sha256: string;
}

/**
 * Copies `stream` into a new private temp file in `tmpDir` (O_EXCL, mode
 * 0600), hashing as it goes, and stops after `maxBytes + 1` bytes so an
 * oversized source cannot fill the disk. All-zero chunks are left as holes
 * (the file is sparse; its bytes are the same). fsyncs before returning. On an I/O
 * error the temp file is left for the caller to quarantine or remove, and
 * the error is rethrown with `tempPath` attached.
 */
export async function copyBounded(
  stream: AsyncIterable<Uint8Array> & { destroy?(): void },
  tmpDir: string,
  maxBytes: number,
): Promise<CopiedFile> {
  const path = join(tmpDir, uniqueName("download"));
  const fh = await open(path, "wx", 0o600);
  const hash = createHash("sha256");
  const written = { size: 0 };
  try {
    await writeSparse(fh, stream, hash, written, maxBytes);
    await fh.truncate(written.size);
    await fh.datasync();
  } catch (e) {
    throw Object.assign(e as Error, { tempPath: path });
  } finally {
    stream.destroy?.();
    await fh.close();
  }
  return { path, sizeBytes: written.size, sha256: hash.digest("hex") };
}

/**
 * Publishes a verified temp file as `artifacts/sha256-<hex>`: mode 0444,
 * owner root:root when this process is root, then an atomic rename. The
 * caller must have checked size and hash. Returns the final path.
 */
export async function publishArtifact(l: CacheLayout, tempPath: string, sha256Hex: string): Promise<string> {
  const dst = join(l.artifactsDir, `sha256-${sha256Hex}`);
  await chmod(tempPath, 0o444);
  if (process.getuid?.() === 0) await chown(tempPath, 0, 0);
  await rename(tempPath, dst);
  return dst;
}

/** Why a file went to quarantine; written beside it as `<name>.reason.json`. */
export interface QuarantineReason {
  /** The stable code the resolve threw. */
  code: "IMAGE_DIGEST_MISMATCH" | "IMAGE_SIGNATURE_INVALID";
  /** Human-readable cause (no secrets). */
  reason: string;
  /** `sha256:<hex>` of the image being resolved. */
  imageDigest: string;
  /** `manifest.json` or the artifact's file name. */
  name: string;
  expected?: { sizeBytes: number; sha256: string };
  actual?: { sizeBytes: number; sha256: string };
  /** ArtifactSource.description. */
  source: string;
  /** ISO 8601 time of quarantine. */
  at: string;
}

/**
 * Moves `tempPath` (or writes `bytes`) into quarantine/ under a unique
 * name and writes its reason file. Returns the quarantined path. Throws
 * only on I/O errors.
 */
export async function quarantine(
  l: CacheLayout,
  what: { tempPath: string } | { bytes: Uint8Array },
  reason: QuarantineReason,
): Promise<string> {
  const dst = join(
    l.quarantineDir,
    uniqueName(`${reason.imageDigest.replace(/^sha256:/, "").slice(0, 16)}-${reason.name}`),
  );
  if ("tempPath" in what) await rename(what.tempPath, dst);
  else await writeFile(dst, what.bytes, { mode: 0o600, flag: "wx" });
  await writeFile(`${dst}.reason.json`, JSON.stringify(reason, null, 2) + "\n", { mode: 0o600, flag: "wx" });
  return dst;
}

/** Writes `text` to `path` atomically (temp file in `tmpDir`, fsync, rename) with `mode`. */
export async function writeFileAtomically(tmpDir: string, path: string, text: string, mode: number): Promise<void> {
  const tmp = join(tmpDir, uniqueName("write"));
  const fh = await open(tmp, "wx", 0o600);
  try {
    await fh.writeFile(text);
    await fh.datasync();
  } finally {
    await fh.close();
  }
  await chmod(tmp, mode);
  await rename(tmp, path);
}

/** Result of resumeDownload. */
export interface ResumedDownload {
  /** Bytes in the file (the whole artifact when it completed; `maxBytes + 1` means "more than maxBytes"). */
  sizeBytes: number;
  /** SHA-256 (hex) of those bytes. */
  sha256: string;
  /** Byte the stream started at (0 when the source started over). */
  resumedFrom: number;
}

/**
 * Continues downloading into `path` (a private 0600 file in tmp/, created
 * when absent): hashes the bytes already there, asks `open(from)` for the
 * rest, appends (all-zero chunks stay holes) and stops after `maxBytes + 1`
 * bytes. A source that cannot skip (`startsAt` 0) restarts the file. On an
 * I/O error the file is cut to the bytes received so far (kept for the next
 * attempt) and the error is rethrown with `progressed` (bytes gained in this
 * attempt). fsyncs before returning.
 */
export async function resumeDownload(
  path: string,
  maxBytes: number,
  open: (fromByte: number) => Promise<AsyncIterable<Uint8Array> & { destroy?(): void; startsAt?: number }>,
): Promise<ResumedDownload> {
  const fh = await openFile(path, "a+", 0o600).then(async (h) => {
    await h.close();
    return openFile(path, "r+");
  });
  let size = 0;
  let from = 0;
  const hash = createHash("sha256");
  let stream: (AsyncIterable<Uint8Array> & { destroy?(): void; startsAt?: number }) | null = null;
  try {
    const have = (await fh.stat()).size;
    if (have > 0 && have <= maxBytes) {
      const buf = Buffer.alloc(1 << 20);
      while (size < have) {
        const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, have - size), size);
        if (bytesRead <= 0) break;
        hash.update(buf.subarray(0, bytesRead));
        size += bytesRead;
      }
    }
    stream = await open(size);
    if ((stream.startsAt ?? 0) !== size) {
      // The source started over: so do we.
      size = 0;
      await fh.truncate(0);
      return await finishFrom(fh, stream, createHash("sha256"), 0, maxBytes, 0);
    }
    from = size;
    return await finishFrom(fh, stream, hash, size, maxBytes, from);
  } finally {
    stream?.destroy?.();
    await fh.close();
  }
}

async function finishFrom(
  fh: Awaited<ReturnType<typeof openFile>>,
  stream: AsyncIterable<Uint8Array>,
  hash: ReturnType<typeof createHash>,
  start: number,
  maxBytes: number,
  resumedFrom: number,
): Promise<ResumedDownload> {
  const written = { size: start };
  try {
    await writeSparse(fh, stream, hash, written, maxBytes);
  } catch (e) {
    await fh.truncate(written.size).catch(() => {});
    throw Object.assign(e as Error, { progressed: written.size - start });
  }
  await fh.truncate(written.size);
  await fh.datasync();
  return { sizeBytes: written.size, sha256: hash.digest("hex"), resumedFrom };
}

/**
 * Writes `stream` into `fh` from `written.size` on, hashing every byte, and
 * stops once the file holds `maxBytes + 1` bytes (one over the bound, so the
 * caller sees the overrun). All-zero chunks are skipped and become holes, so a
 * sparse root disk stays sparse in the cache. `written.size` tracks progress
 * as it goes, so a caller that catches an I/O error knows how far it got.
 */
async function writeSparse(
  fh: Awaited<ReturnType<typeof openFile>>,
  stream: AsyncIterable<Uint8Array>,
  hash: ReturnType<typeof createHash>,
  written: { size: number },
  maxBytes: number,
): Promise<void> {
  for await (const chunk of stream) {
    const take = Math.min(chunk.length, maxBytes + 1 - written.size);
    const part = take === chunk.length ? chunk : chunk.subarray(0, take);
    hash.update(part);
    if (!isAllZero(part)) await fh.write(part, 0, part.length, written.size);
    written.size += take;
    if (written.size > maxBytes) break;
  }
}
