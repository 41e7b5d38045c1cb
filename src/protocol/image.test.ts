import { describe, expect, test } from "bun:test";
import {
  type ImageManifest,
  canonicalManifestBytes,
  imageDigest,
  isSafeArtifactName,
  manifestShapeProblem,
} from "./image.ts";

const base: ImageManifest = {
  schemaVersion: 1,
  architecture: "x86_64",
  kernel: { path: "vmlinux", sizeBytes: 10, sha256: "a".repeat(64) },
  rootfs: { path: "rootfs.ext4", sizeBytes: 20, sha256: "b".repeat(64) },
  rootfsFormat: "ext4",
  kernelArgs: ["x=1", "y=2"],
  agentProtocolRange: "1",
  guestBootstrapVersion: "0.1.0",
  createdAt: "2025-01-01T00:00:00.000Z",
  signature: "",
};

describe("imageDigest", () => {
  test("is sha256:<64 hex> and deterministic", () => {
    expect(imageDigest(base)).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(imageDigest(base)).toBe(imageDigest(structuredClone(base)));
  });
  test("ignores key order at every level", () => {
    const shuffled = JSON.parse(
      `{"signature":"","kernelArgs":["x=1","y=2"],"rootfs":{"sha256":"${"b".repeat(64)}","sizeBytes":20,"path":"rootfs.ext4"},` +
        `"kernel":{"sizeBytes":10,"sha256":"${"a".repeat(64)}","path":"vmlinux"},"guestBootstrapVersion":"0.1.0","createdAt":"2025-01-01T00:00:00.000Z",` +
        `"architecture":"x86_64","agentProtocolRange":"1","rootfsFormat":"ext4","schemaVersion":1}`,
    ) as ImageManifest;
    expect(imageDigest(shuffled)).toBe(imageDigest(base));
  });
  test("excludes the signature but covers every other field", () => {
    expect(imageDigest({ ...base, signature: "c2ln" })).toBe(imageDigest(base));
    expect(imageDigest({ ...base, kernelArgs: ["y=2", "x=1"] })).not.toBe(imageDigest(base));
    expect(imageDigest({ ...base, kernel: { ...base.kernel, sizeBytes: 11 } })).not.toBe(imageDigest(base));
  });
  test("canonical bytes are sorted, compact JSON without signature", () => {
    const text = new TextDecoder().decode(canonicalManifestBytes(base));
    expect(text.startsWith('{"agentProtocolRange":"1","architecture":"x86_64","createdAt"')).toBe(true);
    expect(text).not.toContain("signature");
    expect(text).not.toContain(" ");
  });
});

test("isSafeArtifactName rejects paths", () => {
  expect(isSafeArtifactName("rootfs.ext4")).toBe(true);
  for (const bad of ["../x", "a/b", "/etc/passwd", "..", ".", ""]) expect(isSafeArtifactName(bad)).toBe(false);
});

describe("manifestShapeProblem", () => {
  const source = {
    kind: "oci",
    reference: "alpine:3.20",
    manifestDigest: "sha256:1",
    configDigest: "sha256:2",
    platform: "linux/amd64",
  } as const;
  const initrd = { path: "initrd.cpio", sizeBytes: 5, sha256: "c".repeat(64) };
  test("accepts schema 1 (with rootfsFormat/initrd, as dev images carry) and schema 2 with source", () => {
    expect(manifestShapeProblem(base)).toBeNull();
    expect(manifestShapeProblem({ ...base, initrd })).toBeNull();
    expect(manifestShapeProblem({ ...base, schemaVersion: 2, rootfsFormat: "squashfs", initrd, source })).toBeNull();
  });
  test("names the first problem", () => {
    const cases: [unknown, RegExp][] = [
      [null, /not an object/],
      [{ ...base, schemaVersion: 3 }, /unsupported schemaVersion/],
      [{ ...base, architecture: "aarch64" }, /architecture/],
      [{ ...base, kernel: { ...base.kernel, path: "../vmlinux" } }, /kernel.path/],
      [{ ...base, rootfs: { ...base.rootfs, sizeBytes: -1 } }, /rootfs.sizeBytes/],
      [{ ...base, rootfs: { ...base.rootfs, sha256: "A".repeat(64) } }, /rootfs.sha256/],
      [{ ...base, rootfsFormat: "btrfs" }, /rootfsFormat/],
      [{ ...base, schemaVersion: 2, rootfsFormat: "squashfs" }, /needs an initrd/],
      [{ ...base, source }, /source needs schemaVersion 2/],
      [{ ...base, schemaVersion: 2, source: { ...source, extra: 1 } }, /unknown source field/],
      [{ ...base, kernelArgs: "quiet" }, /kernelArgs/],
      [{ ...base, signature: undefined }, /signature/],
      [{ ...base, bootloader: "grub" }, /unknown manifest field/],
    ];
    for (const [v, re] of cases) expect(manifestShapeProblem(v)).toMatch(re);
  });
});
