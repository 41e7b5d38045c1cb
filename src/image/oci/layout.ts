/**
 * Reading an OCI image from local input, no registry: an OCI image layout
 * directory (`oci-layout`, `index.json`, `blobs/sha256/…`) or a
 * docker-archive tarball (`docker save`: `manifest.json`, a config and
 * layer tars).
 *
 * Owns: picking the image manifest (by reference annotation and platform,
 * through nested indexes), checking every blob's exact size and SHA-256,
 * and describing each layer (compression and the diff ID its uncompressed
 * bytes must hash to). JSON blobs are checked before they are parsed; a
 * layer blob's size is checked up front and its SHA-256 while its one
 * reader reads it (LayerInput.open: hashed in the same pass as it is
 * parsed, so 400 MB are not read twice), the stream failing at its end
 * when the bytes differ; the build publishes nothing before that end. Implements the input side of
 * spec "Images" (`bb image build`, `source: {kind: "oci", …}`) after the OCI
 * image-spec's image-layout, manifest, index and config documents.
 * Must never: read a blob by a path built from anything but its validated
 * digest, parse a JSON blob before its digest is checked, or read past the
 * bounds below.
 */
import { closeSync, createReadStream, openSync, readSync } from "node:fs";
import { mkdir, open, readFile, stat } from "node:fs/promises";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { imageError } from "../errors.ts";
import { type SkippableChunks, readTar } from "./tar.ts";
import { hashFileOffThread } from "./blobHash.ts";
import { utf8Text } from "./byteName.ts";

/** Largest JSON document (index, manifest, config) read from an input, bytes. */
export const MAX_OCI_JSON_BYTES = 4 * 1024 * 1024;
/** Most layers an image may have (Docker's own limit is 127). */
export const MAX_OCI_LAYERS = 128;
/** Deepest chain of nested image indexes followed. */
export const MAX_INDEX_DEPTH = 4;
/** Most members a docker-archive tarball may hold. */
export const MAX_ARCHIVE_MEMBERS = 10_000;
/** The platform images are built for (the manifest's only architecture). */
export const OCI_PLATFORM = { os: "linux", architecture: "amd64" } as const;

/** The parts of an OCI image config a Beachball image uses. */
export interface OciImageConfig {
  architecture?: string;
  os?: string;
  created?: string;
  config?: {
    Entrypoint?: string[] | null;
    Cmd?: string[] | null;
    Env?: string[] | null;
    WorkingDir?: string;
    User?: string;
  };
  rootfs?: { type?: string; diff_ids?: string[] };
}

/** How a layer blob is compressed. */
export type LayerCompression = "none" | "gzip" | "zstd";

/** One layer, in application order. */
export interface LayerInput {
  /** `sha256:<hex>` of the (possibly compressed) blob, already verified. */
  digest: string;
  compression: LayerCompression;
  /** `sha256:<hex>` the uncompressed tar must hash to (config rootfs.diff_ids). */
  diffId: string;
  /**
   * Opens the blob's bytes. For an OCI layout blob the stream hashes what
   * it yields and, after its last chunk, throws IMAGE_BLOB_DIGEST_MISMATCH
   * when the bytes are not `digest`'s (also as soon as more bytes than the
   * descriptor's size arrive): a consumer that reads to the end has read
   * verified bytes, and must not publish anything before that end.
   */
  open(): AsyncIterable<Uint8Array>;
  /**
   * Hashes the whole blob again and throws IMAGE_BLOB_DIGEST_MISMATCH when
   * it differs from `digest` (absent when `digest` was computed, not
   * claimed). For a reader that failed before the end of `open()`: a
   * corrupt blob is reported as a mismatch, not as whatever its bytes broke.
   */
  verify?(): Promise<void>;
  /**
   * The blob's bytes, NOT verified, read by position so a tar reader can
   * jump over bodies it leaves unread (tar.ts SkippableChunks); present
   * with `verify` (which hashes the blob in a worker, tar.ts's reader
   * meanwhile on this thread). Whoever reads it must await `verify()`
   * before anything it made from those bytes is published.
   */
  openSkipping?(): SkippableChunks;
  /** The blob's file (in the layout, or the build's private copy of a docker-archive member). */
  path: string;
  /** fileIdentity of `path` taken before its bytes were hashed for `digest`: while it is unchanged, so are they. */
  identity: string;
}

