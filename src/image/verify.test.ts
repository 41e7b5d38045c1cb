import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { appendFileSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { type ImageManifest, imageDigest } from "../protocol/image.ts";
import { clearVerifyMemo, verifyImage } from "./verify.ts";

const root = mkdtempSync(join(tmpdir(), "bb-verify-test-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function art(dir: string, name: string, bytes: Uint8Array) {
  writeFileSync(join(dir, name), bytes);
  return { path: name, sizeBytes: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex") };
}

let n = 0;
function makeImage(): { dir: string; digest: string; manifest: ImageManifest } {
  const dir = join(root, `img${n++}`);
  mkdirSync(dir);
  const manifest: ImageManifest = {
    schemaVersion: 1,
    architecture: "x86_64",
    kernel: art(dir, "vmlinux", new Uint8Array(100_000).fill(7)),
    rootfs: art(dir, "rootfs.ext4", new Uint8Array(300_000).fill(9)),
    initrd: art(dir, "initrd.cpio", new TextEncoder().encode("initrd")),
    kernelArgs: [],
    agentProtocolRange: "1",
    guestBootstrapVersion: "0.1.0",
    createdAt: "2025-01-01T00:00:00Z",
    signature: "",
  };
  writeFileSync(join(dir, "manifest.json"), JSON.stringify(manifest));
  return { dir, digest: imageDigest(manifest), manifest };
}

async function codeOf(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
    return undefined;
  } catch (e) {
    return (e as { code?: string }).code;
  }
}

beforeEach(() => clearVerifyMemo());

describe("verifyImage", () => {
  test("accepts an intact image and returns its manifest", async () => {
    const img = makeImage();
    expect((await verifyImage(img.dir, img.digest)).kernel.sha256).toBe(img.manifest.kernel.sha256);
    expect((await verifyImage(img.dir, img.digest)).rootfs.path).toBe("rootfs.ext4"); // memoized path
  });
  test("detects a tampered byte of the same size, even after a memoized success", async () => {
    const img = makeImage();
    await verifyImage(img.dir, img.digest);
    const bytes = new Uint8Array(300_000).fill(9);
    bytes[123_456] = 8;
    writeFileSync(join(img.dir, "rootfs.ext4"), bytes);
    utimesSync(join(img.dir, "rootfs.ext4"), new Date(), new Date(Date.now() + 5000));
    expect(await codeOf(verifyImage(img.dir, img.digest))).toBe("IMAGE_DIGEST_MISMATCH");
  });
  test("detects a wrong size", async () => {
    const img = makeImage();
    appendFileSync(join(img.dir, "vmlinux"), "x");
    expect(await codeOf(verifyImage(img.dir, img.digest))).toBe("IMAGE_DIGEST_MISMATCH");
  });
  test("detects a manifest that does not match the expected digest", async () => {
    const img = makeImage();
    expect(await codeOf(verifyImage(img.dir, `sha256:${"0".repeat(64)}`))).toBe("IMAGE_DIGEST_MISMATCH");
    const edited = { ...img.manifest, kernelArgs: ["evil=1"] };
    writeFileSync(join(img.dir, "manifest.json"), JSON.stringify(edited));
    expect(await codeOf(verifyImage(img.dir, img.digest))).toBe("IMAGE_DIGEST_MISMATCH");
  });
  test("rejects artifact paths outside the directory", async () => {
    const img = makeImage();
    const evil = { ...img.manifest, kernel: { ...img.manifest.kernel, path: "../vmlinux" } };
    writeFileSync(join(img.dir, "manifest.json"), JSON.stringify(evil));
    expect(await codeOf(verifyImage(img.dir, imageDigest(evil)))).toBe("IMAGE_DIGEST_MISMATCH");
  });
  test("reports IMAGE_NOT_FOUND for a missing directory, manifest or artifact", async () => {
    expect(await codeOf(verifyImage(join(root, "nope"), "sha256:00"))).toBe("IMAGE_NOT_FOUND");
    const img = makeImage();
    rmSync(join(img.dir, "initrd.cpio"));
    expect(await codeOf(verifyImage(img.dir, img.digest))).toBe("IMAGE_NOT_FOUND");
    rmSync(join(img.dir, "manifest.json"));
    expect(await codeOf(verifyImage(img.dir, img.digest))).toBe("IMAGE_NOT_FOUND");
  });
});
