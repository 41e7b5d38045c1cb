import { describe, expect, test } from "bun:test";
import { type ImageManifest, imageDigest } from "../protocol/image.ts";
import { generateSigningKey, isPublicKey, publicKeyOf, signManifest, verifyManifestSignature } from "./signing.ts";
import { makeTestImage } from "./testImage.ts";

const key = generateSigningKey();
const other = generateSigningKey();

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
    return undefined;
  } catch (e) {
    return (e as { code?: string }).code ?? "NO_CODE";
  }
}

describe("keys", () => {
  test("are base64 of 32 raw bytes; the public half derives from the private one", () => {
    expect(Buffer.from(key.publicKey, "base64").length).toBe(32);
    expect(Buffer.from(key.privateKey, "base64").length).toBe(32);
    expect(isPublicKey(key.publicKey)).toBe(true);
    expect(publicKeyOf(key.privateKey)).toBe(key.publicKey);
    expect(key.publicKey).not.toBe(other.publicKey);
    for (const bad of ["", "abc", key.publicKey.slice(1), `${key.publicKey}A`, Buffer.alloc(31).toString("base64")])
      expect(isPublicKey(bad)).toBe(false);
    expect(() => signManifest(makeTestImage().manifest, "not-a-key")).toThrow(/32-byte Ed25519 seed/);
  });
});

describe("signManifest / verifyManifestSignature", () => {
  const unsigned = makeTestImage().manifest;
  const signed = signManifest(unsigned, key.privateKey);

  test("a signed manifest verifies, returns the key, and keeps its digest", () => {
    expect(Buffer.from(signed.signature, "base64").length).toBe(64);
    expect(imageDigest(signed)).toBe(imageDigest(unsigned));
    expect(verifyManifestSignature(signed, [key.publicKey])).toBe(key.publicKey);
    expect(verifyManifestSignature(signed, [other.publicKey, key.publicKey])).toBe(key.publicKey); // any trusted key
    // Key order of the JSON does not matter (canonical bytes).
    const reordered = JSON.parse(JSON.stringify(Object.fromEntries(Object.entries(signed).reverse()))) as ImageManifest;
    expect(verifyManifestSignature(reordered, [key.publicKey])).toBe(key.publicKey);
  });

  test("a tampered field fails with IMAGE_SIGNATURE_INVALID", () => {
    expect(codeOf(() => verifyManifestSignature({ ...signed, kernelArgs: ["init=/bin/sh"] }, [key.publicKey]))).toBe(
      "IMAGE_SIGNATURE_INVALID",
    );
    expect(
      codeOf(() =>
        verifyManifestSignature({ ...signed, rootfs: { ...signed.rootfs, sha256: "0".repeat(64) } }, [key.publicKey]),
      ),
    ).toBe("IMAGE_SIGNATURE_INVALID");
    expect(
      codeOf(() => verifyManifestSignature({ ...signed, createdAt: "2030-01-01T00:00:00.000Z" }, [key.publicKey])),
    ).toBe("IMAGE_SIGNATURE_INVALID");
  });

  test("a signature by an untrusted key fails", () => {
    expect(codeOf(() => verifyManifestSignature(signed, [other.publicKey]))).toBe("IMAGE_SIGNATURE_INVALID");
    expect(codeOf(() => verifyManifestSignature(signManifest(unsigned, other.privateKey), [key.publicKey]))).toBe(
      "IMAGE_SIGNATURE_INVALID",
    );
  });

  test("empty, malformed or truncated signatures, no keys and malformed keys fail closed", () => {
    expect(codeOf(() => verifyManifestSignature(unsigned, [key.publicKey]))).toBe("IMAGE_SIGNATURE_INVALID");
    expect(codeOf(() => verifyManifestSignature({ ...signed, signature: "!!" }, [key.publicKey]))).toBe(
      "IMAGE_SIGNATURE_INVALID",
    );
    expect(
      codeOf(() =>
        verifyManifestSignature(
          { ...signed, signature: Buffer.from(signed.signature, "base64").subarray(0, 63).toString("base64") },
          [key.publicKey],
        ),
      ),
    ).toBe("IMAGE_SIGNATURE_INVALID");
    expect(codeOf(() => verifyManifestSignature(signed, []))).toBe("IMAGE_SIGNATURE_INVALID");
    expect(codeOf(() => verifyManifestSignature(signed, ["bogus", key.publicKey]))).toBe("IMAGE_SIGNATURE_INVALID");
  });

  test("schema 2 with rootfsFormat, initrd and source verifies; source is covered by the signature", () => {
    const m2 = makeTestImage({
      privateKey: key.privateKey,
      overrides: {
        schemaVersion: 2,
        rootfsFormat: "squashfs",
        source: {
          kind: "oci",
          reference: "docker.io/library/alpine:3.20",
          manifestDigest: `sha256:${"1".repeat(64)}`,
          configDigest: `sha256:${"2".repeat(64)}`,
          platform: "linux/amd64",
        },
      },
    }).manifest;
    expect(verifyManifestSignature(m2, [key.publicKey])).toBe(key.publicKey);
    expect(
      codeOf(() =>
        verifyManifestSignature({ ...m2, source: { ...m2.source!, reference: "evil/alpine" } }, [key.publicKey]),
      ),
    ).toBe("IMAGE_SIGNATURE_INVALID");
  });

  test("a malformed manifest is refused before the signature (IMAGE_DIGEST_MISMATCH)", () => {
    const v3 = signManifest({ ...unsigned, schemaVersion: 3 as unknown as 1 }, key.privateKey);
    expect(codeOf(() => verifyManifestSignature(v3, [key.publicKey]))).toBe("IMAGE_DIGEST_MISMATCH");
    const s1 = signManifest(
      { ...unsigned, source: { kind: "oci", reference: "r", manifestDigest: "m", configDigest: "c", platform: "p" } },
      key.privateKey,
    );
    expect(codeOf(() => verifyManifestSignature(s1, [key.publicKey]))).toBe("IMAGE_DIGEST_MISMATCH"); // source needs schema 2
  });
});
