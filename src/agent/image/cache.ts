/**
 * The content-addressed, verified image cache (spec "Prepare
 * (ensure_present)" and "Agent runtime and local state": images/manifests,
 * images/artifacts, images/quarantine).
 *
 * `resolve(digest, source)` fetches the manifest by digest, checks that it
 * hashes to the digest and that a trusted Ed25519 key signed it, then
 * copies each artifact into a private temp file, checks its exact size and
 * SHA-256, and publishes it with an atomic rename as
 * `artifacts/sha256-<hex>` (mode 0444). Anything that fails verification
 * goes to quarantine/ with a reason file. A later resolve of the same
 * digest re-checks the cached manifest's signature (keys may rotate) and
 * reuses published artifacts without fetching again. Artifacts shared by
 * images are stored once.
 *
 * Must never: publish or return bytes that were not verified against a
 * signed manifest, trust the source, read past a size bound, or delete a
 * quarantined file.
 */
import { link, lstat, mkdir, readdir, readFile, rename, rm, stat, utimes } from "node:fs/promises";
import { join, resolve as resolvePath } from "node:path";
import { randomBytes } from "node:crypto";
import {
  type Artifact,
  type ImageManifest,
  MANIFEST_FILE_NAME,
  imageDigest,
  manifestShapeProblem,
} from "../../protocol/image.ts";
import { type ArtifactSource, artifactSourceFor } from "./artifactSource.ts";
import {
  type CacheLayout,
  cacheLayout,
  ensureLayout,
  publishArtifact,
  quarantine,
  type QuarantineReason,
  resumeDownload,
  writeFileAtomically,
} from "./cacheFiles.ts";
import { imageError, imageErrorCode } from "../../image/errors.ts";
import { verifyManifestSignature } from "../../image/signing.ts";
import { type Clock, systemClock } from "../../protocol/clock.ts";

/** Default bound on a fetched manifest, bytes (64 KiB). */
export const DEFAULT_MAX_MANIFEST_BYTES = 64 * 1024;
/** Default bound on one artifact, bytes (8 GiB). */
export const DEFAULT_MAX_ARTIFACT_BYTES = 8 * 2 ** 30;
/** Default bound on published artifact bytes before unused images are evicted (32 GiB). */
export const DEFAULT_IMAGE_CACHE_MAX_BYTES = 32 * 2 ** 30;
/** Default number of artifact downloads running at once (across all images). */
export const DEFAULT_MAX_CONCURRENT_FETCHES = 2;
/** Failed attempts in a row (without a byte of progress) before a download gives up; the partial file is kept. */
export const MAX_FETCH_ATTEMPTS_WITHOUT_PROGRESS = 4;
/** Pause before retrying a download, ms, times the attempt number. */
const FETCH_RETRY_BASE_MS = 250;

/** Tunables of ImageCache. */
export interface ImageCacheOptions {
  /** Largest manifest accepted from a source, bytes. Default 64 KiB. */
  maxManifestBytes?: number;
  /** Largest artifact a manifest may declare, bytes. Default 8 GiB. */
  maxArtifactBytes?: number;
  /** Clock (its wallMs) for quarantine reason files and last-use times; default systemClock. */
  clock?: Clock;
  /** Most artifact downloads at once. Default 2. */
  maxConcurrentFetches?: number;
  /** Sleep between download attempts (a port, so tests need not wait). */
  sleep?: (ms: number) => Promise<void>;
  /** Called for each download attempt that failed and will be resumed (logs). */
  onRetry?: (info: { name: string; attempt: number; haveBytes: number; error: string }) => void;
}

/** What the cache holds, for the host's disk accounting (spec "Capacity accounting"). */
export interface CacheUsage {
  /** Bytes of published artifacts, each counted once however many images share it. */
  artifactBytes: number;
  /** Cached (verified) images. */
  images: number;
  /** Bytes of partial downloads waiting to be resumed. */
  partialBytes: number;
  /** Bytes in quarantine (never deleted automatically). */
  quarantineBytes: number;
}

