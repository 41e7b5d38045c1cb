/**
 * `bb image build` on small OCI inputs: the same input gives the same
 * digests; the squashfs holds exactly the merged tree (whiteouts applied,
 * also when they come after their siblings in a layer, ownership, modes,
 * times, hard links, device nodes), the guest and workload.json; names
 * reach the squashfs byte-exact (not UTF-8 ones too); a GNU tar layer's
 * header fields are not read as a name prefix; extended attributes the
 * squashfs cannot hold are reported, never dropped without a word;
 * hostile inputs are refused with their stable code through the CLI and
 * leave no output directory (a blob that differs from its digest however
 * its bytes were changed, or that changed during the build, too); a docker-archive tarball builds too.
 *
 * Needs mksquashfs/unsquashfs (squashfs-tools) and the Debian kernel package
 * (downloaded once into .bb/cache like the dev image). The guest binary is
 * the static busybox here (the build treats it as an opaque file), which
 * keeps each build to a few seconds.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createHash } from "node:crypto";
import { buildOciImage } from "../../src/image/oci/build.ts";
import { makeTar, writeOciLayout } from "../../src/image/oci/testLayout.ts";
import { createPrivateKeyFile } from "../../src/image/keyFile.ts";
import { verifyManifestSignature } from "../../src/image/signing.ts";
import { runRole } from "../support/processes.ts";

const skip = !Bun.which("mksquashfs") ? "mksquashfs missing (apt-get install squashfs-tools)" : "";
if (skip) console.log(`SKIP test/integration/imageBuild.test.ts: ${skip}`);
const d = skip ? describe.skip : describe;

const work = mkdtempSync(join(tmpdir(), "bb-imgbuild-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const cacheDir = resolve(".bb/cache");
const keyFile = join(work, "op.key");
const key = createPrivateKeyFile(keyFile);
writeFileSync(`${keyFile}.pub`, `${key.publicKey}\n`);

const base = makeTar([
  { path: "./" },
  { path: "bin/" },
  { path: "bin/busybox", body: readFileSync("/bin/busybox"), mode: 0o755 },
  { path: "bin/sh", kind: "symlink", linkname: "busybox" },
  { path: "bin/ls", kind: "hardlink", linkname: "bin/busybox" },
  { path: "dev/" },
  { path: "dev/null", kind: "char", devmajor: 1, devminor: 3, mode: 0o666 },
  { path: "etc/" },
  { path: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\n" },
  { path: "etc/old.conf", body: "old" },
  { path: "srv/", uid: 33, gid: 33, mode: 0o750 },
  { path: "srv/setuid", body: "x", mode: 0o4755 },
  { path: "var/" },
  { path: "var/cache/" },
  { path: "var/cache/a", body: "a" },
]);
const top = makeTar([
  { path: "etc/.wh.old.conf" },
  { path: "var/cache/.wh..wh..opq" },
  { path: "var/cache/b", body: "b" },
]);

function unsquashList(img: string): string {
  const r = Bun.spawnSync(["unsquashfs", "-lln", "-d", "", join(img, "rootfs.squashfs")]);
  return r.stdout.toString();
}

/** The squashfs's paths as byte names (one char per byte), from `unsquashfs -ls`. */
function unsquashPaths(img: string): string[] {
  const r = Bun.spawnSync(["unsquashfs", "-ls", "-d", "", join(img, "rootfs.squashfs")]);
  return r.stdout
    .toString("latin1")
    .split("\n")
    .filter((l) => l.startsWith("/"));
}

/** Names of the extended attributes on `path` (python3's os.listxattr: Bun has no xattr call). */
function getxattrNames(path: string): string[] {
  const r = Bun.spawnSync(["python3", "-c", "import os,sys,json;print(json.dumps(os.listxattr(sys.argv[1])))", path]);
  return JSON.parse(r.stdout.toString()) as string[];
}

const buildOpts = () => ({
  cacheDir,
  guestBinaryPath: "/bin/busybox",
  privateKey: readFileSync(keyFile, "utf8").trim(),
});

