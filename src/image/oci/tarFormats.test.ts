/**
 * The tar reader on each header variant writers use, from real GNU tar
 * (Debian's `tar`) and from hand-made header blocks: each variant's fields
 * are read by its own layout (GNU atime/ctime are no name prefix, star's
 * prefix is 131 bytes, v7 has none), names and xattr names stay byte-exact,
 * and what cannot be read faithfully is refused with a stable code.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type SkippableChunks, type TarHeader, encodeTarHeader, readTar } from "./tar.ts";
import { createHash } from "node:crypto";
import { makeTar } from "./testLayout.ts";
import { byteName } from "./byteName.ts";

const work = mkdtempSync(join(tmpdir(), "bb-tarfmt-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const haveTar = Bun.spawnSync(["tar", "--version"]).stdout.toString().includes("GNU tar");

async function* chunked(b: Uint8Array): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < b.length; i += 700) yield b.subarray(i, i + 700);
}

async function headers(b: Uint8Array): Promise<TarHeader[]> {
  const out: TarHeader[] = [];
  for await (const e of readTar(chunked(b))) {
    out.push(e.header);
    for await (const _ of e.body) {
      /* skip */
    }
  }
  return out;
}

async function code(p: Promise<unknown>): Promise<string | undefined> {
  return p.then(
    () => undefined,
    (e: { code?: string }) => e.code ?? String(e),
  );
}

/** GNU tar run in `dir` with the C locale (names as bytes); returns the archive. */
function gnuTar(dir: string, args: string[]): Uint8Array {
  const out = join(work, `t${Math.random().toString(36).slice(2)}.tar`);
  const r = Bun.spawnSync(["tar", ...args, "-cf", out, "-C", dir, "."], { env: { ...process.env, LC_ALL: "C" } });
  if (r.exitCode !== 0) throw new Error(`tar failed: ${r.stderr.toString()}`);
  return readFileSync(out);
}

/** One hand-made header block: fields at their offsets, then a valid checksum. */
function block(fields: [number, string | Uint8Array][]): Uint8Array {
  const b = new Uint8Array(512);
  for (const [off, v] of fields) b.set(typeof v === "string" ? Buffer.from(v, "latin1") : v, off);
  b.fill(0x20, 148, 156);
  let sum = 0;
  for (const x of b) sum += x;
  b.set(Buffer.from(`${sum.toString(8).padStart(6, "0")}\0 `), 148);
  return b;
}

const common = (name: string, typeflag: string, size = 0): [number, string][] => [
  [0, name],
  [100, "0000644\0"],
  [108, "0000000\0"],
  [116, "0000000\0"],
  [124, `${size.toString(8).padStart(11, "0")}\0`],
  [136, "14565713056\0"],
  [156, typeflag],
];
const POSIX: [number, string][] = [
  [257, "ustar\0"],
  [263, "00"],
];
const GNU: [number, string][] = [[257, "ustar  \0"]];
const END = new Uint8Array(1024);
const pad = (n: number) => new Uint8Array((512 - (n % 512)) % 512);
const tarOf = (...parts: Uint8Array[]) => Buffer.concat([...parts, END]);

/** A PAX `x` header carrying `records` (key → raw value bytes). */
function pax(records: [string, string][]): Uint8Array {
  const body = Buffer.concat(
    records.map(([k, v]) => {
      const rest = Buffer.from(` ${k}=${v}\n`, "latin1");
      let len = rest.length + 1;
      while (String(len).length + rest.length !== len) len = String(len).length + rest.length;
      return Buffer.concat([Buffer.from(String(len)), rest]);
    }),
  );
  return Buffer.concat([block([...common("././@PaxHeader", "x", body.length), ...POSIX]), body, pad(body.length)]);
}

