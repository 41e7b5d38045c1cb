import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeTar, type TestTarEntry } from "./testLayout.ts";
import { readTar, type TarHeader } from "./tar.ts";
import { RootTree } from "./rootTree.ts";

async function* once(b: Uint8Array): AsyncGenerator<Uint8Array> {
  // Uneven chunks exercise the reader's buffering.
  for (let i = 0; i < b.length; i += 700) yield b.subarray(i, i + 700);
}

const work = mkdtempSync(join(tmpdir(), "bb-roottree-"));
let n = 0;
const stage = async (chunks: AsyncIterable<Uint8Array>) => {
  const parts: Uint8Array[] = [];
  for await (const c of chunks) parts.push(c);
  const path = join(work, `b${n++}`);
  writeFileSync(path, Buffer.concat(parts));
  return { path, offset: 0, size: Buffer.concat(parts).length };
};

async function build(...layers: TestTarEntry[][]): Promise<RootTree> {
  const t = new RootTree();
  for (const l of layers) await t.applyLayer(readTar(once(makeTar(l))), stage);
  return t;
}

async function listing(
  t: RootTree,
): Promise<
  { path: string; kind: string; linkname: string; body: string; uid: number; mode: number; xattrs: string[] }[]
> {
  const parts: Uint8Array[] = [];
  await t.write(
    (c) => void parts.push(c.slice()),
    (b) => void parts.push(readFileSync(b.path)),
  );
  const out = [];
  for await (const e of readTar(once(Buffer.concat(parts)))) {
    let body = "";
    for await (const c of e.body) body += new TextDecoder().decode(c);
    out.push({
      path: e.header.path,
      kind: e.header.kind,
      linkname: e.header.linkname,
      body,
      uid: e.header.uid,
      mode: e.header.mode,
      xattrs: [...e.header.xattrs.keys()],
    });
  }
  return out;
}

async function code(p: Promise<unknown>): Promise<string | undefined> {
  return p.then(
    () => undefined,
    (e: { code?: string }) => e.code ?? "no code",
  );
}

describe("tar", () => {
  test("round-trips long names, links, devices, ids and extended attributes", async () => {
    const long = `d/${"x".repeat(150)}/file`;
    const entries: TestTarEntry[] = [
      { path: "d/", mode: 0o750, uid: 5, gid: 6 },
      {
        path: long,
        body: "hello",
        mode: 0o4755,
        uid: 3_000_000,
        xattrs: { "security.capability": "\u0001\u0002", "user.k": "v" },
      },
      { path: "d/l", kind: "symlink", linkname: `../${"y".repeat(120)}` },
      { path: "dev/null", kind: "char", devmajor: 1, devminor: 3, mode: 0o666 },
    ];
    const got: TarHeader[] = [];
    for await (const e of readTar(once(makeTar(entries)))) {
      got.push(e.header);
      for await (const _ of e.body) {
        /* skip */
      }
    }
    expect(got.map((h) => h.path)).toEqual(["d/", long, "d/l", "dev/null"]);
    expect(got[1]).toMatchObject({ kind: "file", size: 5, mode: 0o4755, uid: 3_000_000 });
    expect(new TextDecoder().decode(got[1]!.xattrs.get("user.k"))).toBe("v");
    expect(got[2]!.linkname).toBe(`../${"y".repeat(120)}`);
    expect(got[3]).toMatchObject({ kind: "char", devmajor: 1, devminor: 3 });
  });

  test("a corrupted header is IMAGE_LAYER_INVALID, a truncated body too", async () => {
    const t = makeTar([{ path: "a", body: "x".repeat(2000) }]);
    const bad = t.slice();
    bad[10] = bad[10]! ^ 0xff;
    const drain = async (b: Uint8Array) => {
      for await (const e of readTar(once(b)))
        for await (const _ of e.body) {
          /* read */
        }
    };
    expect(await code(drain(bad))).toBe("IMAGE_LAYER_INVALID");
    expect(await code(drain(t.subarray(0, 1200)))).toBe("IMAGE_LAYER_INVALID");
  });
});