/** Result of ImageCache.evict. */
export interface EvictionResult {
  /** Digests whose manifests (and views) were removed. */
  evicted: string[];
  /** Artifact bytes freed. */
  freedBytes: number;
  /** Artifact bytes left. */
  artifactBytes: number;
}

/** A counting semaphore. */
class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];
  constructor(n: number) {
    this.free = Math.max(1, n);
  }
  async run<T>(f: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((r) => this.waiting.push(r));
    try {
      return await f();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    }
  }
}

/** A verified image in the cache. */
export interface ResolvedImage {
  /** `sha256:<hex>`. */
  digest: string;
  manifest: ImageManifest;
  /** `views/<hex>/`: manifest.json plus hard links named as the manifest's artifact paths (fits PlacementContext.resolveImage). */
  dir: string;
  /** Published artifact files (`artifacts/sha256-<hex>`), mode 0444. */
  artifactPaths: { kernel: string; rootfs: string; initrd?: string };
  /** True when the manifest came from the source on this call (not from manifests/). */
  fetchedManifest: boolean;
  /** How many artifacts were fetched on this call (0 when all were cached). */
  fetchedArtifacts: number;
}

type Role = "kernel" | "rootfs" | "initrd";

function artifactsOf(m: ImageManifest): [Role, Artifact][] {
  return [["kernel", m.kernel], ["rootfs", m.rootfs], ...(m.initrd ? [["initrd", m.initrd] as [Role, Artifact]] : [])];
}

/** Reads at most `max + 1` bytes of a stream into memory. */
async function readBounded(stream: AsyncIterable<Uint8Array> & { destroy?(): void }, max: number): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let n = 0;
  try {
    for await (const c of stream) {
      parts.push(c);
      n += c.length;
      if (n > max) break;
    }
  } finally {
    stream.destroy?.();
  }
  return Buffer.concat(parts).subarray(0, Math.min(n, max + 1));
}

/**
 * A verified image cache rooted at `rootDir` (e.g.
 * /var/lib/beachball/images) that trusts manifests signed by any of
 * `trustedKeys` (base64 Ed25519 public keys, see signing.ts).
 */
export class ImageCache {
  private readonly layout: CacheLayout;
  private readonly maxManifestBytes: number;
  private readonly maxArtifactBytes: number;
  private readonly clock: Clock;
  /** In-flight resolves by digest hex, so concurrent callers share one fetch. */
  private readonly inflight = new Map<string, Promise<ResolvedImage>>();
  private readonly fetchSlots: Slots;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly onRetry: NonNullable<ImageCacheOptions["onRetry"]>;
  /** Set while evict() runs; resolves wait for it. */
  private evicting: Promise<unknown> | null = null;

  constructor(
    rootDir: string,
    private readonly trustedKeys: readonly string[],
    opts: ImageCacheOptions = {},
  ) {
    this.layout = cacheLayout(resolvePath(rootDir));
    this.maxManifestBytes = opts.maxManifestBytes ?? DEFAULT_MAX_MANIFEST_BYTES;
    this.maxArtifactBytes = opts.maxArtifactBytes ?? DEFAULT_MAX_ARTIFACT_BYTES;
    this.clock = opts.clock ?? systemClock;
    this.fetchSlots = new Slots(opts.maxConcurrentFetches ?? DEFAULT_MAX_CONCURRENT_FETCHES);
    this.sleep = opts.sleep ?? ((ms) => Bun.sleep(ms));
    this.onRetry = opts.onRetry ?? (() => {});
  }

  /** The cache's directory layout. */
  get paths(): CacheLayout {
    return this.layout;
  }

