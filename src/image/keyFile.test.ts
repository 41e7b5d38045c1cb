import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MANIFEST_FILE_NAME, imageDigest } from "../protocol/image.ts";
import {
  DEV_SIGNING_KEY_FILE,
  TRUSTED_DEV_KEY_FILE,
  createPrivateKeyFile,
  ensureDevSigned,
  readPrivateKeyFile,
  readPublicKeyArg,
  signImageDir,
} from "./keyFile.ts";
import { verifyManifestSignature } from "./signing.ts";
import { makeTestImage, writeTestImage } from "./testImage.ts";

const work = mkdtempSync(join(tmpdir(), "bb-keyfile-test-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("key files", () => {
  test("createPrivateKeyFile writes mode 0600, refuses to overwrite, and reads back", () => {
    const path = join(work, "a.key");
    const pair = createPrivateKeyFile(path);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readFileSync(path, "utf8")).toBe(`${pair.privateKey}\n`);
    expect(() => createPrivateKeyFile(path)).toThrow(/EEXIST|exists/);
    expect(readPrivateKeyFile(path)).toEqual(pair);
  });
  test("a private key file readable by group or others is refused", () => {
    const path = join(work, "loose.key");
    createPrivateKeyFile(path);
    chmodSync(path, 0o644);
    expect(() => readPrivateKeyFile(path)).toThrow(/chmod 600/);
  });
  test("readPublicKeyArg takes a base64 key or a file holding one", () => {
    const { publicKey } = createPrivateKeyFile(join(work, "b.key"));
    writeFileSync(join(work, "b.pub"), `${publicKey}\n`);
    expect(readPublicKeyArg(publicKey)).toBe(publicKey);
    expect(readPublicKeyArg(join(work, "b.pub"))).toBe(publicKey);
    expect(() => readPublicKeyArg(join(work, "nope.pub"))).toThrow(/neither/);
    expect(() => readPublicKeyArg("not a key")).toThrow(/neither/);
  });
});

describe("signImageDir / ensureDevSigned", () => {
  test("signing in place keeps the digest and verifies", () => {
    const img = makeTestImage();
    const dir = writeTestImage(join(work, "img1"), img);
    const pair = createPrivateKeyFile(join(work, "c.key"));
    const r = signImageDir(dir, pair.privateKey);
    expect(r.digest).toBe(img.digest);
    const onDisk = JSON.parse(readFileSync(join(dir, MANIFEST_FILE_NAME), "utf8"));
    expect(imageDigest(onDisk)).toBe(img.digest);
    expect(verifyManifestSignature(onDisk, [pair.publicKey])).toBe(pair.publicKey);
  });
  test("the dev key is created once (0600), the image signed and its public key written beside it", () => {
    const cache = join(work, "cache");
    const img = makeTestImage({ seed: 5 });
    const dir = writeTestImage(join(work, "dev"), img);
    const first = ensureDevSigned(dir, cache);
    expect(statSync(join(cache, DEV_SIGNING_KEY_FILE)).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(dir, TRUSTED_DEV_KEY_FILE), "utf8").trim()).toBe(first.publicKey);
    expect(verifyManifestSignature(first.manifest, [first.publicKey])).toBe(first.publicKey);
    const mtime = statSync(join(dir, MANIFEST_FILE_NAME)).mtimeMs;
    const second = ensureDevSigned(dir, cache);
    expect(second.publicKey).toBe(first.publicKey); // same key, not regenerated
    expect(statSync(join(dir, MANIFEST_FILE_NAME)).mtimeMs).toBe(mtime); // already signed: not rewritten
    expect(imageDigest(second.manifest)).toBe(img.digest);
  });
});