describe("GNU tar headers are not read as POSIX", () => {
  test("GNU atime/ctime at offset 345 are no name prefix (hand-made header)", async () => {
    const h = block([...common("gnu-file", "0"), ...GNU, [345, "14565713056\0"], [357, "14565713056\0"]]);
    expect((await headers(tarOf(h))).map((x) => x.path)).toEqual(["gnu-file"]);
  });
  test.skipIf(!haveTar)(
    "real `tar --format=gnu -G` (dumpdir D records) and `--format=oldgnu` members keep their names",
    async () => {
      const d = join(work, "gnu");
      mkdirSync(d);
      writeFileSync(join(d, "gnu-file"), "g");
      for (const args of [["--format=gnu", "-G"], ["--format=oldgnu"], ["--format=gnu", "--atime-preserve"]]) {
        const hs = await headers(gnuTar(d, args));
        expect(hs.map((x) => [x.path, x.kind])).toEqual([
          ["./", "dir"],
          ["./gnu-file", "file"],
        ]);
      }
    },
  );
  test.skipIf(!haveTar)("real GNU long names and long link targets (L and K records) are exact", async () => {
    const d = join(work, "long");
    const deep = join(d, "x".repeat(120), "y".repeat(120));
    mkdirSync(deep, { recursive: true });
    writeFileSync(join(deep, `f${"é".repeat(30)}`), "1");
    symlinkSync(`../${"t".repeat(180)}`, join(d, "l"));
    const hs = await headers(gnuTar(d, ["--format=gnu"]));
    expect(hs.map((x) => x.path)).toContain(
      byteName(Buffer.from(`./${"x".repeat(120)}/${"y".repeat(120)}/f${"é".repeat(30)}`)),
    );
    expect(hs.find((x) => x.path === "./l")!.linkname).toBe(`../${"t".repeat(180)}`);
  });
});

describe("other header variants", () => {
  test("star: the prefix is 131 bytes; atime and ctime after it are not part of the name", async () => {
    const prefix = "p".repeat(131);
    const h = block([
      ...common("star-file", "0"),
      ...POSIX,
      [345, prefix],
      [476, "14565713056\0"],
      [488, "14565713056\0"],
      [508, "tar\0"],
    ]);
    expect((await headers(tarOf(h))).map((x) => x.path)).toEqual([`${prefix}/star-file`]);
  });
  test("POSIX ustar: the 155-byte prefix joins the name", async () => {
    const h = block([...common("file", "0"), ...POSIX, [345, "a/b"]]);
    expect((await headers(tarOf(h))).map((x) => x.path)).toEqual(["a/b/file"]);
  });
  test("v7: no prefix, and a NUL-type member whose name ends in / is a directory", async () => {
    const dir = block([...common("d/", "\0"), [345, "junk"]]);
    const file = block([...common("d/f", "\0"), [345, "junk"]]);
    const hs = await headers(tarOf(dir, file));
    expect(hs.map((x) => [x.path, x.kind])).toEqual([
      ["d/", "dir"],
      ["d/f", "file"],
    ]);
  });
  test("a regular-file member whose name ends in / is IMAGE_LAYER_INVALID (not silently a file without the slash)", async () => {
    expect(await code(headers(tarOf(block([...common("x/", "0"), ...POSIX]))))).toBe("IMAGE_LAYER_INVALID");
  });
  test("an unknown magic, or ustar with an unknown version, is IMAGE_LAYER_UNSUPPORTED", async () => {
    expect(await code(headers(tarOf(block([...common("f", "0"), [257, "ustar\0"], [263, "\0\0"]]))))).toBe(
      "IMAGE_LAYER_UNSUPPORTED",
    );
    expect(await code(headers(tarOf(block([...common("f", "0"), [257, "pstar\0"], [263, "00"]]))))).toBe(
      "IMAGE_LAYER_UNSUPPORTED",
    );
  });
  test("a checksum summed over signed bytes (old writers) is accepted", async () => {
    const h = block([...common("caf\xe9", "0"), ...POSIX]);
    let signed = 0;
    h.fill(0x20, 148, 156);
    for (const x of h) signed += x > 127 ? x - 256 : x;
    h.set(Buffer.from(`${signed.toString(8).padStart(6, "0")}\0 `), 148);
    expect((await headers(tarOf(h))).map((x) => x.path)).toEqual(["caf\xe9"]);
  });
});