  /**
   * Returns the verified image `digest` (`sha256:<hex>`), fetching what is
   * missing from `source` (a directory, a `file://` URL, or an
   * ArtifactSource). Throws code IMAGE_NOT_FOUND (malformed digest, or the
   * source lacks a file), IMAGE_DIGEST_MISMATCH (manifest does not hash to
   * the digest, is malformed or too large; an artifact is over
   * maxArtifactBytes or has the wrong size or SHA-256) or
   * IMAGE_SIGNATURE_INVALID (no trusted key verifies the manifest). Failed
   * fetched bytes are in quarantine/ when it throws. Other errors are I/O.
   */
  resolve(digest: string, source: string | ArtifactSource): Promise<ResolvedImage> {
    const hex = /^sha256:([0-9a-f]{64})$/.exec(digest)?.[1];
    if (!hex)
      return Promise.reject(
        imageError("IMAGE_NOT_FOUND", `malformed image digest ${JSON.stringify(digest.slice(0, 80))}`),
      );
    const running = this.inflight.get(hex);
    if (running) return running;
    const src = typeof source === "string" ? artifactSourceFor(source) : source;
    const p = this.resolveOnce(digest, hex, src).finally(() => this.inflight.delete(hex));
    this.inflight.set(hex, p);
    return p;
  }

  /** Digests (`sha256:<hex>`) whose manifest is cached, for the host advertisement. */
  async cachedDigests(): Promise<string[]> {
    const names = await readdir(this.layout.manifestsDir).catch(() => [] as string[]);
    return names.filter((n) => /^[0-9a-f]{64}\.json$/.test(n)).map((n) => `sha256:${n.slice(0, 64)}`);
  }

  private async resolveOnce(digest: string, hex: string, src: ArtifactSource): Promise<ResolvedImage> {
    while (this.evicting) await this.evicting.catch(() => {});
    await ensureLayout(this.layout);
    let manifest = await this.cachedManifest(digest, hex, src);
    const fetchedManifest = manifest === null;
    manifest ??= await this.fetchManifest(digest, hex, src);
    const paths: Partial<Record<Role, string>> = {};
    let fetchedArtifacts = 0;
    for (const [role, a] of artifactsOf(manifest)) {
      if (a.sizeBytes > this.maxArtifactBytes) {
        throw imageError(
          "IMAGE_DIGEST_MISMATCH",
          `${role} ${a.path} declares ${a.sizeBytes} bytes, over maxArtifactBytes ${this.maxArtifactBytes}`,
        );
      }
      let p = await this.cachedArtifact(digest, a, src);
      if (!p) {
        p = await this.fetchArtifact(digest, hex, a, src);
        fetchedArtifacts++;
      }
      paths[role] = p;
    }
    // The manifest is cached last: a cached manifest means its artifacts were published.
    if (fetchedManifest) {
      await writeFileAtomically(
        this.layout.tmpDir,
        join(this.layout.manifestsDir, `${hex}.json`),
        JSON.stringify(manifest) + "\n",
        0o444,
      );
    }
    const artifactPaths = {
      kernel: paths.kernel!,
      rootfs: paths.rootfs!,
      ...(paths.initrd ? { initrd: paths.initrd } : {}),
    };
    const dir = await this.ensureView(hex, manifest, artifactPaths);
    // Last use, for eviction (least recently used first).
    const t = new Date(this.clock.wallMs());
    await utimes(join(this.layout.manifestsDir, `${hex}.json`), t, t).catch(() => {});
    return { digest, manifest, dir, artifactPaths, fetchedManifest, fetchedArtifacts };
  }

  private reason(
    digest: string,
    name: string,
    src: ArtifactSource,
    code: QuarantineReason["code"],
    reason: string,
    extra: Partial<QuarantineReason> = {},
  ): QuarantineReason {
    return {
      code,
      reason,
      imageDigest: digest,
      name,
      source: src.description,
      at: new Date(this.clock.wallMs()).toISOString(),
      ...extra,
    };
  }