/** An image read from local input, every blob verified. */
export interface OciImageInput {
  /** `sha256:<hex>` of the image manifest (docker-archive: of its manifest.json). */
  manifestDigest: string;
  /** `sha256:<hex>` of the config blob. */
  configDigest: string;
  config: OciImageConfig;
  layers: LayerInput[];
  /** The reference chosen (ref.name annotation, RepoTag or what the caller asked for), "" when none. */
  reference: string;
  /** Always `linux/amd64`. */
  platform: string;
}

interface Descriptor {
  mediaType?: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
  platform?: { os?: string; architecture?: string };
}

const MT = {
  index: "application/vnd.oci.image.index.v1+json",
  manifest: "application/vnd.oci.image.manifest.v1+json",
  dockerList: "application/vnd.docker.distribution.manifest.list.v2+json",
  dockerManifest: "application/vnd.docker.distribution.manifest.v2+json",
} as const;

const bad = (msg: string) => imageError("IMAGE_SOURCE_INVALID", msg);

function hexOf(digest: unknown, what: string): string {
  if (typeof digest !== "string") throw bad(`${what} has no digest`);
  const m = /^sha256:([0-9a-f]{64})$/.exec(digest);
  if (!m) throw bad(`${what} digest ${JSON.stringify(digest.slice(0, 80))} is not sha256:<64 hex>`);
  return m[1]!;
}

function descriptor(v: unknown, what: string): Descriptor {
  if (!v || typeof v !== "object") throw bad(`${what} is not a descriptor`);
  const d = v as Descriptor;
  hexOf(d.digest, what);
  if (!Number.isSafeInteger(d.size) || d.size < 0) throw bad(`${what} has no valid size`);
  return d;
}

