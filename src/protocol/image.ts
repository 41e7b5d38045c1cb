/**
 * The image manifest: what a bootable Beachball image is made of, and the
 * digest that names it.
 *
 * Owns: the `ImageManifest` shape (spec "Images"), its canonical bytes and
 * `imageDigest`. Pure: no I/O. Must never: include the `signature` field in
 * the canonical bytes (the signature is computed over them), or depend on
 * key order of the input object.
 */
import { createHash } from "node:crypto";

/** One file of an image. `path` is a bare file name relative to the manifest's directory. */
export interface Artifact {
  /** File name in the manifest's directory (no `/`, never `..`). */
  path: string;
  /** Exact size in bytes. */
  sizeBytes: number;
  /** SHA-256 of the file's bytes, lowercase hex (64 characters). */
  sha256: string;
}

/** A bootable image (spec "Images"). Referenced everywhere by `imageDigest(manifest)`. */
export interface ImageManifest {
  schemaVersion: 1 | 2;
  architecture: "x86_64";
  /** Uncompressed kernel ELF (PVH entry for QEMU microvm). */
  kernel: Artifact;
  rootfs: Artifact;
  /** Schema 2; `ext4` when absent. */
  rootfsFormat?: "ext4" | "squashfs";
  /** Initramfs (required for squashfs roots; the dev image always has one). */
  initrd?: Artifact;
  /** Kernel arguments the image needs, appended before per-placement arguments. */
  kernelArgs: string[];
  /** Range of host–guest protocol versions the guest speaks, e.g. `"1"`. */
  agentProtocolRange: string;
  /** Version of `bb guest` inside the image. */
  guestBootstrapVersion: string;
  /** ISO 8601 build time. */
  createdAt: string;
  /** Ed25519 signature over the canonical bytes, base64; empty for dev images. */
  signature: string;
}

/** Name of the manifest file inside an image directory. */
export const MANIFEST_FILE_NAME = "manifest.json";

/** JSON with object keys sorted recursively (arrays keep their order). */
function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(",")}]`;
  const obj = v as Record<string, unknown>;
  const keys = Object.keys(obj)
    .filter((k) => obj[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(",")}}`;
}

/**
 * Canonical bytes of a manifest: UTF-8 JSON with keys sorted at every level,
 * no whitespace, the top-level `signature` field excluded, `undefined`
 * fields dropped. The signature (spec "Images") and the digest cover these
 * bytes. Throws nothing.
 */
export function canonicalManifestBytes(manifest: ImageManifest): Uint8Array {
  const { signature: _signature, ...unsigned } = manifest;
  return new TextEncoder().encode(canonicalJson(unsigned));
}

/**
 * The image's identity: `sha256:<hex>` over `canonicalManifestBytes`.
 * Independent of key order and of the signature. Throws nothing.
 */
export function imageDigest(manifest: ImageManifest): string {
  return `sha256:${createHash("sha256").update(canonicalManifestBytes(manifest)).digest("hex")}`;
}

/** True when `name` is a bare file name an artifact may use (no path separators, not `.`/`..`). */
export function isSafeArtifactName(name: string): boolean {
  return /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(name) && name !== "." && name !== "..";
}