  /** Checks bytes claimed to be the manifest of `digest`: the manifest, or why it fails (no side effects). */
  private checkManifest(
    digest: string,
    bytes: Uint8Array,
  ): ImageManifest | { code: QuarantineReason["code"]; why: string } {
    if (bytes.length > this.maxManifestBytes)
      return { code: "IMAGE_DIGEST_MISMATCH", why: `larger than maxManifestBytes ${this.maxManifestBytes}` };
    let m: unknown;
    try {
      m = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    } catch {
      return { code: "IMAGE_DIGEST_MISMATCH", why: "not valid UTF-8 JSON" };
    }
    const problem = manifestShapeProblem(m);
    if (problem) return { code: "IMAGE_DIGEST_MISMATCH", why: `malformed: ${problem}` };
    const got = imageDigest(m as ImageManifest);
    if (got !== digest) return { code: "IMAGE_DIGEST_MISMATCH", why: `hashes to ${got}` };
    try {
      verifyManifestSignature(m as ImageManifest, this.trustedKeys);
    } catch (e) {
      return {
        code: imageErrorCode(e) === "IMAGE_DIGEST_MISMATCH" ? "IMAGE_DIGEST_MISMATCH" : "IMAGE_SIGNATURE_INVALID",
        why: (e as Error).message,
      };
    }
    return m as ImageManifest;
  }

  /**
   * The cached manifest if present, intact and still signed by a trusted
   * key; else null. A corrupt one (digest or shape) is quarantined; one
   * whose signature no longer verifies (trusted keys rotated) is left in
   * place, since the source may hold a re-signed copy with the same digest.
   */
  private async cachedManifest(digest: string, hex: string, src: ArtifactSource): Promise<ImageManifest | null> {
    const path = join(this.layout.manifestsDir, `${hex}.json`);
    const bytes = await readFile(path).catch(() => null);
    if (!bytes) return null;
    const r = this.checkManifest(digest, bytes);
    if (!("code" in r)) return r;
    if (r.code === "IMAGE_DIGEST_MISMATCH")
      await quarantine(
        this.layout,
        { tempPath: path },
        this.reason(digest, MANIFEST_FILE_NAME, src, r.code, `cached manifest: ${r.why}`),
      );
    return null;
  }

  /** Fetches and checks the manifest; quarantines the bytes and throws its code on failure. */
  private async fetchManifest(digest: string, hex: string, src: ArtifactSource): Promise<ImageManifest> {
    const bytes = await readBounded(await src.open(hex, MANIFEST_FILE_NAME), this.maxManifestBytes);
    const r = this.checkManifest(digest, bytes);
    if (!("code" in r)) return r;
    await quarantine(this.layout, { bytes }, this.reason(digest, MANIFEST_FILE_NAME, src, r.code, r.why));
    throw imageError(r.code, `manifest of ${digest}: ${r.why} (quarantined)`);
  }

  /** The published artifact when present with the declared size; a wrong-size one is quarantined. */
  private async cachedArtifact(digest: string, a: Artifact, src: ArtifactSource): Promise<string | null> {
    const path = join(this.layout.artifactsDir, `sha256-${a.sha256}`);
    const s = await lstat(path).catch(() => null);
    if (!s) return null;
    if (s.isFile() && s.size === a.sizeBytes) return path;
    await quarantine(
      this.layout,
      { tempPath: path },
      this.reason(digest, a.path, src, "IMAGE_DIGEST_MISMATCH", "cached artifact has the wrong size or type", {
        expected: { sizeBytes: a.sizeBytes, sha256: a.sha256 },
      }),
    );
    return null;
  }