describe("names and extended attributes stay byte-exact", () => {
  test("PAX paths caf\\xe9 and caf\\xe8 (not UTF-8) stay two names, byte for byte", async () => {
    const t = tarOf(
      pax([["path", "caf\xe9"]]),
      block([...common("x", "0"), ...POSIX]),
      pax([["path", "caf\xe8"]]),
      block([...common("y", "0"), ...POSIX]),
    );
    const hs = await headers(t);
    expect(hs.map((x) => Buffer.from(x.path, "latin1").toString("hex"))).toEqual([
      Buffer.from("caf\xe9", "latin1").toString("hex"),
      Buffer.from("caf\xe8", "latin1").toString("hex"),
    ]);
  });
  test.skipIf(!haveTar)("real GNU tar --format=posix with Latin-1 names: both files, exact bytes", async () => {
    const d = join(work, "latin1");
    mkdirSync(d);
    writeFileSync(Buffer.from(`${d}/caf\xe9`, "latin1"), "1");
    writeFileSync(Buffer.from(`${d}/caf\xe8`, "latin1"), "2");
    const paths = (await headers(gnuTar(d, ["--format=posix"])))
      .map((x) => x.path)
      .filter((p) => p !== "./")
      .sort();
    expect(paths).toEqual(["./caf\xe8", "./caf\xe9"]);
  });
  test("xattr names are byte names; LIBARCHIVE.xattr (bsdtar) is read; POSIX ACL records are kept as unkept", async () => {
    const t = tarOf(
      pax([
        ["SCHILY.xattr.user.caf\xe9", "v1"],
        ["LIBARCHIVE.xattr.user.%41b", Buffer.from("\x00\x01").toString("base64")],
        ["SCHILY.acl.access", "user::rw-"],
      ]),
      block([...common("f", "0"), ...POSIX]),
    );
    const [h] = await headers(t);
    expect([...h!.xattrs.keys()].sort()).toEqual(["user.Ab", "user.caf\xe9"]);
    expect([...h!.xattrs.get("user.Ab")!]).toEqual([0, 1]);
    expect(h!.unkept).toEqual(["SCHILY.acl.access"]);
  });
  test("global PAX records apply to later members", async () => {
    const g = pax([
      ["uid", "4242"],
      ["SCHILY.xattr.user.g", "1"],
    ]);
    g[156] = "g".charCodeAt(0);
    const fixed = block([
      ...[...g.subarray(0, 512)]
        .map((b, i): [number, string] => [i, String.fromCharCode(b)])
        .filter(([i]) => i < 148 || i >= 156),
    ]);
    const t = tarOf(fixed, g.subarray(512), block([...common("f", "0"), ...POSIX]));
    const [h] = await headers(t);
    expect(h!.uid).toBe(4242);
    expect([...h!.xattrs.keys()]).toEqual(["user.g"]);
  });
  test.skipIf(!haveTar)(
    "a GNU PAX sparse file (tar --sparse --format=posix) is IMAGE_LAYER_UNSUPPORTED, not a file with the wrong bytes",
    async () => {
      const d = join(work, "sparse");
      mkdirSync(d);
      Bun.spawnSync(["truncate", "-s", "1M", join(d, "s")]);
      Bun.spawnSync(["sh", "-c", `printf data | dd of=${join(d, "s")} bs=1 seek=4096 conv=notrunc 2>/dev/null`]);
      expect(await code(headers(gnuTar(d, ["--format=posix", "--sparse"])))).toBe("IMAGE_LAYER_UNSUPPORTED");
    },
  );
  test("a non-numeric PAX number is IMAGE_LAYER_INVALID and names the member", async () => {
    const err = await headers(
      tarOf(
        pax([
          ["path", "caf\xe9"],
          ["uid", "0x10"],
        ]),
        block([...common("f", "0"), ...POSIX]),
      ),
    ).then(
      () => null,
      (e: Error & { code?: string }) => e,
    );
    expect(err?.code).toBe("IMAGE_LAYER_INVALID");
    expect(err?.message).toContain('"caf\\xe9"');
  });
});

