import { afterAll, describe, expect, test } from "bun:test";
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { MANIFEST_FILE_NAME, imageDigest } from "../../protocol/image.ts";
import { type ArtifactSource, FileArtifactSource } from "./artifactSource.ts";
import { ImageCache } from "./cache.ts";
import { generateSigningKey, signManifest } from "../../image/signing.ts";
import { makeTestImage, type TestImage, writeTestImage } from "../../image/testImage.ts";
import { FakeClock } from "../../protocol/fakeClock.ts";

const work = mkdtempSync(join(tmpdir(), "bb-cache-test-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const key = generateSigningKey();
/** A clock that stays at 2025-06-01T00:00:00Z (the one fake, src/protocol/fakeClock.ts). */
const fixedNow = () => new FakeClock({ wallMs: Date.parse("2025-06-01T00:00:00.000Z") });

let n = 0;
/** A fresh source base and cache root; `publish` writes an image under `<base>/<hex>/`. */
function setup() {
  const dir = join(work, `case${n++}`);
  const base = join(dir, "source");
  const opens: string[] = [];
  const inner = new FileArtifactSource(base);
  const source: ArtifactSource = {
    description: inner.description,
    open: (hex, name) => (opens.push(name), inner.open(hex, name)),
  };
  const publish = (img: TestImage, manifest = img.manifest) =>
    writeTestImage(join(base, img.digest.slice(7)), img, manifest);
  return { root: join(dir, "cache"), base, opens, source, publish };
}

async function codeOf(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p;
    return undefined;
  } catch (e) {
    return (e as { code?: string }).code ?? `NO_CODE: ${(e as Error).message}`;
  }
}

/** Quarantined files (without reason files) and their parsed reasons. */
function quarantined(root: string): { name: string; size: number; reason: Record<string, unknown> }[] {
  const q = join(root, "quarantine");
  return readdirSync(q)
    .filter((f) => !f.endsWith(".reason.json"))
    .map((f) => ({
      name: f,
      size: statSync(join(q, f)).size,
      reason: JSON.parse(readFileSync(join(q, `${f}.reason.json`), "utf8")),
    }));
}

describe("ImageCache.resolve", () => {
  test("fetches a signed image once, publishes verified read-only artifacts, and reuses them", async () => {
    const s = setup();
    const img = makeTestImage({ privateKey: key.privateKey });
    s.publish(img);
    const cache = new ImageCache(s.root, [key.publicKey], { clock: fixedNow() });
    const r = await cache.resolve(img.digest, s.source);
    expect(r.fetchedManifest).toBe(true);
    expect(r.fetchedArtifacts).toBe(3);
    expect(s.opens.sort()).toEqual(["initrd.cpio", "manifest.json", "rootfs.ext4", "vmlinux"]);
    expect(r.artifactPaths.rootfs).toBe(join(s.root, "artifacts", `sha256-${img.manifest.rootfs.sha256}`));
    for (const p of Object.values(r.artifactPaths)) expect(statSync(p).mode & 0o777).toBe(0o444);
    expect(new Uint8Array(readFileSync(r.artifactPaths.kernel))).toEqual(img.files.vmlinux);
    expect(existsSync(join(s.root, "manifests", `${img.digest.slice(7)}.json`))).toBe(true);
    // The view fits PlacementContext.resolveImage: dir + manifest paths, hard-linked to the artifacts.
    expect(statSync(join(r.dir, "rootfs.ext4")).ino).toBe(statSync(r.artifactPaths.rootfs).ino);
    expect(imageDigest(JSON.parse(readFileSync(join(r.dir, MANIFEST_FILE_NAME), "utf8")))).toBe(img.digest);
    expect(readdirSync(join(s.root, "tmp"))).toEqual([]);
    expect(readdirSync(join(s.root, "quarantine"))).toEqual([]);
    expect(await cache.cachedDigests()).toEqual([img.digest]);

    // Second resolve, also from a fresh instance (agent restart): no fetch at all.
    const again = await new ImageCache(s.root, [key.publicKey]).resolve(img.digest, s.source);
    expect(again.fetchedManifest).toBe(false);
    expect(again.fetchedArtifacts).toBe(0);
    expect(s.opens.length).toBe(4);
    expect(again.dir).toBe(r.dir);
  });

  test("concurrent resolves of one digest share one fetch; a file:// base works", async () => {
    const s = setup();
    const img = makeTestImage({ privateKey: key.privateKey, seed: 7 });
    s.publish(img);
    const cache = new ImageCache(s.root, [key.publicKey]);
    const [a, b] = await Promise.all([cache.resolve(img.digest, s.source), cache.resolve(img.digest, s.source)]);
    expect(a).toBe(b);
    expect(s.opens.length).toBe(4);
    const viaUrl = await new ImageCache(join(s.root, "..", "cache2"), [key.publicKey]).resolve(
      img.digest,
      pathToFileURL(s.base).href,
    );
    expect(viaUrl.fetchedArtifacts).toBe(3);
  });

  test("an artifact of the wrong size is quarantined (read only to size + 1) and IMAGE_DIGEST_MISMATCH", async () => {
    const s = setup();
    const img = makeTestImage({ privateKey: key.privateKey, seed: 11 });
    const dir = s.publish(img);
    writeFileSync(join(dir, "rootfs.ext4"), new Uint8Array(100_000).fill(1)); // much larger than declared 8 KiB
    const cache = new ImageCache(s.root, [key.publicKey], { clock: fixedNow() });
    expect(await codeOf(cache.resolve(img.digest, s.source))).toBe("IMAGE_DIGEST_MISMATCH");
    const q = quarantined(s.root);
    expect(q.length).toBe(1);
    expect(q[0]!.size).toBe(img.manifest.rootfs.sizeBytes + 1);
    expect(q[0]!.reason).toMatchObject({
      code: "IMAGE_DIGEST_MISMATCH",
      imageDigest: img.digest,
      name: "rootfs.ext4",
      at: "2025-06-01T00:00:00.000Z",
    });
    expect(statSync(join(s.root, "quarantine", q[0]!.name)).mode & 0o777).toBe(0o600);
    expect(existsSync(join(s.root, "artifacts", `sha256-${img.manifest.rootfs.sha256}`))).toBe(false);
    expect(existsSync(join(s.root, "manifests", `${img.digest.slice(7)}.json`))).toBe(false); // not cached: the image is incomplete
    // A short file is caught too.
    truncateSync(join(dir, "rootfs.ext4"), 100);
    expect(await codeOf(cache.resolve(img.digest, s.source))).toBe("IMAGE_DIGEST_MISMATCH");
    expect(
      quarantined(s.root)
        .map((x) => x.size)
        .sort((a, b) => a - b),
    ).toEqual([100, 8193]);
  });

  test("an artifact with the right size but wrong bytes is quarantined and IMAGE_DIGEST_MISMATCH", async () => {
    const s = setup();
    const img = makeTestImage({ privateKey: key.privateKey, seed: 13 });
    const dir = s.publish(img);
    const bytes = new Uint8Array(img.files.vmlinux);
    bytes[4000] = bytes[4000]! ^ 1;
    writeFileSync(join(dir, "vmlinux"), bytes);
    expect(await codeOf(new ImageCache(s.root, [key.publicKey]).resolve(img.digest, s.source))).toBe(
      "IMAGE_DIGEST_MISMATCH",
    );
    const [q] = quarantined(s.root);
    expect(q!.reason).toMatchObject({
      name: "vmlinux",
      expected: { sha256: img.manifest.kernel.sha256 },
      actual: { sizeBytes: 4096 },
    });
    expect(existsSync(join(s.root, "artifacts", `sha256-${img.manifest.kernel.sha256}`))).toBe(false);
  });

  test("a manifest that does not hash to the requested digest is quarantined; nothing else is fetched", async () => {
    const s = setup();
    const img = makeTestImage({ privateKey: key.privateKey, seed: 17 });
    // The source serves a different (validly signed!) manifest under img's digest.
    s.publish(img, signManifest({ ...img.manifest, kernelArgs: ["init=/bin/sh"] }, key.privateKey));
    expect(await codeOf(new ImageCache(s.root, [key.publicKey]).resolve(img.digest, s.source))).toBe(
      "IMAGE_DIGEST_MISMATCH",
    );
    expect(s.opens).toEqual(["manifest.json"]);
    const [q] = quarantined(s.root);
    expect(q!.reason).toMatchObject({ code: "IMAGE_DIGEST_MISMATCH", name: "manifest.json" });
    expect(readFileSync(join(s.root, "quarantine", q!.name), "utf8")).toContain("init=/bin/sh");
  });

  test("a manifest signed by an untrusted key, or unsigned, is IMAGE_SIGNATURE_INVALID and quarantined", async () => {
    const s = setup();
    const rogue = generateSigningKey();
    const img = makeTestImage({ privateKey: rogue.privateKey, seed: 19 });
    s.publish(img);
    const cache = new ImageCache(s.root, [key.publicKey]);
    expect(await codeOf(cache.resolve(img.digest, s.source))).toBe("IMAGE_SIGNATURE_INVALID");
    const unsigned = makeTestImage({ seed: 23 });
    s.publish(unsigned);
    expect(await codeOf(cache.resolve(unsigned.digest, s.source))).toBe("IMAGE_SIGNATURE_INVALID");
    expect(s.opens).toEqual(["manifest.json", "manifest.json"]); // no artifact of an untrusted image is fetched
    expect(quarantined(s.root).map((q) => q.reason["code"])).toEqual([
      "IMAGE_SIGNATURE_INVALID",
      "IMAGE_SIGNATURE_INVALID",
    ]);
    expect(readdirSync(join(s.root, "artifacts"))).toEqual([]);
  });

  test("bounds: oversized manifests and artifacts are refused before their bytes are fetched", async () => {
    const s = setup();
    const img = makeTestImage({ privateKey: key.privateKey, seed: 29 });
    s.publish(img);
    expect(
      await codeOf(new ImageCache(s.root, [key.publicKey], { maxManifestBytes: 200 }).resolve(img.digest, s.source)),
    ).toBe("IMAGE_DIGEST_MISMATCH");
    expect(
      await codeOf(new ImageCache(s.root, [key.publicKey], { maxArtifactBytes: 5000 }).resolve(img.digest, s.source)),
    ).toBe("IMAGE_DIGEST_MISMATCH");
    expect(s.opens.filter((o) => o === "rootfs.ext4")).toEqual([]); // 8 KiB rootfs over the 5000-byte bound
  });

  test("missing images and malformed digests are IMAGE_NOT_FOUND", async () => {
    const s = setup();
    const cache = new ImageCache(s.root, [key.publicKey]);
    expect(await codeOf(cache.resolve(`sha256:${"a".repeat(64)}`, s.source))).toBe("IMAGE_NOT_FOUND");
    expect(await codeOf(cache.resolve("sha256:../../etc", s.source))).toBe("IMAGE_NOT_FOUND");
    expect(() =>
      new ImageCache(s.root, []).resolve(`sha256:${"a".repeat(64)}`, "ftp://example.invalid/images"),
    ).toThrow(/not supported/);
  });

  test("a rotated key: the cached manifest no longer verifies, a re-signed one is fetched, artifacts are reused", async () => {
    const s = setup();
    const img = makeTestImage({ privateKey: key.privateKey, seed: 31 });
    const dir = s.publish(img);
    await new ImageCache(s.root, [key.publicKey]).resolve(img.digest, s.source);
    const next = generateSigningKey();
    const rotated = new ImageCache(s.root, [next.publicKey]);
    expect(await codeOf(rotated.resolve(img.digest, s.source))).toBe("IMAGE_SIGNATURE_INVALID"); // source still has the old signature
    writeFileSync(join(dir, MANIFEST_FILE_NAME), JSON.stringify(signManifest(img.manifest, next.privateKey)));
    const r = await rotated.resolve(img.digest, s.source);
    expect([r.fetchedManifest, r.fetchedArtifacts]).toEqual([true, 0]);
  });

  test("a corrupted cached artifact (wrong size) is quarantined and fetched again", async () => {
    const s = setup();
    const img = makeTestImage({ privateKey: key.privateKey, seed: 37 });
    s.publish(img);
    const cache = new ImageCache(s.root, [key.publicKey]);
    const r = await cache.resolve(img.digest, s.source);
    rmSync(r.artifactPaths.kernel);
    writeFileSync(r.artifactPaths.kernel, "short");
    const again = await cache.resolve(img.digest, s.source);
    expect(again.fetchedArtifacts).toBe(1);
    expect(new Uint8Array(readFileSync(again.artifactPaths.kernel))).toEqual(img.files.vmlinux);
    expect(statSync(join(again.dir, "vmlinux")).ino).toBe(statSync(again.artifactPaths.kernel).ino); // view relinked
    expect(quarantined(s.root).map((q) => q.size)).toEqual([5]);
  });

  test("an interrupted download resumes from the bytes it has, with at most the bound of fetches at once", async () => {
    const s = setup();
    const img = makeTestImage({ privateKey: key.privateKey, seed: 41 });
    s.publish(img);
    const inner = new FileArtifactSource(s.base);
    const starts: { name: string; from: number }[] = [];
    let open = 0;
    let maxOpen = 0;
    let cutOnce = new Set(["vmlinux", "rootfs.ext4"]);
    // A source that drops the connection after 1000 bytes, once per artifact.
    const flaky: ArtifactSource = {
      description: "flaky",
      async open(hex, name, from = 0) {
        starts.push({ name, from });
        const st = await inner.open(hex, name, from);
        const cut = cutOnce.delete(name);
        open++;
        maxOpen = Math.max(maxOpen, open);
        return Object.assign(
          (async function* () {
            let sent = 0;
            try {
              for await (const c of st) {
                await Bun.sleep(1);
                if (cut && sent + c.length > 1000) {
                  yield c.subarray(0, 1000 - sent);
                  throw new Error("connection reset");
                }
                sent += c.length;
                yield c;
              }
            } finally {
              open--;
            }
          })(),
          { startsAt: st.startsAt },
        );
      },
    };
    const retries: string[] = [];
    const cache = new ImageCache(s.root, [key.publicKey], {
      maxConcurrentFetches: 1,
      sleep: async () => {},
      onRetry: (r) => retries.push(`${r.name}@${r.haveBytes}`),
    });
    const r = await cache.resolve(img.digest, flaky);
    expect(new Uint8Array(readFileSync(r.artifactPaths.kernel))).toEqual(img.files.vmlinux);
    expect(new Uint8Array(readFileSync(r.artifactPaths.rootfs))).toEqual(img.files["rootfs.ext4"]);
    expect(retries.sort()).toEqual(["rootfs.ext4@1000", "vmlinux@1000"]);
    expect(starts.filter((x) => x.name === "vmlinux")).toEqual([
      { name: "vmlinux", from: 0 },
      { name: "vmlinux", from: 1000 },
    ]);
    expect(maxOpen).toBe(1);
    expect(readdirSync(join(s.root, "tmp"))).toEqual([]);
    cutOnce = new Set();
  });

  test("eviction removes least recently used images down to the bound, never one in use or an artifact it shares", async () => {
    const s = setup();
    const clock = new FakeClock({ wallMs: Date.parse("2025-06-01T00:00:00Z") });
    const cache = new ImageCache(s.root, [key.publicKey], { clock });
    const a = makeTestImage({ privateKey: key.privateKey, seed: 51 });
    const b = makeTestImage({ privateKey: key.privateKey, seed: 52 });
    // c shares a's kernel.
    const c = makeTestImage({ privateKey: key.privateKey, seed: 53, overrides: { kernel: a.manifest.kernel } });
    c.files.vmlinux = a.files.vmlinux;
    for (const img of [a, b, c]) s.publish(img);
    for (const img of [a, b, c]) {
      clock.advance(1000);
      await cache.resolve(img.digest, s.source);
    }
    const before = await cache.usage();
    expect(before.images).toBe(3);
    // Shared kernel stored once: 3 images, 8 distinct artifacts.
    expect(readdirSync(join(s.root, "artifacts")).length).toBe(8);
    // a is in use; b is the least recently used of the rest, then c.
    const r = await cache.evict(0, new Set([a.digest]));
    expect(r.evicted).toEqual([b.digest, c.digest]);
    expect((await cache.cachedDigests()).sort()).toEqual([a.digest]);
    for (const art of [a.manifest.kernel, a.manifest.rootfs, a.manifest.initrd!])
      expect(existsSync(join(s.root, "artifacts", `sha256-${art.sha256}`))).toBe(true);
    expect(readdirSync(join(s.root, "artifacts")).length).toBe(3);
    expect(r.artifactBytes).toBe(
      a.files.vmlinux.length + a.files["rootfs.ext4"].length + a.files["initrd.cpio"].length,
    );
    // Under a generous bound nothing goes.
    expect((await cache.evict(10 ** 9, new Set())).evicted).toEqual([]);
    // An evicted image resolves again from the source.
    expect((await cache.resolve(b.digest, s.source)).fetchedArtifacts).toBe(3);
  });
});