  /**
   * Downloads one artifact into its partial file (`tmp/partial-sha256-<hex>`)
   * under the concurrency bound, resuming after I/O errors (at most
   * MAX_FETCH_ATTEMPTS_WITHOUT_PROGRESS failures in a row without progress;
   * the partial file stays for a later resolve). Verifies exact size and
   * SHA-256, then publishes; a mismatch is quarantined and thrown.
   */
  private fetchArtifact(digest: string, hex: string, a: Artifact, src: ArtifactSource): Promise<string> {
    return this.fetchSlots.run(async () => {
      const partial = join(this.layout.tmpDir, `partial-sha256-${a.sha256}`);
      let failures = 0;
      let got;
      for (let attempt = 1; ; attempt++) {
        try {
          got = await resumeDownload(partial, a.sizeBytes, (from) => src.open(hex, a.path, from));
          break;
        } catch (e) {
          if (imageErrorCode(e) === "IMAGE_NOT_FOUND") {
            if ((await stat(partial).catch(() => null))?.size === 0) await rm(partial, { force: true });
            throw e;
          }
          failures = ((e as { progressed?: number }).progressed ?? 0) > 0 ? 1 : failures + 1;
          const have = (await stat(partial).catch(() => null))?.size ?? 0;
          if (failures >= MAX_FETCH_ATTEMPTS_WITHOUT_PROGRESS)
            throw Object.assign(
              new Error(
                `${a.path} of ${digest}: ${failures} attempts without progress (${have} of ${a.sizeBytes} bytes kept to resume): ${(e as Error).message}`,
              ),
              { cause: e },
            );
          this.onRetry({ name: a.path, attempt, haveBytes: have, error: (e as Error).message });
          await this.sleep(FETCH_RETRY_BASE_MS * failures);
        }
      }
      if (got.sizeBytes !== a.sizeBytes || got.sha256 !== a.sha256) {
        const why =
          got.sizeBytes !== a.sizeBytes
            ? `size ${got.sizeBytes > a.sizeBytes ? `over ${a.sizeBytes}` : got.sizeBytes} != ${a.sizeBytes}`
            : `sha256 ${got.sha256} != ${a.sha256}`;
        await quarantine(
          this.layout,
          { tempPath: partial },
          this.reason(digest, a.path, src, "IMAGE_DIGEST_MISMATCH", why, {
            expected: { sizeBytes: a.sizeBytes, sha256: a.sha256 },
            actual: { sizeBytes: got.sizeBytes, sha256: got.sha256 },
          }),
        );
        throw imageError("IMAGE_DIGEST_MISMATCH", `${a.path} of ${digest}: ${why} (quarantined)`);
      }
      return publishArtifact(this.layout, partial, a.sha256);
    });
  }

  /** Sizes of what the cache holds (see CacheUsage). Missing directories count as empty. */
  async usage(): Promise<CacheUsage> {
    const sum = async (dir: string, filter: (n: string) => boolean = () => true) => {
      let total = 0;
      for (const n of await readdir(dir).catch(() => [] as string[])) {
        if (!filter(n)) continue;
        const s = await lstat(join(dir, n)).catch(() => null);
        if (s?.isFile()) total += s.blocks * 512 < s.size ? s.blocks * 512 : s.size;
      }
      return total;
    };
    return {
      artifactBytes: await sum(this.layout.artifactsDir),
      images: (await this.cachedDigests()).length,
      partialBytes: await sum(this.layout.tmpDir, (n) => n.startsWith("partial-")),
      quarantineBytes: await sum(this.layout.quarantineDir),
    };
  }

  /**
   * Evicts least recently used images until published artifacts take at
   * most `maxBytes` (spec "Agent runtime and local state"): removes the
   * manifest first (so a manifest never names a missing artifact), then its
   * view, then every artifact no remaining manifest names. Never touches an
   * image in `inUse` (digests of placements on this host), an image being
   * resolved, or an artifact either of them needs. Does nothing while a
   * resolve is in flight (resolves wait for an eviction to finish).
   */
  async evict(maxBytes: number, inUse: ReadonlySet<string>): Promise<EvictionResult> {
    if (this.inflight.size > 0 || this.evicting)
      return { evicted: [], freedBytes: 0, artifactBytes: (await this.usage()).artifactBytes };
    const run = this.evictNow(maxBytes, inUse);
    this.evicting = run;
    try {
      return await run;
    } finally {
      this.evicting = null;
    }
  }