describe("RootTree layers", () => {
  test("whiteouts and opaque directories hide only lower layers; hard links and modes survive", async () => {
    const t = await build(
      [
        { path: "./" },
        { path: "etc/" },
        { path: "etc/keep", body: "k" },
        { path: "etc/gone", body: "g" },
        { path: "opq/" },
        { path: "opq/old", body: "o" },
        { path: "bin/" },
        { path: "bin/tool", body: "T", mode: 0o755, uid: 7 },
        { path: "bin/alias", kind: "hardlink", linkname: "bin/tool" },
      ],
      [
        { path: "etc/.wh.gone" },
        { path: "opq/new", body: "n" },
        { path: "opq/.wh..wh..opq" },
        { path: "etc/added", body: "a", xattrs: { "user.x": "1" } },
      ],
      [{ path: "etc/.wh.added" }, { path: "etc/added", body: "again" }],
    );
    const l = await listing(t);
    const paths = l.map((e) => e.path);
    expect(paths).toEqual(["./", "bin", "bin/alias", "bin/tool", "etc", "etc/added", "etc/keep", "opq", "opq/new"]);
    expect(l.find((e) => e.path === "bin/alias")).toMatchObject({ kind: "file", body: "T", mode: 0o755, uid: 7 });
    expect(l.find((e) => e.path === "bin/tool")).toMatchObject({ kind: "hardlink", linkname: "bin/alias" });
    // A whiteout in layer 2 hides layer 1's file; layer 2's own file of that name stays.
    expect(l.find((e) => e.path === "etc/added")!.body).toBe("again");
  });

  test("symlinks inside the root are followed while resolving parents", async () => {
    const t = await build(
      [
        { path: "usr/lib/" },
        { path: "lib", kind: "symlink", linkname: "usr/lib" },
        { path: "abs", kind: "symlink", linkname: "/usr" },
      ],
      [
        { path: "lib/x.so", body: "x" },
        { path: "abs/lib/y.so", body: "y" },
      ],
    );
    expect((await listing(t)).map((e) => e.path)).toEqual([
      "./",
      "abs",
      "lib",
      "usr",
      "usr/lib",
      "usr/lib/x.so",
      "usr/lib/y.so",
    ]);
  });

  test("the output is byte-for-byte the same for the same layers", async () => {
    const layers: TestTarEntry[][] = [
      [
        { path: "b", body: "2" },
        { path: "a/", uid: 1 },
        { path: "a/c", body: "3" },
      ],
    ];
    const bytes = async () => {
      const parts: Uint8Array[] = [];
      await (await build(...layers)).write(
        (c) => void parts.push(c.slice()),
        (b) => void parts.push(readFileSync(b.path)),
      );
      return Buffer.concat(parts);
    };
    expect(Buffer.compare(await bytes(), await bytes())).toBe(0);
  });

  const hostile: [string, TestTarEntry[][], string][] = [
    ["absolute member name", [[{ path: "/etc/passwd", body: "x" }]], "IMAGE_LAYER_PATH_ESCAPE"],
    ["member climbing with ..", [[{ path: "a/../../etc/passwd", body: "x" }]], "IMAGE_LAYER_PATH_ESCAPE"],
    [
      "symlink escape",
      [
        [
          { path: "evil", kind: "symlink", linkname: "../../../../tmp" },
          { path: "evil/pwned", body: "x" },
        ],
      ],
      "IMAGE_LAYER_PATH_ESCAPE",
    ],
    [
      "symlink escape across layers",
      [
        [{ path: "d/" }, { path: "d/up", kind: "symlink", linkname: "../.." }],
        [{ path: "d/up/etc/shadow", body: "x" }],
      ],
      "IMAGE_LAYER_PATH_ESCAPE",
    ],
    ["whiteout outside the root", [[{ path: "a", body: "1" }], [{ path: "../.wh.a" }]], "IMAGE_LAYER_PATH_ESCAPE"],
    [
      "whiteout through an escaping symlink",
      [[{ path: "up", kind: "symlink", linkname: "/../.." }], [{ path: "up/.wh.etc" }]],
      "IMAGE_LAYER_PATH_ESCAPE",
    ],
    [
      "hard link outside the tree",
      [[{ path: "h", kind: "hardlink", linkname: "../../etc/shadow" }]],
      "IMAGE_LAYER_PATH_ESCAPE",
    ],
    ["hard link to nothing", [[{ path: "h", kind: "hardlink", linkname: "missing" }]], "IMAGE_LAYER_PATH_ESCAPE"],
    [
      "block device outside /dev",
      [[{ path: "tmp/sda", kind: "block", devmajor: 8, devminor: 0 }]],
      "IMAGE_LAYER_UNSUPPORTED",
    ],
    [
      "member below a file",
      [
        [
          { path: "f", body: "1" },
          { path: "f/x", body: "2" },
        ],
      ],
      "IMAGE_LAYER_INVALID",
    ],
  ];
  for (const [name, layers, want] of hostile) {
    test(`refuses a ${name} with ${want}`, async () => {
      expect(await code(build(...layers))).toBe(want);
    });
  }

  test("device nodes under /dev are kept", async () => {
    const l = await listing(
      await build([{ path: "dev/" }, { path: "dev/null", kind: "char", devmajor: 1, devminor: 3, mode: 0o666 }]),
    );
    expect(l.find((e) => e.path === "dev/null")).toMatchObject({ kind: "char", mode: 0o666 });
  });
});

process.on("exit", () => rmSync(work, { recursive: true, force: true }));
