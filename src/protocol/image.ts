/**
 * The image manifest: what a bootable Beachball image is made of, and the
 * digest that names it.
 *
 * Owns: the `ImageManifest` shape (spec "Images"), its shape check, its
 * canonical bytes and `imageDigest`. Pure: no I/O. Must never: include the
 * `signature` field in the canonical bytes (the signature is computed over
 * them), or depend on key order of the input object.
 */
import { SUPPORTED_ARCHITECTURE } from "./platform.ts";
import { canonicalJson } from "./canonical.ts";
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

/** Where an image converted by `bb image build` came from (schema 2, spec "Images"). */
export interface ImageSource {
  kind: "oci";
  /** The OCI reference the operator asked for, e.g. `docker.io/library/alpine:3.20`. */
  reference: string;
  /** `sha256:<hex>` of the OCI image manifest. */
  manifestDigest: string;
  /** `sha256:<hex>` of the OCI image config. */
  configDigest: string;
  /** OCI platform, e.g. `linux/amd64`. */
  platform: string;
}

/** A bootable image (spec "Images"). Referenced everywhere by `imageDigest(manifest)`. */
export interface ImageManifest {
  schemaVersion: 1 | 2;
  architecture: typeof SUPPORTED_ARCHITECTURE;
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
  /** Version of the guest bootstrap (`beachball-guest`) inside the image. */
  guestBootstrapVersion: string;
  /** Schema 2 only: the OCI image this was converted from. */
  source?: ImageSource;
  /** ISO 8601 build time. */
  createdAt: string;
  /** Ed25519 signature over the canonical bytes, standard base64 of 64 bytes; empty when unsigned. */
  signature: string;
}

/** Name of the manifest file inside an image directory. */
export const MANIFEST_FILE_NAME = "manifest.json";

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

/** Manifest schema versions this release understands (spec "Images"). */
export const SUPPORTED_SCHEMA_VERSIONS: readonly number[] = [1, 2];

const MANIFEST_FIELDS = new Set([
  "schemaVersion",
  "architecture",
  "kernel",
  "rootfs",
  "rootfsFormat",
  "initrd",
  "kernelArgs",
  "agentProtocolRange",
  "guestBootstrapVersion",
  "source",
  "createdAt",
  "signature",
]);

function artifactProblem(name: string, a: unknown): string | null {
  if (!a || typeof a !== "object" || Array.isArray(a)) return `${name} is not an artifact`;
  const x = a as Artifact;
  if (typeof x.path !== "string" || !isSafeArtifactName(x.path)) return `${name}.path is not a bare file name`;
  if (!Number.isSafeInteger(x.sizeBytes) || x.sizeBytes < 0) return `${name}.sizeBytes is not a non-negative integer`;
  if (typeof x.sha256 !== "string" || !/^[0-9a-f]{64}$/.test(x.sha256)) return `${name}.sha256 is not 64 lowercase hex`;
  return null;
}

/**
 * Checks that `v` has the shape of an ImageManifest (spec "Images") and
 * returns the first problem as text, or null when it is well formed.
 * Rules: schemaVersion 1 or 2; architecture x86_64; kernel, rootfs (and
 * initrd when present) are artifacts with bare file names; `source` only
 * with schema 2; a squashfs root needs an initrd; no unknown top-level
 * field (an unknown field could change meaning). Schema 1 still accepts
 * `rootfsFormat` and `initrd`, because dev images built before schema 2
 * carry them. Throws nothing.
 */
export function manifestShapeProblem(v: unknown): string | null {
  if (!v || typeof v !== "object" || Array.isArray(v)) return "manifest is not an object";
  const m = v as Record<string, unknown>;
  const unknown = Object.keys(m).find((k) => !MANIFEST_FIELDS.has(k));
  if (unknown !== undefined) return `unknown manifest field ${JSON.stringify(unknown.slice(0, 64))}`;
  if (!SUPPORTED_SCHEMA_VERSIONS.includes(m["schemaVersion"] as number))
    return `unsupported schemaVersion ${JSON.stringify(m["schemaVersion"])}`;
  if (m["architecture"] !== SUPPORTED_ARCHITECTURE) return `architecture is not ${SUPPORTED_ARCHITECTURE}`;
  for (const name of ["kernel", "rootfs"]) {
    const p = artifactProblem(name, m[name]);
    if (p) return p;
  }
  if (m["initrd"] !== undefined) {
    const p = artifactProblem("initrd", m["initrd"]);
    if (p) return p;
  }
  const fmt = m["rootfsFormat"];
  if (fmt !== undefined && fmt !== "ext4" && fmt !== "squashfs") return "rootfsFormat is neither ext4 nor squashfs";
  if (fmt === "squashfs" && m["initrd"] === undefined) return "a squashfs root needs an initrd";
  if (!Array.isArray(m["kernelArgs"]) || !m["kernelArgs"].every((a) => typeof a === "string"))
    return "kernelArgs is not a string array";
  for (const k of ["agentProtocolRange", "guestBootstrapVersion", "createdAt", "signature"]) {
    if (typeof m[k] !== "string") return `${k} is not a string`;
  }
  if (m["source"] !== undefined) {
    if (m["schemaVersion"] !== 2) return "source needs schemaVersion 2";
    const s = m["source"] as Record<string, unknown>;
    if (!s || typeof s !== "object" || s["kind"] !== "oci") return "source.kind is not oci";
    if (Object.keys(s).some((k) => !["kind", "reference", "manifestDigest", "configDigest", "platform"].includes(k)))
      return "unknown source field";
    for (const k of ["reference", "manifestDigest", "configDigest", "platform"]) {
      if (typeof s[k] !== "string") return `source.${k} is not a string`;
    }
  }
  return null;
}