  private async evictNow(maxBytes: number, inUse: ReadonlySet<string>): Promise<EvictionResult> {
    const artifactSize = async (hex: string) =>
      (await stat(join(this.layout.artifactsDir, `sha256-${hex}`)).catch(() => null))?.size ?? 0;
    const manifests = new Map<string, ImageManifest>();
    const lastUse = new Map<string, number>();
    for (const d of await this.cachedDigests()) {
      const path = join(this.layout.manifestsDir, `${d.slice(7)}.json`);
      try {
        manifests.set(d, JSON.parse(await readFile(path, "utf8")) as ImageManifest);
        lastUse.set(d, (await stat(path)).mtimeMs);
      } catch {
        /* unreadable: left for resolve to quarantine */
      }
    }
    const named = () => new Set([...manifests.values()].flatMap((m) => artifactsOf(m).map(([, a]) => a.sha256)));
    let total = 0;
    for (const n of await readdir(this.layout.artifactsDir).catch(() => [] as string[]))
      if (/^sha256-[0-9a-f]{64}$/.test(n)) total += await artifactSize(n.slice(7));
    const evicted: string[] = [];
    let freed = 0;
    const candidates = [...manifests.keys()]
      .filter((d) => !inUse.has(d))
      .sort((x, y) => lastUse.get(x)! - lastUse.get(y)!);
    for (const d of candidates) {
      if (total <= maxBytes) break;
      const hex = d.slice(7);
      manifests.delete(d);
      await rm(join(this.layout.manifestsDir, `${hex}.json`), { force: true });
      await rm(join(this.layout.viewsDir, hex), { recursive: true, force: true });
      evicted.push(d);
      const still = named();
      for (const n of await readdir(this.layout.artifactsDir).catch(() => [] as string[])) {
        const ah = /^sha256-([0-9a-f]{64})$/.exec(n)?.[1];
        if (!ah || still.has(ah)) continue;
        const size = await artifactSize(ah);
        await rm(join(this.layout.artifactsDir, n), { force: true });
        total -= size;
        freed += size;
      }
    }
    return { evicted, freedBytes: freed, artifactBytes: total };
  }

  /** `views/<hex>/` with manifest.json and hard links to the published artifacts; rebuilt when stale. */
  private async ensureView(
    hex: string,
    manifest: ImageManifest,
    paths: ResolvedImage["artifactPaths"],
  ): Promise<string> {
    const dir = join(this.layout.viewsDir, hex);
    const links = artifactsOf(manifest).map(([role, a]) => ({ name: a.path, target: paths[role]! }));
    const sameInode = async (x: string, y: string) => {
      const [sx, sy] = await Promise.all([stat(x).catch(() => null), stat(y).catch(() => null)]);
      return !!sx && !!sy && sx.ino === sy.ino && sx.dev === sy.dev;
    };
    const current = await Promise.all(links.map((l) => sameInode(join(dir, l.name), l.target)));
    if (current.every(Boolean) && (await stat(join(dir, MANIFEST_FILE_NAME)).catch(() => null))) return dir;
    const tmp = join(this.layout.tmpDir, `view-${randomBytes(8).toString("hex")}`);
    await mkdir(tmp, { mode: 0o755 });
    for (const l of links) await link(l.target, join(tmp, l.name));
    await writeFileAtomically(
      this.layout.tmpDir,
      join(tmp, MANIFEST_FILE_NAME),
      JSON.stringify(manifest, null, 2) + "\n",
      0o444,
    );
    await rm(dir, { recursive: true, force: true });
    await rename(tmp, dir);
    return dir;
  }
}
