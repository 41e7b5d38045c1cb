/**
 * Test support (not used by the agent): writes small synthetic image
 * directories, signed or not, so signing, cache, resolver and CLI tests
 * need no kernel, no root and no network. Must never: be imported by
 * production code.
 */
import { SUPPORTED_ARCHITECTURE } from "../protocol/platform.ts";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { type Artifact, type ImageManifest, MANIFEST_FILE_NAME, imageDigest } from "../protocol/image.ts";
import { signManifest } from "./signing.ts";

/** Deterministic pseudo-random bytes (so artifacts differ between seeds). */
export function testBytes(size: number, seed: number): Uint8Array<ArrayBuffer> {
  const b = new Uint8Array(size);
  let x = seed * 2654435761 + 1;
  for (let i = 0; i < size; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    b[i] = x >>> 24;
  }
  return b;
}

/** Describes `bytes` as an artifact named `name`. */
export function artifactOf(name: string, bytes: Uint8Array): Artifact {
  return { path: name, sizeBytes: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex") };
}

/** Files and manifest of a synthetic image. */
export interface TestImage {
  manifest: ImageManifest;
  digest: string;
  /** Artifact bytes by file name. */
  files: {
    vmlinux: Uint8Array<ArrayBuffer>;
    "rootfs.ext4": Uint8Array<ArrayBuffer>;
    "initrd.cpio": Uint8Array<ArrayBuffer>;
  };
}

/**
 * A synthetic image (kernel 4 KiB, rootfs 8 KiB, initrd 1 KiB by default)
 * signed with `privateKey` when given. `seed` varies the bytes.
 */
export function makeTestImage(
  opts: { privateKey?: string; seed?: number; overrides?: Partial<ImageManifest> } = {},
): TestImage {
  const seed = opts.seed ?? 1;
  const files: TestImage["files"] = {
    vmlinux: testBytes(4096, seed),
    "rootfs.ext4": testBytes(8192, seed + 1000),
    "initrd.cpio": testBytes(1024, seed + 2000),
  };
  let manifest: ImageManifest = {
    schemaVersion: 1,
    architecture: SUPPORTED_ARCHITECTURE,
    kernel: artifactOf("vmlinux", files.vmlinux),
    rootfs: artifactOf("rootfs.ext4", files["rootfs.ext4"]),
    rootfsFormat: "ext4",
    initrd: artifactOf("initrd.cpio", files["initrd.cpio"]),
    kernelArgs: ["quiet"],
    agentProtocolRange: "1",
    guestBootstrapVersion: "0.1.0",
    createdAt: "2025-01-01T00:00:00.000Z",
    signature: "",
    ...opts.overrides,
  };
  if (opts.privateKey) manifest = signManifest(manifest, opts.privateKey);
  return { manifest, digest: imageDigest(manifest), files };
}

/** Writes the image's files and manifest.json into `dir` (created). Returns `dir`. */
export function writeTestImage(dir: string, img: TestImage, manifest: ImageManifest = img.manifest): string {
  mkdirSync(dir, { recursive: true });
  for (const [name, bytes] of Object.entries(img.files)) writeFileSync(join(dir, name), bytes);
  writeFileSync(join(dir, MANIFEST_FILE_NAME), JSON.stringify(manifest, null, 2));
  return dir;
}