d("bb image build", () => {
  test("is deterministic and writes exactly the merged tree, the guest and workload.json", async () => {
    const layout = writeOciLayout(join(work, "layout"), [base, top], {
      config: { Entrypoint: ["/bin/sh", "-c"], Cmd: ["echo hi"], Env: ["A=1"], WorkingDir: "/srv", User: "33:33" },
    });
    const opts = {
      input: { kind: "oci-layout" as const, dir: layout.dir },
      cacheDir,
      guestBinaryPath: "/bin/busybox",
      privateKey: readFileSync(keyFile, "utf8").trim(),
    };
    const a = await buildOciImage({ ...opts, outDir: join(work, "a") });
    const b = await buildOciImage({ ...opts, outDir: join(work, "b") });
    expect(b.digest).toBe(a.digest);
    expect(b.manifest.rootfs.sha256).toBe(a.manifest.rootfs.sha256);
    expect(b.manifest.initrd!.sha256).toBe(a.manifest.initrd!.sha256);
    expect(a.manifest).toMatchObject({
      schemaVersion: 2,
      rootfsFormat: "squashfs",
      createdAt: "2025-06-01T00:00:00.000Z",
      source: {
        kind: "oci",
        reference: "test:latest",
        manifestDigest: layout.manifestDigest,
        configDigest: layout.configDigest,
        platform: "linux/amd64",
      },
    });
    expect(verifyManifestSignature(a.manifest, [key.publicKey])).toBe(key.publicKey);
    const list = unsquashList(a.dir);
    expect(list).not.toContain("etc/old.conf");
    expect(list).not.toContain("var/cache/a");
    expect(list).toMatch(/-rw-r--r-- 0\/0 +1 2023-11-14 22:13 \/var\/cache\/b/);
    expect(list).toMatch(/^drwxr-xr-x 0\/0 +\d+ 2025-06-01 00:00 \n/); // the root takes `created`
    expect(list).toMatch(/crw-rw-rw- 0\/0 +1, +3 .* \/dev\/null/);
    expect(list).toMatch(/drwxr-x--- 33\/33 .* \/srv\n/);
    expect(list).toMatch(/-rwsr-xr-x 0\/0 .* \/srv\/setuid/);
    expect(list).toMatch(/\/\.beachball\/beachball-guest/);
    const x = join(work, "x");
    expect(
      Bun.spawnSync(["unsquashfs", "-q", "-d", x, join(a.dir, "rootfs.squashfs"), "bin", "etc/beachball"]).exitCode,
    ).toBe(0);
    expect(Bun.spawnSync(["stat", "-c", "%i", join(x, "bin/ls")]).stdout.toString()).toBe(
      Bun.spawnSync(["stat", "-c", "%i", join(x, "bin/busybox")]).stdout.toString(),
    );
    expect(JSON.parse(readFileSync(join(x, "etc/beachball/workload.json"), "utf8"))).toEqual({
      entrypoint: ["/bin/sh", "-c"],
      cmd: ["echo hi"],
      env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "A=1"],
      workingDir: "/srv",
      user: "33:33",
    });
  }, 180_000);

  test("whiteouts after their siblings in the same layer hide only the lower layers (four layouts)", async () => {
    const layout = writeOciLayout(join(work, "wh-after"), [
      makeTar([
        { path: "a/" },
        { path: "a/sub/" },
        { path: "a/sub/old", body: "o" },
        { path: "b/" },
        { path: "b/old", body: "o" },
        { path: "c/old", body: "o" },
        { path: "d/sub/old", body: "o" },
      ]),
      makeTar([
        { path: "a/" },
        { path: "a/sub/" },
        { path: "a/sub/new", body: "n" },
        { path: "a/.wh..wh..opq" },
        { path: "b/" },
        { path: "b/new", body: "n" },
        { path: ".wh.b" },
        { path: "c/new", body: "n" },
        { path: ".wh.c" },
        { path: "d/sub/new2", body: "n" },
        { path: "d/.wh..wh..opq" },
      ]),
    ]);
    const r = await buildOciImage({
      ...buildOpts(),
      input: { kind: "oci-layout", dir: layout.dir },
      outDir: join(work, "wh-after-out"),
    });
    const paths = unsquashPaths(r.dir).filter((p) => /^\/[abcd](\/|$)/.test(p));
    expect(paths).toEqual([
      "/a",
      "/a/sub",
      "/a/sub/new",
      "/b",
      "/b/new",
      "/c",
      "/c/new",
      "/d",
      "/d/sub",
      "/d/sub/new2",
    ]);
  }, 120_000);

  test("names that are not UTF-8 reach the squashfs byte-exact (caf\\xe9 and caf\\xe8 stay two files)", async () => {
    const long = `${"l".repeat(120)}/caf\xe9`; // past 99 bytes: written as a PAX path
    const layout = writeOciLayout(join(work, "latin1"), [
      makeTar([
        { path: "n/", bytes: true },
        { path: "n/caf\xe9", body: "1", bytes: true },
        { path: "n/caf\xe8", body: "2", bytes: true },
        { path: `n/${long}`, body: "3", bytes: true },
        { path: "n/link\xff", kind: "symlink", linkname: "caf\xe9", bytes: true },
      ]),
    ]);
    const r = await buildOciImage({
      ...buildOpts(),
      input: { kind: "oci-layout", dir: layout.dir },
      outDir: join(work, "latin1-out"),
    });
    const paths = unsquashPaths(r.dir).filter((p) => p.startsWith("/n/"));
    expect(paths.sort()).toEqual(["/n/caf\xe8", "/n/caf\xe9", "/n/link\xff", `/n/${"l".repeat(120)}`, `/n/${long}`]);
    expect(
      Bun.spawnSync(["unsquashfs", "-lln", "-d", "", join(r.dir, "rootfs.squashfs")]).stdout.toString("latin1"),
    ).toContain("/n/link\xff -> caf\xe9");
  }, 120_000);

  test("a layer written by GNU tar --format=gnu -G (atime/ctime at offset 345) keeps its names", async () => {
    const src = join(work, "gnu-src");
    mkdirSync(join(src, "etc"), { recursive: true });
    writeFileSync(join(src, "gnu-file"), "g");
    writeFileSync(join(src, "etc", "gnu.conf"), "c");
    const tarPath = join(work, "gnu.tar");
    const t = Bun.spawnSync(["tar", "--format=gnu", "-G", "-cf", tarPath, "-C", src, "."], {
      env: { ...process.env, LC_ALL: "C" },
    });
    expect(t.exitCode).toBe(0);
    const layout = writeOciLayout(join(work, "gnu"), [readFileSync(tarPath)]);
    const r = await buildOciImage({
      ...buildOpts(),
      input: { kind: "oci-layout", dir: layout.dir },
      outDir: join(work, "gnu-out"),
    });
    const paths = unsquashPaths(r.dir).filter((p) => !p.startsWith("/.beachball") && !p.startsWith("/etc/beachball"));
    expect(paths).toEqual(["/etc", "/etc/gnu.conf", "/gnu-file"]);
  }, 120_000);

  test("extended attributes a squashfs cannot hold are reported by the CLI, the others kept", async () => {
    const layout = writeOciLayout(join(work, "xattr"), [
      makeTar([
        {
          path: "f",
          body: "x",
          xattrs: { "user.ok": "1", "trusted.t": "2", "system.posix_acl_access": "\u0002", "odd.name": "3" },
        },
      ]),
    ]);
    const out = join(work, "xattr-out");
    const o = await runRole([
      "image",
      "build",
      "--oci-layout",
      layout.dir,
      "--key",
      keyFile,
      "--out",
      out,
      "--cache",
      cacheDir,
      "--bb",
      "/bin/busybox",
      "--json",
    ]);
    const res = JSON.parse(o.trim().split("\n").pop()!) as { ok: boolean; dropped: { count: number; items: string[] } };
    expect(res.ok).toBe(true);
    expect(res.dropped).toEqual({ count: 2, items: ['"/f": "odd.name"', '"/f": "system.posix_acl_access"'] });
    const x = join(work, "xattr-x");
    expect(Bun.spawnSync(["unsquashfs", "-q", "-d", x, join(out, "rootfs.squashfs"), "f"]).exitCode).toBe(0);
    expect(getxattrNames(join(x, "f")).sort()).toEqual(["trusted.t", "user.ok"]);
  }, 120_000);

  const hostile: [string, () => string, string][] = [
    [
      "a layer blob whose digest does not match",
      () => {
        const l = writeOciLayout(join(work, "h-blob"), [base, top], { gzip: false });
        const p = l.layerPaths[1]!;
        const bytes = readFileSync(p);
        bytes[600] = bytes[600]! ^ 1;
        writeFileSync(p, bytes);
        return l.dir;
      },
      "IMAGE_BLOB_DIGEST_MISMATCH",
    ],
    // The digest is checked in the pass that parses the blob: a corrupt body parses fine and is refused at the
    // blob's end; corrupt compressed bytes break the decompressor first and are still refused as a mismatch.
    [
      "an uncompressed layer blob with one body byte changed (it still parses)",
      () => {
        const l = writeOciLayout(join(work, "h-body"), [base, top], { gzip: false });
        const p = l.layerPaths[0]!;
        const bytes = readFileSync(p);
        const at = bytes.indexOf(Buffer.from("root:x:0:0"));
        bytes[at] = bytes[at]! ^ 1;
        writeFileSync(p, bytes);
        return l.dir;
      },
      "IMAGE_BLOB_DIGEST_MISMATCH",
    ],
    [
      "a gzip layer blob whose compressed bytes were changed",
      () => {
        const l = writeOciLayout(join(work, "h-gz"), [base, top], { gzip: true });
        const p = l.layerPaths[0]!;
        const bytes = readFileSync(p);
        bytes[Math.floor(bytes.length / 2)] = bytes[Math.floor(bytes.length / 2)]! ^ 0xff;
        writeFileSync(p, bytes);
        return l.dir;
      },
      "IMAGE_BLOB_DIGEST_MISMATCH",
    ],
    [
      "a layer blob with bytes appended past its descriptor size",
      () => {
        const l = writeOciLayout(join(work, "h-long"), [base, top], { gzip: false });
        const p = l.layerPaths[1]!;
        writeFileSync(p, Buffer.concat([readFileSync(p), Buffer.alloc(512)]));
        return l.dir;
      },
      "IMAGE_BLOB_DIGEST_MISMATCH",
    ],
    [
      "path traversal",
      () => writeOciLayout(join(work, "h-dotdot"), [makeTar([{ path: "../../etc/cron.d/x", body: "x" }])]).dir,
      "IMAGE_LAYER_PATH_ESCAPE",
    ],
    [
      "a symlink escape",
      () =>
        writeOciLayout(join(work, "h-link"), [
          makeTar([{ path: "l", kind: "symlink", linkname: "../../../../root" }]),
          makeTar([{ path: "l/.ssh/authorized_keys", body: "k" }]),
        ]).dir,
      "IMAGE_LAYER_PATH_ESCAPE",
    ],
    [
      "a whiteout outside the root",
      () => writeOciLayout(join(work, "h-wh"), [base, makeTar([{ path: "../.wh.etc" }])]).dir,
      "IMAGE_LAYER_PATH_ESCAPE",
    ],
    [
      "a device node outside /dev",
      () =>
        writeOciLayout(join(work, "h-dev"), [makeTar([{ path: "tmp/disk", kind: "block", devmajor: 8, devminor: 0 }])])
          .dir,
      "IMAGE_LAYER_UNSUPPORTED",
    ],
  ];
  for (const [name, make, code] of hostile) {
    test(`refuses ${name} with ${code} and writes nothing`, async () => {
      const dir = make();
      const out = join(work, `out-${code}-${createHash("sha256").update(name).digest("hex").slice(0, 6)}`);
      const r = await runRole([
        "image",
        "build",
        "--oci-layout",
        dir,
        "--key",
        keyFile,
        "--out",
        out,
        "--cache",
        cacheDir,
        "--bb",
        "/bin/busybox",
        "--json",
      ]).then(
        (o) => ({ ok: true, o }),
        (e: Error) => ({ ok: false, o: e.message }),
      );
      expect(r.ok).toBe(false);
      expect(r.o).toContain(`"code":"${code}"`);
      expect(existsSync(out)).toBe(false);
      expect(existsSync(`${out}.building-${process.pid}`)).toBe(false);
    }, 60_000);
  }

  test("uncompressed layers (headers read by position, hashed in a worker) give the same squashfs as gzip ones", async () => {
    const gz = writeOciLayout(join(work, "same-gz"), [base, top], { gzip: true });
    const raw = writeOciLayout(join(work, "same-raw"), [base, top], { gzip: false });
    const a = await buildOciImage({
      ...buildOpts(),
      input: { kind: "oci-layout", dir: gz.dir },
      outDir: join(work, "same-gz-out"),
    });
    const b = await buildOciImage({
      ...buildOpts(),
      input: { kind: "oci-layout", dir: raw.dir },
      outDir: join(work, "same-raw-out"),
    });
    expect(b.manifest.rootfs.sha256).toBe(a.manifest.rootfs.sha256);
    expect(unsquashList(b.dir)).toContain("/var/cache/b");
  }, 120_000);

  test("a layer blob changed during the build (after it was hashed, before its bodies were read) is refused and writes nothing", async () => {
    const l = writeOciLayout(join(work, "h-changed"), [base, top], { gzip: false });
    const out = join(work, "out-changed");
    const p = l.layerPaths[0]!;
    // The same bytes written again: the content hashed is still the digest's, but the file changed under the build.
    const r = await buildOciImage({
      ...buildOpts(),
      input: { kind: "oci-layout", dir: l.dir },
      outDir: out,
      log: (m) => void (m.startsWith("writing the merged root") && writeFileSync(p, readFileSync(p))),
    }).then(
      () => "built",
      (e: Error & { code?: string }) => e.code,
    );
    expect(r).toBe("IMAGE_BLOB_DIGEST_MISMATCH");
    expect(existsSync(out)).toBe(false);
    expect(existsSync(`${out}.building-${process.pid}`)).toBe(false);
  }, 120_000);

  test("a docker-archive tarball builds the same tree", async () => {
    const cfg = new TextEncoder().encode(
      JSON.stringify({
        architecture: "amd64",
        os: "linux",
        config: { Cmd: ["/bin/sh"] },
        rootfs: {
          type: "layers",
          diff_ids: [base, top].map((l) => `sha256:${createHash("sha256").update(l).digest("hex")}`),
        },
      }),
    );
    const cfgHex = createHash("sha256").update(cfg).digest("hex");
    const manifest = JSON.stringify([
      { Config: `${cfgHex}.json`, RepoTags: ["test:docker"], Layers: ["l0/layer.tar", "l1/layer.tar"] },
    ]);
    const archive = makeTar([
      { path: "manifest.json", body: manifest },
      { path: `${cfgHex}.json`, body: cfg },
      { path: "l0/" },
      { path: "l0/layer.tar", body: base },
      { path: "l1/" },
      { path: "l1/layer.tar", body: top },
    ]);
    mkdirSync(join(work, "docker"), { recursive: true });
    writeFileSync(join(work, "docker", "image.tar"), archive);
    const r = await buildOciImage({
      input: { kind: "docker-archive", path: join(work, "docker", "image.tar") },
      cacheDir,
      guestBinaryPath: "/bin/busybox",
      privateKey: readFileSync(keyFile, "utf8").trim(),
      outDir: join(work, "docker-out"),
    });
    expect(r.manifest.source).toMatchObject({ reference: "test:docker", configDigest: `sha256:${cfgHex}` });
    const list = unsquashList(r.dir);
    expect(list).not.toContain("etc/old.conf");
    expect(list).toContain("/var/cache/b");
  }, 120_000);
});
