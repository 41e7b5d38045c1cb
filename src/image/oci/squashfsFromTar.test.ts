/**
 * squashfsFromTar with the real mksquashfs: bodies shorter and longer than
 * a pipe batch, and ones that end exactly on a batch boundary, reach the
 * squashfs byte for byte; a failing producer, a staged body that ends early
 * and a failing mksquashfs each give their own error.
 * Needs mksquashfs and unsquashfs (squashfs-tools).
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TAR_END, encodeTarHeader, tarPadding } from "./tar.ts";
import { SQUASHFS_PIPE_BATCH_BYTES, type SquashfsOptions, squashfsFromTar } from "./squashfsFromTar.ts";

const skip = !Bun.which("mksquashfs") || !Bun.which("unsquashfs");
const d = skip ? describe.skip : describe;
const work = mkdtempSync(join(tmpdir(), "bb-sqfs-tar-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const opts: SquashfsOptions = {
  compressor: "zstd",
  level: 1,
  root: { mode: 0o755, uid: 0, gid: 0 },
  sourceDateEpoch: 0,
};

/** A staging file of seeded bytes and the bodies cut from it: sizes around a pipe batch, and empty. */
function staged(): { path: string; data: Buffer; bodies: { name: string; offset: number; size: number }[] } {
  const B = SQUASHFS_PIPE_BATCH_BYTES;
  const sizes = [0, 1, 511, 4096, B - 512 - 4096 - 1024 - 1536, B - 1, B, 3 * B + 5, 700];
  const data = Buffer.alloc(sizes.reduce((a, b) => a + b, 0) + 1000);
  let x = 7;
  for (let i = 0; i < data.length; i++) data[i] = (x = (x * 1103515245 + 12345) & 0x7fffffff) >> 16;
  const path = join(work, "stage.bin");
  writeFileSync(path, data);
  let at = 13;
  const bodies = sizes.map((size, i) => {
    const b = { name: `f${i}`, offset: at, size };
    at += size;
    return b;
  });
  return { path, data, bodies };
}

const header = (name: string, size: number) =>
  encodeTarHeader({
    path: name,
    kind: "file",
    mode: 0o644,
    uid: 0,
    gid: 0,
    mtime: 1,
    size,
    linkname: "",
    devmajor: 0,
    devminor: 0,
    xattrs: new Map(),
  });

d("squashfsFromTar", () => {
  test("bodies shorter and longer than a pipe batch, and ones ending on its boundary, reach the squashfs byte for byte", async () => {
    const s = staged();
    const out = join(work, "ok.squashfs");
    await squashfsFromTar(out, opts, async (sink) => {
      for (const b of s.bodies) {
        await sink.write(header(b.name, b.size));
        await sink.copyBody({ path: s.path, offset: b.offset, size: b.size });
        await sink.write(tarPadding(b.size));
      }
      await sink.write(TAR_END);
    });
    for (const b of s.bodies) {
      const got = Bun.spawnSync(["unsquashfs", "-cat", out, b.name]).stdout;
      expect(Buffer.compare(Buffer.from(got), s.data.subarray(b.offset, b.offset + b.size))).toBe(0);
    }
  });

  test("a producer's error passes through as it is and mksquashfs is ended", async () => {
    const out = join(work, "thrown.squashfs");
    await expect(
      squashfsFromTar(out, opts, async (sink) => {
        await sink.write(header("a", 0));
        throw new Error("producer gave up");
      }),
    ).rejects.toThrow("producer gave up");
    expect(readdirSync(work).filter((n) => n.startsWith("thrown"))).toEqual(existsSync(out) ? ["thrown.squashfs"] : []);
  });

  test("a staged body that ends early is refused, whether it is longer than a batch or not", async () => {
    const s = staged();
    for (const size of [SQUASHFS_PIPE_BATCH_BYTES * 2, 100]) {
      const out = join(work, `short-${size}.squashfs`);
      await expect(
        squashfsFromTar(out, opts, async (sink) => {
          await sink.write(header("big", size));
          await sink.copyBody({ path: s.path, offset: s.data.length - 10, size });
        }),
      ).rejects.toThrow("ends early");
    }
  });

  test("a failing mksquashfs is reported with its own output, however much was written", async () => {
    const s = staged();
    const out = join(work, "bad.squashfs");
    const err = await squashfsFromTar(out, { ...opts, compressor: "no-such-compressor" }, async (sink) => {
      for (let i = 0; i < 20; i++) {
        await sink.write(header(`f${i}`, s.bodies[7]!.size));
        await sink.copyBody({ path: s.path, offset: s.bodies[7]!.offset, size: s.bodies[7]!.size });
      }
      await sink.write(TAR_END);
    }).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toContain("mksquashfs exited");
    expect((err as Error).message).toContain("no-such-compressor");
  });
});
