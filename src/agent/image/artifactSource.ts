/**
 * Where the image cache fetches manifests and artifacts from: the
 * "configured manifest base URL" of spec "Prepare (ensure_present)".
 *
 * Layout under a base: `<digest-hex>/manifest.json` and
 * `<digest-hex>/<artifact.path>` for each artifact (what `bb image
 * publish` writes). This module owns the `ArtifactSource` port and its
 * adapters: a local directory (or `file://` URL) and HTTP(S) (`http://…`,
 * any static web server; ranged requests let the cache resume a download).
 * Sources are untrusted: the cache verifies every byte they return.
 * Must never: resolve a path outside its base (names are checked here and
 * by the caller), follow a redirect to another origin, or put credentials
 * in `description`.
 */
import { stat } from "node:fs/promises";
import { createReadStream } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { isSafeArtifactName } from "../../protocol/image.ts";
import { imageError } from "../../image/errors.ts";

/** A read-only store of image files, addressed by image digest hex and file name. */
export interface ArtifactSource {
  /** Where this source reads from, for logs and quarantine reasons; never holds a credential. */
  readonly description: string;
  /**
   * Opens `<digestHex>/<name>` as a byte stream, from byte `fromByte`
   * (default 0) when the source can; `startsAt` says where the stream
   * really starts (0 when it could not skip). `digestHex` is 64 lowercase
   * hex; `name` is `manifest.json` or a safe artifact name. The caller stops
   * reading at its own byte bound and cancels the stream. Throws code
   * IMAGE_NOT_FOUND when the file does not exist; other errors are I/O
   * (worth a retry).
   */
  open(digestHex: string, name: string, fromByte?: number): Promise<SourceStream>;
}

/** A stream from a source, and the byte offset it starts at. */
export type SourceStream = AsyncIterable<Uint8Array> & { destroy?(): void; startsAt?: number };

function checkName(digestHex: string, name: string): void {
  if (!/^[0-9a-f]{64}$/.test(digestHex) || !isSafeArtifactName(name)) {
    throw imageError(
      "IMAGE_NOT_FOUND",
      `unsafe source path ${JSON.stringify(`${digestHex.slice(0, 80)}/${name.slice(0, 80)}`)}`,
    );
  }
}

/** Local directory source (a directory path or a `file://` URL of one). */
export class FileArtifactSource implements ArtifactSource {
  /** Absolute base directory. */
  readonly baseDir: string;
  readonly description: string;
  constructor(baseDir: string) {
    this.baseDir = resolve(baseDir);
    this.description = `file://${this.baseDir}`;
  }
  /** See ArtifactSource.open. Throws IMAGE_NOT_FOUND for a missing or non-regular file or an unsafe name. */
  async open(digestHex: string, name: string, fromByte = 0): Promise<SourceStream> {
    checkName(digestHex, name);
    const path = join(this.baseDir, digestHex, name);
    const s = await stat(path).catch(() => null);
    if (!s?.isFile()) throw imageError("IMAGE_NOT_FOUND", `${digestHex}/${name} not found in ${this.description}`);
    const start = Math.min(fromByte, s.size);
    return Object.assign(createReadStream(path, { highWaterMark: 1 << 20, start }), { startsAt: start });
  }
}

/** How long an HTTP request may wait for its response headers, ms. */
export const HTTP_HEADERS_TIMEOUT_MS = 15_000;
/** How long a download may go without receiving a byte before it is abandoned (and resumed later), ms. */
export const HTTP_IDLE_TIMEOUT_MS = 30_000;

/**
 * HTTP(S) source: GETs `<base>/<digest hex>/<name>` from any static web
 * server, with `Range: bytes=N-` when resuming. A 206 whose Content-Range
 * starts at N continues there; a 200 starts over at 0. Redirects are not
 * followed. The base must not carry credentials (userinfo).
 */
export class HttpArtifactSource implements ArtifactSource {
  readonly description: string;
  private readonly base: string;
  /** `fetchImpl` is the network port (tests may pass their own). Throws an Error for a base with userinfo, a query or a fragment. */
  constructor(
    base: string,
    private readonly fetchImpl: typeof fetch = fetch,
  ) {
    const u = new URL(base);
    if (u.protocol !== "http:" && u.protocol !== "https:")
      throw new Error(`not an http(s) image source: ${u.protocol}`);
    if (u.username || u.password || u.search || u.hash)
      throw new Error("an image source URL must not carry credentials, a query or a fragment");
    this.base = u.href.replace(/\/+$/, "");
    this.description = this.base;
  }

  /** See ArtifactSource.open. Throws IMAGE_NOT_FOUND on 404/410 or an unsafe name; an Error (I/O) on other statuses, timeouts and resets. */
  async open(digestHex: string, name: string, fromByte = 0): Promise<SourceStream> {
    checkName(digestHex, name);
    const url = `${this.base}/${digestHex}/${name}`;
    const abort = new AbortController();
    const headersTimer = setTimeout(
      () => abort.abort(new Error(`no response from ${url} within ${HTTP_HEADERS_TIMEOUT_MS} ms`)),
      HTTP_HEADERS_TIMEOUT_MS,
    );
    let res: Response;
    try {
      res = await this.fetchImpl(url, {
        headers: fromByte > 0 ? { range: `bytes=${fromByte}-` } : {},
        redirect: "manual",
        signal: abort.signal,
      });
    } finally {
      clearTimeout(headersTimer);
    }
    if (res.status === 404 || res.status === 410) {
      await res.body?.cancel().catch(() => {});
      throw imageError("IMAGE_NOT_FOUND", `${digestHex}/${name} not found at ${this.description} (HTTP ${res.status})`);
    }
    let startsAt = 0;
    if (res.status === 206) {
      const m = /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(res.headers.get("content-range") ?? "");
      startsAt = m ? Number(m[1]) : -1;
      if (startsAt !== fromByte) {
        await res.body?.cancel().catch(() => {});
        throw new Error(`${url}: range response starts at ${startsAt}, asked ${fromByte}`);
      }
    } else if (res.status !== 200 || !res.body) {
      await res.body?.cancel().catch(() => {});
      throw new Error(`${url}: HTTP ${res.status}`);
    }
    const reader = res.body!.getReader();
    let idle: ReturnType<typeof setTimeout> | undefined;
    const arm = () => {
      clearTimeout(idle);
      idle = setTimeout(
        () => abort.abort(new Error(`${url}: no data for ${HTTP_IDLE_TIMEOUT_MS} ms`)),
        HTTP_IDLE_TIMEOUT_MS,
      );
    };
    const stream = (async function* () {
      try {
        arm();
        for (;;) {
          const r = await reader.read();
          if (r.done) return;
          arm();
          yield r.value;
        }
      } finally {
        clearTimeout(idle);
        reader.releaseLock();
      }
    })();
    return Object.assign(stream, { startsAt, destroy: () => void res.body?.cancel().catch(() => {}) });
  }
}

/**
 * The ArtifactSource for a configured base: an absolute or relative
 * directory path, a `file://` URL, or an `http://`/`https://` URL. Throws an
 * Error for other schemes.
 */
export function artifactSourceFor(base: string): ArtifactSource {
  if (base.startsWith("file://")) return new FileArtifactSource(fileURLToPath(base));
  if (/^https?:\/\//i.test(base)) return new HttpArtifactSource(base);
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(base))
    throw new Error(`image source scheme not supported: ${base.split(":")[0]}`);
  return new FileArtifactSource(base);
}
