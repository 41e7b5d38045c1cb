/**
 * Test support (not used by the builder): a small OCI image layout writer
 * and tar maker, so layer, layout and build tests (and the end-to-end image
 * tests) can make images, well formed or hostile, without a registry or a
 * container tool. Layers are tars made with this package's tar writer
 * (tar.ts), optionally gzip-compressed with node:zlib.
 * Must never: be imported by production code.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
import { TAR_END, type TarEntryKind, encodeTarHeader, tarPadding } from "./tar.ts";
import { textName } from "./byteName.ts";

/** One entry of a test tar. Names are text (written as UTF-8) unless `bytes` says they are byte names already. */
export interface TestTarEntry {
  path: string;
  bytes?: boolean;
  kind?: TarEntryKind;
  body?: string | Uint8Array;
  mode?: number;
  uid?: number;
  gid?: number;
  mtime?: number;
  linkname?: string;
  devmajor?: number;
  devminor?: number;
  xattrs?: Record<string, string>;
}

/** Encodes entries as a tar archive (with the end blocks). */
export function makeTar(entries: TestTarEntry[]): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const e of entries) {
    const kind = e.kind ?? (e.body !== undefined ? "file" : "dir");
    const body = typeof e.body === "string" ? new TextEncoder().encode(e.body) : (e.body ?? new Uint8Array(0));
    const n = (s: string) => (e.bytes ? s : textName(s));
    parts.push(
      encodeTarHeader({
        path: n(e.path),
        kind,
        mode: e.mode ?? (kind === "dir" ? 0o755 : 0o644),
        uid: e.uid ?? 0,
        gid: e.gid ?? 0,
        mtime: e.mtime ?? 1_700_000_000,
        size: kind === "file" ? body.length : 0,
        linkname: n(e.linkname ?? ""),
        devmajor: e.devmajor ?? 0,
        devminor: e.devminor ?? 0,
        xattrs: new Map(Object.entries(e.xattrs ?? {}).map(([k, v]) => [n(k), new TextEncoder().encode(v)])),
      }),
    );
    if (kind === "file") parts.push(body, tarPadding(body.length));
  }
  parts.push(TAR_END);
  return Buffer.concat(parts);
}

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

/** What writeOciLayout wrote. */
export interface TestLayout {
  dir: string;
  manifestDigest: string;
  configDigest: string;
  /** `blobs/sha256/<hex>` path of each layer, in order. */
  layerPaths: string[];
}

/**
 * Writes an OCI image layout to `dir`: each layer tar (gzip-compressed
 * unless `gzip` is false), a config with the right diff IDs and the given
 * Entrypoint/Cmd/Env/WorkingDir/User, a manifest, and index.json naming it
 * `ref` (default `test:latest`).
 */
export function writeOciLayout(
  dir: string,
  layers: Uint8Array[],
  opts: {
    gzip?: boolean;
    ref?: string;
    created?: string;
    config?: { Entrypoint?: string[]; Cmd?: string[]; Env?: string[]; WorkingDir?: string; User?: string };
  } = {},
): TestLayout {
  const blobs = join(dir, "blobs", "sha256");
  mkdirSync(blobs, { recursive: true });
  const put = (b: Uint8Array) => {
    const hex = sha(b);
    writeFileSync(join(blobs, hex), b);
    return { digest: `sha256:${hex}`, size: b.length };
  };
  const gz = opts.gzip ?? true;
  const layerDescs = layers.map((l) => ({
    mediaType: `application/vnd.oci.image.layer.v1.tar${gz ? "+gzip" : ""}`,
    ...put(gz ? gzipSync(l, { level: 1 }) : l),
  }));
  const config = {
    architecture: "amd64",
    os: "linux",
    created: opts.created ?? "2025-06-01T00:00:00Z",
    config: opts.config ?? { Cmd: ["/bin/sh"] },
    rootfs: { type: "layers", diff_ids: layers.map((l) => `sha256:${sha(l)}`) },
    history: layers.map((_, i) => ({ created_by: `test layer ${i}` })),
  };
  const configDesc = {
    mediaType: "application/vnd.oci.image.config.v1+json",
    ...put(new TextEncoder().encode(JSON.stringify(config))),
  };
  const manifest = {
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: configDesc,
    layers: layerDescs,
  };
  const manifestDesc = {
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    ...put(new TextEncoder().encode(JSON.stringify(manifest))),
    annotations: { "org.opencontainers.image.ref.name": opts.ref ?? "test:latest" },
    platform: { os: "linux", architecture: "amd64" },
  };
  writeFileSync(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  writeFileSync(join(dir, "index.json"), JSON.stringify({ schemaVersion: 2, manifests: [manifestDesc] }));
  return {
    dir,
    manifestDigest: manifestDesc.digest,
    configDigest: configDesc.digest,
    layerPaths: layerDescs.map((d) => join(blobs, d.digest.slice(7))),
  };
}