function parseJson(bytes: Uint8Array, what: string): unknown {
  try {
    return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch {
    throw bad(`${what} is not valid JSON`);
  }
}

/** Compression of a layer media type; throws IMAGE_LAYER_UNSUPPORTED for anything else. */
export function layerCompression(mediaType: string | undefined): LayerCompression {
  switch (mediaType) {
    case "application/vnd.oci.image.layer.v1.tar":
    case "application/vnd.oci.image.layer.nondistributable.v1.tar":
      return "none";
    case "application/vnd.oci.image.layer.v1.tar+gzip":
    case "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip":
    case "application/vnd.docker.image.rootfs.diff.tar.gzip":
    case "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip":
      return "gzip";
    case "application/vnd.oci.image.layer.v1.tar+zstd":
      return "zstd";
    default:
      throw imageError(
        "IMAGE_LAYER_UNSUPPORTED",
        `layer media type ${JSON.stringify(String(mediaType).slice(0, 100))} is not supported`,
      );
  }
}

/**
 * A file's identity and last change (device, inode, size, mtime and ctime in
 * ns): any write to the file changes it, so bytes hashed while it held stay
 * the bytes of the file while it holds.
 */
export async function fileIdentity(path: string): Promise<string> {
  const s = await stat(path, { bigint: true });
  return `${s.dev}:${s.ino}:${s.size}:${s.mtimeNs}:${s.ctimeNs}`;
}

/** Streams a file through SHA-256 and counts its bytes (stops counting past `limit` + 1). */
async function hashFile(path: string, limit: number): Promise<{ hex: string; size: number }> {
  const h = createHash("sha256");
  let size = 0;
  for await (const c of createReadStream(path, { highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > limit) return { hex: "", size };
    h.update(c);
  }
  return { hex: h.digest("hex"), size };
}

/** A layout's blob store: `blobs/sha256/<hex>`, each read checked against its descriptor. */
class BlobStore {
  constructor(private readonly dir: string) {}
  path(hex: string): string {
    return join(this.dir, "blobs", "sha256", hex);
  }
  /** Checks the blob's exact size and SHA-256; returns its path. Throws IMAGE_SOURCE_INVALID (missing) or IMAGE_BLOB_DIGEST_MISMATCH. */
  async verify(d: Descriptor, what: string): Promise<string> {
    return (await this.verified(d, what)).path;
  }
  /** verify, also returning the file's identity taken before it was hashed. */
  async verified(d: Descriptor, what: string): Promise<{ path: string; identity: string }> {
    const hex = hexOf(d.digest, what);
    const p = this.path(hex);
    const s = await stat(p).catch(() => null);
    if (!s?.isFile()) throw bad(`${what} blob ${d.digest} is missing from the layout`);
    if (s.size !== d.size)
      throw imageError(
        "IMAGE_BLOB_DIGEST_MISMATCH",
        `${what} blob ${d.digest}: size ${s.size} != descriptor size ${d.size}`,
      );
    const identity = await fileIdentity(p);
    const got = await hashFile(p, d.size);
    if (got.size !== d.size || got.hex !== hex)
      throw imageError(
        "IMAGE_BLOB_DIGEST_MISMATCH",
        `${what} blob ${d.digest}: content hashes to sha256:${got.hex || "(over size)"}`,
      );
    return { path: p, identity };
  }
  /**
   * A layer blob: checks it is there with the descriptor's exact size and
   * returns its path, its identity (taken before any hashing) and the
   * digest-checking stream and re-check of LayerInput. Throws
   * IMAGE_SOURCE_INVALID (missing) or IMAGE_BLOB_DIGEST_MISMATCH (size).
   */
  async layer(
    d: Descriptor,
    what: string,
  ): Promise<Pick<LayerInput, "path" | "identity" | "open" | "verify" | "openSkipping">> {
    const hex = hexOf(d.digest, what);
    const p = this.path(hex);
    const s = await stat(p).catch(() => null);
    if (!s?.isFile()) throw bad(`${what} blob ${d.digest} is missing from the layout`);
    if (s.size !== d.size)
      throw imageError(
        "IMAGE_BLOB_DIGEST_MISMATCH",
        `${what} blob ${d.digest}: size ${s.size} != descriptor size ${d.size}`,
      );
    const identity = await fileIdentity(p);
    return {
      path: p,
      identity,
      open: () => verifyingChunks(p, hex, d.size, what),
      openSkipping: () => positionalChunks(p, d.size),
      verify: async () => {
        const got = await hashFileOffThread(p, d.size);
        if (got.size !== d.size || got.hex !== hex)
          throw imageError(
            "IMAGE_BLOB_DIGEST_MISMATCH",
            `${what} blob ${d.digest}: content hashes to sha256:${got.hex || "(over size)"}`,
          );
      },
    };
  }
  /** Reads, verifies and parses a JSON blob. */
  async json(d: Descriptor, what: string): Promise<unknown> {
    if (d.size > MAX_OCI_JSON_BYTES) throw bad(`${what} is ${d.size} bytes, over ${MAX_OCI_JSON_BYTES}`);
    const bytes = await readFile(await this.verify(d, what));
    return parseJson(bytes, what);
  }
}

function platformOk(d: Descriptor): boolean {
  return d.platform?.os === OCI_PLATFORM.os && d.platform?.architecture === OCI_PLATFORM.architecture;
}

/** Picks the descriptor: one whose ref.name annotation is `ref`, else the only one, else the linux/amd64 one. */
function pick(ds: Descriptor[], ref: string | undefined, what: string): Descriptor {
  if (ref) {
    const named = ds.filter((d) => d.annotations?.["org.opencontainers.image.ref.name"] === ref);
    if (named.length === 1) return named[0]!;
    if (named.length > 1) throw bad(`${what} has ${named.length} manifests named ${JSON.stringify(ref)}`);
  }
  if (ds.length === 1) return ds[0]!;
  const plat = ds.filter(platformOk);
  if (plat.length === 1) return plat[0]!;
  throw bad(
    `${what} has ${ds.length} manifests; name one with --ref (org.opencontainers.image.ref.name)${ref ? `; none is named ${JSON.stringify(ref)}` : ""}`,
  );
}

function checkConfig(v: unknown, what: string): OciImageConfig {
  if (!v || typeof v !== "object") throw bad(`${what} is not an object`);
  const c = v as OciImageConfig;
  if (c.os !== undefined && c.os !== OCI_PLATFORM.os) throw bad(`${what}: os ${JSON.stringify(c.os)} is not linux`);
  if (c.architecture !== undefined && c.architecture !== OCI_PLATFORM.architecture)
    throw bad(`${what}: architecture ${JSON.stringify(c.architecture)} is not amd64`);
  const ids = c.rootfs?.diff_ids;
  if (!Array.isArray(ids) || ids.length > MAX_OCI_LAYERS)
    throw bad(`${what} has no rootfs.diff_ids (or more than ${MAX_OCI_LAYERS})`);
  ids.forEach((id, i) => hexOf(id, `${what} diff_ids[${i}]`));
  const cfg = c.config ?? {};
  const strings = (x: unknown) =>
    x === undefined || x === null || (Array.isArray(x) && x.every((s) => typeof s === "string"));
  if (!strings(cfg.Entrypoint) || !strings(cfg.Cmd) || !strings(cfg.Env))
    throw bad(`${what}: Entrypoint, Cmd and Env must be string arrays`);
  if (
    (cfg.WorkingDir !== undefined && typeof cfg.WorkingDir !== "string") ||
    (cfg.User !== undefined && typeof cfg.User !== "string")
  ) {
    throw bad(`${what}: WorkingDir and User must be strings`);
  }
  return c;
}

function fileChunks(path: string): AsyncIterable<Uint8Array> {
  return createReadStream(path, { highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>;
}

/**
 * Bytes read at a time by positionalChunks: small, so little more than the
 * headers is read (bodies past a read are jumped over). On bench/imageBuild.ts's
 * 430 MB of layers (14,190 members), 8 KiB reads 58 MB in 7,100 reads where
 * 64 KiB read 161 MB in 2,500, in less time spent reading (and 4 KiB: 41 MB
 * in 9,900 reads, more time again).
 */
const POSITIONAL_READ_BYTES = 8 * 1024;

/** The `size` bytes of `path` read by position, jumping where told (tar.ts SkippableChunks); a file that shrank ends early. */
function positionalChunks(path: string, size: number): SkippableChunks {
  let pos = 0;
  return {
    skip(n: number): boolean {
      if (pos + n > size) return false;
      pos += n;
      return true;
    },
    async *[Symbol.asyncIterator]() {
      const fd = openSync(path, "r");
      try {
        while (pos < size) {
          const buf = Buffer.allocUnsafe(Math.min(POSITIONAL_READ_BYTES, size - pos));
          const got = readSync(fd, buf, 0, buf.length, pos);
          if (got === 0) break;
          pos += got;
          yield buf.subarray(0, got);
        }
      } finally {
        closeSync(fd);
      }
    },
  };
}

/**
 * The chunks of blob `path`, hashed as they pass; throws
 * IMAGE_BLOB_DIGEST_MISMATCH after the last one when they are not `size`
 * bytes hashing to `hex` (at once when more than `size` arrive).
 */
async function* verifyingChunks(path: string, hex: string, size: number, what: string): AsyncGenerator<Uint8Array> {
  const h = createHash("sha256");
  let seen = 0;
  for await (const c of fileChunks(path)) {
    seen += c.length;
    if (seen > size)
      throw imageError(
        "IMAGE_BLOB_DIGEST_MISMATCH",
        `${what} blob sha256:${hex} grew past its descriptor size ${size} while it was read`,
      );
    h.update(c);
    yield c;
  }
  const got = h.digest("hex");
  if (seen !== size || got !== hex)
    throw imageError(
      "IMAGE_BLOB_DIGEST_MISMATCH",
      `${what} blob sha256:${hex}: content (${seen} bytes) hashes to sha256:${got}`,
    );
}

/**
 * Reads the image in OCI layout `dir`: follows index.json (and nested
 * indexes, at most MAX_INDEX_DEPTH) to one image manifest, choosing by the
 * `org.opencontainers.image.ref.name` annotation `ref`, else the only
 * manifest, else the linux/amd64 one. Verifies the manifest and config
 * (exact size and SHA-256) and each layer blob's size before returning;
 * each layer's SHA-256 is checked by its `open()` stream (LayerInput).
 * Throws IMAGE_SOURCE_INVALID (malformed or missing documents, no usable
 * manifest, a bound exceeded), IMAGE_BLOB_DIGEST_MISMATCH (a blob differs
 * from its descriptor) or IMAGE_LAYER_UNSUPPORTED (a layer media type).
 */
export async function readOciLayout(dir: string, ref?: string): Promise<OciImageInput> {
  const layoutFile = await readFile(join(dir, "oci-layout")).catch(() => null);
  if (!layoutFile) throw bad(`${dir} is not an OCI image layout (no oci-layout file)`);
  if ((parseJson(layoutFile, "oci-layout") as { imageLayoutVersion?: unknown }).imageLayoutVersion !== "1.0.0")
    throw bad("oci-layout: imageLayoutVersion is not 1.0.0");
  const indexBytes = await readFile(join(dir, "index.json")).catch(() => null);
  if (!indexBytes) throw bad(`${dir} has no index.json`);
  if (indexBytes.length > MAX_OCI_JSON_BYTES) throw bad(`index.json is over ${MAX_OCI_JSON_BYTES} bytes`);
  const blobs = new BlobStore(dir);
  let index = parseJson(indexBytes, "index.json") as { manifests?: unknown };
  let chosen: Descriptor | null = null;
  for (let depth = 0; depth <= MAX_INDEX_DEPTH && !chosen; depth++) {
    if (!Array.isArray(index.manifests)) throw bad("index has no manifests array");
    const ds = index.manifests.map((m, i) => descriptor(m, `index manifests[${i}]`));
    const d = pick(ds, depth === 0 ? ref : undefined, depth === 0 ? "index.json" : "nested index");
    if (d.mediaType === MT.index || d.mediaType === MT.dockerList)
      index = (await blobs.json(d, "nested index")) as { manifests?: unknown };
    else chosen = d;
  }
  if (!chosen) throw bad(`image indexes nest deeper than ${MAX_INDEX_DEPTH}`);
  if (chosen.mediaType !== undefined && chosen.mediaType !== MT.manifest && chosen.mediaType !== MT.dockerManifest) {
    throw bad(`chosen descriptor has media type ${JSON.stringify(chosen.mediaType)}, not an image manifest`);
  }
  const manifest = (await blobs.json(chosen, "image manifest")) as { config?: unknown; layers?: unknown };
  const configDesc = descriptor(manifest.config, "manifest config");
  if (!Array.isArray(manifest.layers) || manifest.layers.length > MAX_OCI_LAYERS)
    throw bad(`manifest has no layers array (or more than ${MAX_OCI_LAYERS})`);
  const layerDescs = manifest.layers.map((l, i) => descriptor(l, `layer ${i}`));
  const config = checkConfig(await blobs.json(configDesc, "image config"), "image config");
  const diffIds = config.rootfs!.diff_ids!;
  if (diffIds.length !== layerDescs.length)
    throw bad(`config has ${diffIds.length} diff_ids for ${layerDescs.length} layers`);
  const layers: LayerInput[] = [];
  for (const [i, d] of layerDescs.entries()) {
    const compression = layerCompression(d.mediaType);
    layers.push({ digest: d.digest, compression, diffId: diffIds[i]!, ...(await blobs.layer(d, `layer ${i}`)) });
  }
  return {
    manifestDigest: chosen.digest,
    configDigest: configDesc.digest,
    config,
    layers,
    reference: ref ?? chosen.annotations?.["org.opencontainers.image.ref.name"] ?? "",
    platform: `${OCI_PLATFORM.os}/${OCI_PLATFORM.architecture}`,
  };
}

/** Normalizes a docker-archive member name (`./a/b` → `a/b`); null when it escapes or is empty. */
function memberName(name: string): string | null {
  const parts: string[] = [];
  for (const p of name.split("/")) {
    if (p === "" || p === ".") continue;
    if (p === "..") return null;
    parts.push(p);
  }
  return parts.length ? parts.join("/") : null;
}

/**
 * Reads a docker-archive tarball (`docker save` output). Every regular
 * member is copied once into `workDir` under a numbered name (never under
 * its own name); symlinked members (older `docker save` deduplicates layers
 * that way) resolve inside the archive only. The config must hash to the
 * hex in its member name, and each layer's uncompressed bytes to its diff
 * ID (checked while the layer is applied). `manifestDigest` is the SHA-256
 * of the archive's manifest.json, which has no OCI manifest of its own.
 * Throws IMAGE_SOURCE_INVALID or IMAGE_BLOB_DIGEST_MISMATCH.
 */
export async function readDockerArchive(archivePath: string, workDir: string, ref?: string): Promise<OciImageInput> {
  await mkdir(workDir, { recursive: true });
  const files = new Map<string, string>();
  const links = new Map<string, string>();
  let n = 0;
  try {
    for await (const e of readTar(fileChunks(archivePath))) {
      if (++n > MAX_ARCHIVE_MEMBERS) throw bad(`archive has more than ${MAX_ARCHIVE_MEMBERS} members`);
      // manifest.json names members as (UTF-8) text; a member whose name is not UTF-8 cannot be one of them.
      const text = utf8Text(e.header.path);
      const name = text === null ? null : memberName(text);
      if (!name) continue;
      if (e.header.kind === "file") {
        const p = join(workDir, `member-${n}`);
        const fh = await open(p, "wx", 0o600);
        try {
          for await (const c of e.body) await fh.write(c);
        } finally {
          await fh.close();
        }
        files.set(name, p);
      } else if (e.header.kind === "symlink" || e.header.kind === "hardlink") {
        const base = e.header.kind === "symlink" ? name.split("/").slice(0, -1).join("/") : "";
        const link = utf8Text(e.header.linkname) ?? "";
        const target = link === "" ? null : memberName(link.startsWith("/") ? link : `${base}/${link}`);
        if (target) links.set(name, target);
      }
    }
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === "IMAGE_LAYER_INVALID" || code === "IMAGE_LAYER_UNSUPPORTED")
      throw bad(`not a readable docker-archive tarball: ${(e as Error).message}`);
    throw e;
  }
  const member = (name: string): string => {
    let cur = memberName(name);
    for (let hops = 0; cur && hops < 8; hops++) {
      const f = files.get(cur);
      if (f) return f;
      cur = links.get(cur) ?? null;
    }
    throw bad(`archive member ${JSON.stringify(name.slice(0, 200))} is missing`);
  };
  const manifestPath = member("manifest.json");
  const manifestBytes = await readFile(manifestPath);
  if (manifestBytes.length > MAX_OCI_JSON_BYTES) throw bad("manifest.json is too large");
  const entries = parseJson(manifestBytes, "manifest.json") as {
    Config?: unknown;
    RepoTags?: unknown;
    Layers?: unknown;
  }[];
  if (!Array.isArray(entries) || entries.length === 0) throw bad("manifest.json lists no image");
  const entry = ref
    ? entries.find((x) => Array.isArray(x.RepoTags) && x.RepoTags.includes(ref))
    : entries.length === 1
      ? entries[0]
      : undefined;
  if (!entry)
    throw bad(
      ref
        ? `no image tagged ${JSON.stringify(ref)} in the archive`
        : `the archive holds ${entries.length} images; name one with --ref`,
    );
  if (
    typeof entry.Config !== "string" ||
    !Array.isArray(entry.Layers) ||
    entry.Layers.length > MAX_OCI_LAYERS ||
    !entry.Layers.every((l) => typeof l === "string")
  ) {
    throw bad("manifest.json entry lacks Config or Layers");
  }
  const configHex = /([0-9a-f]{64})(\.json)?$/.exec(entry.Config)?.[1];
  if (!configHex) throw bad(`config member ${JSON.stringify(entry.Config.slice(0, 200))} is not named by its digest`);
  const configPath = member(entry.Config);
  const got = await hashFile(configPath, MAX_OCI_JSON_BYTES);
  if (got.size > MAX_OCI_JSON_BYTES) throw bad("image config is too large");
  if (got.hex !== configHex)
    throw imageError("IMAGE_BLOB_DIGEST_MISMATCH", `image config hashes to sha256:${got.hex}, not sha256:${configHex}`);
  const config = checkConfig(parseJson(await readFile(configPath), "image config"), "image config");
  const diffIds = config.rootfs!.diff_ids!;
  const layerNames = entry.Layers as string[];
  if (diffIds.length !== layerNames.length)
    throw bad(`config has ${diffIds.length} diff_ids for ${layerNames.length} layers`);
  const layers: LayerInput[] = [];
  for (const [i, name] of layerNames.entries()) {
    const path = member(name);
    const head = new Uint8Array(4);
    const fh = await open(path, "r");
    await fh.read(head, 0, 4, 0).finally(() => fh.close());
    const compression: LayerCompression =
      head[0] === 0x1f && head[1] === 0x8b
        ? "gzip"
        : head[0] === 0x28 && head[1] === 0xb5 && head[2] === 0x2f && head[3] === 0xfd
          ? "zstd"
          : "none";
    const identity = await fileIdentity(path);
    const digest = `sha256:${(await hashFile(path, Number.MAX_SAFE_INTEGER)).hex}`;
    layers.push({ digest, compression, diffId: diffIds[i]!, open: () => fileChunks(path), path, identity });
  }
  const tags = Array.isArray(entry.RepoTags)
    ? (entry.RepoTags as unknown[]).filter((t): t is string => typeof t === "string")
    : [];
  return {
    manifestDigest: `sha256:${createHash("sha256").update(manifestBytes).digest("hex")}`,
    configDigest: `sha256:${configHex}`,
    config,
    layers,
    reference: ref ?? tags[0] ?? "",
    platform: `${OCI_PLATFORM.os}/${OCI_PLATFORM.architecture}`,
  };
}
