/**
 * `bb image keygen | sign | verify` as subprocesses on a small synthetic
 * image directory (a few KiB, nothing boots). Needs no root. Leaves no
 * temporary directory behind.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { MANIFEST_FILE_NAME, imageDigest } from "../../src/protocol/image.ts";
import { makeTestImage, writeTestImage } from "../../src/image/testImage.ts";

const repo = resolve(import.meta.dir, "../..");
const bun = join(repo, "node_modules/.bin/bun");
const work = mkdtempSync(join(tmpdir(), "bb-images-cli-test-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

async function bb(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const p = Bun.spawn([bun, join(repo, "bin/bb.ts"), "image", ...args], {
    cwd: work,
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, NO_COLOR: "1" },
  });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out: out.trim(), err };
}

describe("bb image keygen / sign / verify", () => {
  const img = makeTestImage({ seed: 42 });
  const dir = writeTestImage(join(work, "img"), img);

  test("keygen writes a 0600 key and a .pub, prints the public key, and refuses to overwrite", async () => {
    const r = await bb("keygen", "--out", "release.key");
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^[A-Za-z0-9+/]{43}=$/);
    expect(statSync(join(work, "release.key")).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(work, "release.key.pub"), "utf8").trim()).toBe(r.out);
    expect(readFileSync(join(work, "release.key"), "utf8")).not.toContain(r.out);
    expect((await bb("keygen", "--out", "release.key")).code).toBe(1);
    expect((await bb("keygen")).code).toBe(2);
  });

  test("verify refuses the unsigned image with IMAGE_SIGNATURE_INVALID (exit 1)", async () => {
    const r = await bb("verify", "--trusted-key", "release.key.pub", dir);
    expect(r.code).toBe(1);
    expect(r.out).toBe("IMAGE_SIGNATURE_INVALID");
  });

  test("sign prints the unchanged digest; verify accepts it under any trusted key", async () => {
    const s = await bb("sign", "--key", "release.key", dir);
    expect(s.code).toBe(0);
    expect(s.out).toBe(img.digest);
    const onDisk = JSON.parse(readFileSync(join(dir, MANIFEST_FILE_NAME), "utf8"));
    expect(onDisk.signature).toMatch(/^[A-Za-z0-9+/]{86}==$/);
    expect(imageDigest(onDisk)).toBe(img.digest);
    const other = (await bb("keygen", "--out", "other.key")).out;
    const pub = readFileSync(join(work, "release.key.pub"), "utf8").trim();
    const v = await bb("verify", "--trusted-key", other, `--trusted-key=${pub}`, dir);
    expect([v.code, v.out]).toEqual([0, img.digest]);
    const j = await bb("verify", "--json", "--trusted-key", "release.key.pub", dir);
    expect(JSON.parse(j.out)).toEqual({ ok: true, digest: img.digest, publicKey: pub });
  });

  test("verify fails for a wrong key, a tampered manifest and a corrupted artifact, each with its code", async () => {
    const wrong = await bb("verify", "--trusted-key", "other.key.pub", dir);
    expect([wrong.code, wrong.out]).toEqual([1, "IMAGE_SIGNATURE_INVALID"]);

    const signed = readFileSync(join(dir, MANIFEST_FILE_NAME), "utf8");
    writeFileSync(
      join(dir, MANIFEST_FILE_NAME),
      JSON.stringify({ ...JSON.parse(signed), kernelArgs: ["init=/bin/sh"] }),
    );
    const tampered = await bb("verify", "--json", "--trusted-key", "release.key.pub", dir);
    expect(tampered.code).toBe(1);
    expect(JSON.parse(tampered.out)).toMatchObject({ ok: false, code: "IMAGE_SIGNATURE_INVALID" });
    writeFileSync(join(dir, MANIFEST_FILE_NAME), signed);

    writeFileSync(join(dir, "vmlinux"), "not the kernel");
    const corrupt = await bb("verify", "--trusted-key", "release.key.pub", dir);
    expect([corrupt.code, corrupt.out]).toEqual([1, "IMAGE_DIGEST_MISMATCH"]);

    expect((await bb("verify", dir)).code).toBe(2); // no --trusted-key
    expect(existsSync(join(work, "img", "manifest.json"))).toBe(true);
  });

  test("sign refuses a key file readable by others", async () => {
    writeFileSync(join(work, "loose.key"), readFileSync(join(work, "release.key")), { mode: 0o644 });
    const r = await bb("sign", "--key", "loose.key", dir);
    expect(r.code).toBe(1);
    expect(r.err).toContain("chmod 600");
  });
});
