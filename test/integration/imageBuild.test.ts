/**
 * `bb image build` on small OCI inputs: the same input gives the same
 * digests; the squashfs holds exactly the merged tree (whiteouts applied,
 * ownership, modes, times, hard links, device nodes), the guest and
 * workload.json;
 * hostile inputs are refused with their stable code through the CLI and
 * leave no output directory; a docker-archive tarball builds too.
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
  { path: "./" }, { path: "bin/" }, { path: "bin/busybox", body: readFileSync("/bin/busybox"), mode: 0o755 },
  { path: "bin/sh", kind: "symlink", linkname: "busybox" }, { path: "bin/ls", kind: "hardlink", linkname: "bin/busybox" },
  { path: "dev/" }, { path: "dev/null", kind: "char", devmajor: 1, devminor: 3, mode: 0o666 },
  { path: "etc/" }, { path: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\n" }, { path: "etc/old.conf", body: "old" },
  { path: "srv/", uid: 33, gid: 33, mode: 0o750 }, { path: "srv/setuid", body: "x", mode: 0o4755 },
  { path: "var/" }, { path: "var/cache/" }, { path: "var/cache/a", body: "a" },
]);
const top = makeTar([{ path: "etc/.wh.old.conf" }, { path: "var/cache/.wh..wh..opq" }, { path: "var/cache/b", body: "b" }]);

function unsquashList(img: string): string {
  const r = Bun.spawnSync(["unsquashfs", "-lln", "-d", "", join(img, "rootfs.squashfs")]);
  return r.stdout.toString();
}

d("bb image build", () => {
  test("is deterministic and writes exactly the merged tree, the guest and workload.json", async () => {
    const layout = writeOciLayout(join(work, "layout"), [base, top], { config: { Entrypoint: ["/bin/sh", "-c"], Cmd: ["echo hi"], Env: ["A=1"], WorkingDir: "/srv", User: "33:33" } });
    const opts = { input: { kind: "oci-layout" as const, dir: layout.dir }, cacheDir, guestBinaryPath: "/bin/busybox", privateKey: readFileSync(keyFile, "utf8").trim() };
    const a = await buildOciImage({ ...opts, outDir: join(work, "a") });
    const b = await buildOciImage({ ...opts, outDir: join(work, "b") });
    expect(b.digest).toBe(a.digest);
    expect(b.manifest.rootfs.sha256).toBe(a.manifest.rootfs.sha256);
    expect(b.manifest.initrd!.sha256).toBe(a.manifest.initrd!.sha256);
    expect(a.manifest).toMatchObject({ schemaVersion: 2, rootfsFormat: "squashfs", createdAt: "2025-06-01T00:00:00.000Z", source: { kind: "oci", reference: "test:latest", manifestDigest: layout.manifestDigest, configDigest: layout.configDigest, platform: "linux/amd64" } });
    expect(verifyManifestSignature(a.manifest, [key.publicKey])).toBe(key.publicKey);
    const list = unsquashList(a.dir);
    expect(list).not.toContain("etc/old.conf");
    expect(list).not.toContain("var/cache/a");
    expect(list).toMatch(/-rw-r--r-- 0\/0 +1 2023-11-14 22:13 \/var\/cache\/b/);
    expect(list).toMatch(/^drwxr-xr-x 0\/0 +\d+ 2025-06-01 00:00 \n/); // the root takes `created`
    expect(list).toMatch(/crw-rw-rw- 0\/0 +1, +3 .* \/dev\/null/);
    expect(list).toMatch(/drwxr-x--- 33\/33 .* \/srv\n/);
    expect(list).toMatch(/-rwsr-xr-x 0\/0 .* \/srv\/setuid/);
    expect(list).toMatch(/\/\.beachball\/bb-guest/);
    const x = join(work, "x");
    expect(Bun.spawnSync(["unsquashfs", "-q", "-d", x, join(a.dir, "rootfs.squashfs"), "bin", "etc/beachball"]).exitCode).toBe(0);
    expect(Bun.spawnSync(["stat", "-c", "%i", join(x, "bin/ls")]).stdout.toString()).toBe(Bun.spawnSync(["stat", "-c", "%i", join(x, "bin/busybox")]).stdout.toString());
    expect(JSON.parse(readFileSync(join(x, "etc/beachball/workload.json"), "utf8"))).toEqual({
      entrypoint: ["/bin/sh", "-c"], cmd: ["echo hi"], env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "A=1"], workingDir: "/srv", user: "33:33",
    });
  }, 180_000);

  const hostile: [string, () => string, string][] = [
    ["a layer blob whose digest does not match", () => {
      const l = writeOciLayout(join(work, "h-blob"), [base, top], { gzip: false });
      const p = l.layerPaths[1]!;
      const bytes = readFileSync(p);
      bytes[600] = bytes[600]! ^ 1;
      writeFileSync(p, bytes);
      return l.dir;
    }, "IMAGE_BLOB_DIGEST_MISMATCH"],
    ["path traversal", () => writeOciLayout(join(work, "h-dotdot"), [makeTar([{ path: "../../etc/cron.d/x", body: "x" }])]).dir, "IMAGE_LAYER_PATH_ESCAPE"],
    ["a symlink escape", () => writeOciLayout(join(work, "h-link"), [makeTar([{ path: "l", kind: "symlink", linkname: "../../../../root" }]), makeTar([{ path: "l/.ssh/authorized_keys", body: "k" }])]).dir, "IMAGE_LAYER_PATH_ESCAPE"],
    ["a whiteout outside the root", () => writeOciLayout(join(work, "h-wh"), [base, makeTar([{ path: "../.wh.etc" }])]).dir, "IMAGE_LAYER_PATH_ESCAPE"],
    ["a device node outside /dev", () => writeOciLayout(join(work, "h-dev"), [makeTar([{ path: "tmp/disk", kind: "block", devmajor: 8, devminor: 0 }])]).dir, "IMAGE_LAYER_UNSUPPORTED"],
  ];
  for (const [name, make, code] of hostile) {
    test(`refuses ${name} with ${code} and writes nothing`, async () => {
      const dir = make();
      const out = join(work, `out-${code}-${createHash("sha256").update(name).digest("hex").slice(0, 6)}`);
      const r = await runRole(["image", "build", "--oci-layout", dir, "--key", keyFile, "--out", out, "--cache", cacheDir, "--bb", "/bin/busybox", "--json"]).then(
        (o) => ({ ok: true, o }), (e: Error) => ({ ok: false, o: e.message }));
      expect(r.ok).toBe(false);
      expect(r.o).toContain(`"code":"${code}"`);
      expect(existsSync(out)).toBe(false);
      expect(existsSync(`${out}.building-${process.pid}`)).toBe(false);
    }, 60_000);
  }

  test("a docker-archive tarball builds the same tree", async () => {
    const cfg = new TextEncoder().encode(JSON.stringify({ architecture: "amd64", os: "linux", config: { Cmd: ["/bin/sh"] }, rootfs: { type: "layers", diff_ids: [base, top].map((l) => `sha256:${createHash("sha256").update(l).digest("hex")}`) } }));
    const cfgHex = createHash("sha256").update(cfg).digest("hex");
    const manifest = JSON.stringify([{ Config: `${cfgHex}.json`, RepoTags: ["test:docker"], Layers: ["l0/layer.tar", "l1/layer.tar"] }]);
    const archive = makeTar([{ path: "manifest.json", body: manifest }, { path: `${cfgHex}.json`, body: cfg }, { path: "l0/" }, { path: "l0/layer.tar", body: base }, { path: "l1/" }, { path: "l1/layer.tar", body: top }]);
    mkdirSync(join(work, "docker"), { recursive: true });
    writeFileSync(join(work, "docker", "image.tar"), archive);
    const r = await buildOciImage({ input: { kind: "docker-archive", path: join(work, "docker", "image.tar") }, cacheDir, guestBinaryPath: "/bin/busybox", privateKey: readFileSync(keyFile, "utf8").trim(), outDir: join(work, "docker-out") });
    expect(r.manifest.source).toMatchObject({ reference: "test:docker", configDigest: `sha256:${cfgHex}` });
    const list = unsquashList(r.dir);
    expect(list).not.toContain("etc/old.conf");
    expect(list).toContain("/var/cache/b");
  }, 120_000);
});
