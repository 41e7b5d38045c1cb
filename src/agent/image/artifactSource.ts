/**
 * Where the image cache fetches manifests and artifacts from: the
 * "configured manifest base URL" of spec "Prepare (ensure_present)".
 *
 * Layout under a base: `<digest-hex>/manifest.json` and
 * `<digest-hex>/<artifact.path>` for each artifact. This module owns the
 * `ArtifactSource` port and its local-filesystem adapter (a directory or a
 * `file://` URL); an HTTP adapter can implement the same port later.
 * Sources are untrusted: the cache verifies every byte they return.
 * Must never: resolve a path outside its base (names are checked here and
 * by the caller), or put credentials in `description`.
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
   * Opens `<digestHex>/<name>` as a byte stream. `digestHex` is 64
   * lowercase hex; `name` is `manifest.json` or a safe artifact name. The
   * caller stops reading at its own byte bound and cancels the stream.
   * Throws code IMAGE_NOT_FOUND when the file does not exist.
   */
  open(digestHex: string, name: string): Promise<AsyncIterable<Uint8Array> & { destroy?(): void }>;
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
  async open(digestHex: string, name: string) {
    if (!/^[0-9a-f]{64}$/.test(digestHex) || !isSafeArtifactName(name)) {
      throw imageError("IMAGE_NOT_FOUND", `unsafe source path ${JSON.stringify(`${digestHex.slice(0, 80)}/${name.slice(0, 80)}`)}`);
    }
    const path = join(this.baseDir, digestHex, name);
    const s = await stat(path).catch(() => null);
    if (!s?.isFile()) throw imageError("IMAGE_NOT_FOUND", `${digestHex}/${name} not found in ${this.description}`);
    return createReadStream(path, { highWaterMark: 1 << 20 });
  }
}

/**
 * The ArtifactSource for a configured base: an absolute or relative
 * directory path, or a `file://` URL. Throws an Error for other schemes
 * (`http(s)://` is not implemented yet).
 */
export function artifactSourceFor(base: string): ArtifactSource {
  if (base.startsWith("file://")) return new FileArtifactSource(fileURLToPath(base));
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(base)) throw new Error(`image source scheme not supported yet: ${base.split(":")[0]}`);
  return new FileArtifactSource(base);
}