/** A SkippableChunks over `b` (as layout.ts reads a blob by position), counting the bytes it really yields. */
function skippable(b: Uint8Array, read: { bytes: number }): SkippableChunks {
  let pos = 0;
  return {
    skip(n: number) {
      if (pos + n > b.length) return false;
      pos += n;
      return true;
    },
    async *[Symbol.asyncIterator]() {
      while (pos < b.length) {
        const c = b.subarray(pos, pos + 4096);
        pos += c.length;
        read.bytes += c.length;
        yield c;
      }
    },
  };
}

describe("a tar read by position (bodies jumped over)", () => {
  const big = new Uint8Array(300_000).fill(1);
  const tar = makeTar([
    { path: "a/" },
    { path: "a/big", body: big },
    { path: "a/small", body: "s" },
    { path: "a/big2", body: big },
    { path: "z", kind: "symlink", linkname: "a" },
  ]);

  test("gives the same headers and body offsets as the stream, without reading the bodies it skips", async () => {
    const seen = async (src: AsyncIterable<Uint8Array>) => {
      const out: string[] = [];
      for await (const e of readTar(src)) out.push(`${e.header.path}:${e.header.size}@${e.offset}`);
      return out;
    };
    const read = { bytes: 0 };
    expect(await seen(skippable(tar, read))).toEqual(await seen(chunked(tar)));
    expect(read.bytes).toBeLessThan(tar.length - 2 * big.length + 2 * 4096);
  });

  test("a body cut short is refused IMAGE_LAYER_INVALID (truncated) there too", async () => {
    const cut = tar.subarray(0, 512 * 3 + 1000);
    expect(
      await code(
        (async () => {
          for await (const _ of readTar(skippable(cut, { bytes: 0 }))) {
            /* skip */
          }
        })(),
      ),
    ).toBe("IMAGE_LAYER_INVALID");
  });
});

describe("the writer's canonical form", () => {
  // The digest of these headers as the first writer spelled them: a faster writer must give the same bytes
  // (image digests of the same input stay the same), numbers too large for their field included.
  test("seeded headers (byte names, PAX records, oversized numbers) encode to the same bytes as always", () => {
    let seed = 18;
    const r = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const big = [0, 1, 7, 8, 0o7777777, 0o10000000, 2 ** 31, 0o77777777777, 0o100000000000, 2 ** 40];
    const pick = () => (r() < 0.5 ? Math.floor(r() * 70000) : big[Math.floor(r() * big.length)]!);
    const name = () => {
      let s = "";
      const n = 1 + Math.floor(r() * 130);
      for (let i = 0; i < n; i++)
        s += String.fromCharCode(r() < 0.1 ? 128 + Math.floor(r() * 128) : 97 + Math.floor(r() * 26));
      return s;
    };
    const kinds = ["file", "hardlink", "symlink", "char", "block", "dir", "fifo"] as const;
    const h = createHash("sha256");
    for (let i = 0; i < 2000; i++) {
      const xattrs = new Map<string, Uint8Array>();
      if (r() < 0.1) xattrs.set(`user.${name()}`, new Uint8Array([1, 2, 3]));
      h.update(
        encodeTarHeader({
          path: name(),
          kind: kinds[Math.floor(r() * 7)]!,
          mode: Math.floor(r() * 0o7777),
          uid: pick(),
          gid: pick(),
          mtime: pick(),
          size: pick(),
          linkname: r() < 0.3 ? name() : "",
          devmajor: pick(),
          devminor: pick(),
          xattrs,
        }),
      );
    }
    expect(h.digest("hex")).toBe("de95497b307b63467b3c50965806a25acd8ccd01b2cd27da326f512e3aa2b73d");
  });
});
