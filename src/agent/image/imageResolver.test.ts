/**
 * imageResolver (src/agent/image/hostImages.ts) with and without trusted keys:
 * the resolver the daemon uses for configured image directories.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { imageResolver } from "./hostImages.ts";
import { generateSigningKey } from "../../image/signing.ts";
import { makeTestImage, writeTestImage } from "../../image/testImage.ts";
import { clearVerifyMemo } from "../../image/verify.ts";

const work = mkdtempSync(join(tmpdir(), "bb-resolver-test-"));
afterAll(() => {
  clearVerifyMemo();
  rmSync(work, { recursive: true, force: true });
});
const key = generateSigningKey();
const rogue = generateSigningKey();
const signedImg = makeTestImage({ privateKey: key.privateKey, seed: 3 });
const rogueImg = makeTestImage({ privateKey: rogue.privateKey, seed: 4 });
const unsignedImg = makeTestImage({ seed: 5 });
const dirs = [
  writeTestImage(join(work, "signed"), signedImg),
  writeTestImage(join(work, "rogue"), rogueImg),
  writeTestImage(join(work, "unsigned"), unsignedImg),
];
writeFileSync(join(work, "junk.json"), "");

async function codeOf(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
    return undefined;
  } catch (e) {
    return (e as { code?: string }).code;
  }
}

describe("imageResolver", () => {
  test("without trusted keys, unsigned dev images still resolve (today's behaviour)", async () => {
    const resolve = imageResolver(dirs);
    expect((await resolve(unsignedImg.digest)).dir).toBe(dirs[2]!);
    expect((await resolve(rogueImg.digest)).dir).toBe(dirs[1]!);
    expect(await codeOf(imageResolver(dirs, [])(unsignedImg.digest))).toBeUndefined();
  });
  test("with trusted keys, only images signed by one of them resolve", async () => {
    const resolve = imageResolver(dirs, [generateSigningKey().publicKey, key.publicKey]);
    const r = await resolve(signedImg.digest);
    expect(r.dir).toBe(dirs[0]!);
    expect(r.manifest.kernel.sha256).toBe(signedImg.manifest.kernel.sha256);
    expect(await codeOf(resolve(rogueImg.digest))).toBe("IMAGE_SIGNATURE_INVALID");
    expect(await codeOf(resolve(unsignedImg.digest))).toBe("IMAGE_SIGNATURE_INVALID");
    expect(await codeOf(resolve(`sha256:${"0".repeat(64)}`))).toBe("IMAGE_NOT_FOUND");
  });
  test("a signed image with a corrupted artifact is still IMAGE_DIGEST_MISMATCH", async () => {
    const img = makeTestImage({ privateKey: key.privateKey, seed: 6 });
    const dir = writeTestImage(join(work, "corrupt"), img);
    writeFileSync(join(dir, "rootfs.ext4"), "short");
    expect(await codeOf(imageResolver([dir], [key.publicKey])(img.digest))).toBe("IMAGE_DIGEST_MISMATCH");
  });
});
