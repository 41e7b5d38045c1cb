/**
 * The layer merge (rootTree.ts) against a simple reference model of the OCI
 * image-spec changeset rules: a layer's whiteouts hide only what lower
 * layers made, wherever they sit in the layer's tar; then its entries apply
 * in order. Four named layouts (whiteouts after their siblings, issue 18
 * item 7), then seeded random layers (deterministic: the same seeds every
 * run) compared with the model, entry for entry.
 */
import { describe, expect, test } from "bun:test";
import { makeTar, type TestTarEntry } from "./testLayout.ts";
import { readTar } from "./tar.ts";
import { RootTree } from "./rootTree.ts";
import { SeededRandom } from "../../../test/sim/rng.ts";

/** Bodies staged in memory (the tree only keeps their keys). */
const bodies = new Map<string, Uint8Array>();
const stage = async (chunks: AsyncIterable<Uint8Array>) => {
  const parts: Uint8Array[] = [];
  for await (const c of chunks) parts.push(c.slice());
  const b = Buffer.concat(parts);
  const path = `mem:${bodies.size}`;
  bodies.set(path, b);
  return { path, offset: 0, size: b.length };
};

async function* chunked(b: Uint8Array): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < b.length; i += 700) yield b.subarray(i, i + 700);
}

/** What a merged tree holds: `<path> <kind> uid=<uid> [body]` lines in byte order. */
async function merged(layers: TestTarEntry[][]): Promise<string[]> {
  const t = new RootTree();
  for (const l of layers) await t.applyLayer(readTar(chunked(makeTar(l))), stage);
  const parts: Uint8Array[] = [];
  await t.write(
    (c) => void parts.push(c.slice()),
    (b) => void parts.push(bodies.get(b.path)!),
  );
  const out: string[] = [];
  for await (const e of readTar(chunked(Buffer.concat(parts)))) {
    let body = "";
    for await (const c of e.body) body += Buffer.from(c).toString();
    const p = e.header.path.replace(/\/$/, "");
    if (p === ".") continue;
    out.push(`/${p} ${e.header.kind} uid=${e.header.uid}${e.header.kind === "file" ? ` ${body}` : ""}`);
  }
  // The entry count (bounded by MAX_TREE_ENTRIES) must follow removals exactly: every name plus the root.
  if (t.size !== out.length + 1) throw new Error(`tree counts ${t.size} entries, holds ${out.length + 1}`);
  return out;
}

const paths = async (layers: TestTarEntry[][]) => (await merged(layers)).map((l) => l.split(" ")[0]);

describe("whiteouts after their siblings in the same layer (OCI: a whiteout hides only lower layers)", () => {
  test("opaque marker after the layer's own subdirectory: the lower files in it stay hidden", async () => {
    expect(
      await paths([
        [{ path: "a/" }, { path: "a/sub/" }, { path: "a/sub/old", body: "o" }],
        [{ path: "a/" }, { path: "a/sub/" }, { path: "a/sub/new", body: "n" }, { path: "a/.wh..wh..opq" }],
      ]),
    ).toEqual(["/a", "/a/sub", "/a/sub/new"]);
  });
  test("whiteout of a directory after the layer re-made it: only the layer's own files", async () => {
    expect(
      await paths([
        [{ path: "a/" }, { path: "a/old", body: "o" }],
        [{ path: "a/" }, { path: "a/new", body: "n" }, { path: ".wh.a" }],
      ]),
    ).toEqual(["/a", "/a/new"]);
  });
  test("whiteout of a directory after a file the layer put in it (no directory entry): the file stays", async () => {
    expect(await paths([[{ path: "a/old", body: "o" }], [{ path: "a/new", body: "n" }, { path: ".wh.a" }]])).toEqual([
      "/a",
      "/a/new",
    ]);
  });
  test("opaque marker after a deeper file of the layer: that file stays", async () => {
    expect(
      await paths([
        [{ path: "a/sub/old", body: "o" }],
        [{ path: "a/sub/new2", body: "n" }, { path: "a/.wh..wh..opq" }],
      ]),
    ).toEqual(["/a", "/a/sub", "/a/sub/new2"]);
  });
  test("whiteouts resolve against the lower tree together: removing a symlink does not change what another whiteout hides through it", async () => {
    const lower: TestTarEntry[] = [
      { path: "usr/lib/" },
      { path: "usr/lib/x", body: "x" },
      { path: "usr/lib/y", body: "y" },
      { path: "lib", kind: "symlink", linkname: "usr/lib" },
    ];
    const one = await paths([lower, [{ path: ".wh.lib" }, { path: "lib/.wh.x" }]]);
    const other = await paths([lower, [{ path: "lib/.wh.x" }, { path: ".wh.lib" }]]);
    expect(one).toEqual(["/usr", "/usr/lib", "/usr/lib/y"]);
    expect(other).toEqual(one);
  });
});

// ---------------------------------------------------------------------------
// Reference model: a map from full path to what is there, no symlinks.

interface ModelNode {
  kind: "dir" | "file";
  uid: number;
  body: string;
}

/** What the OCI changeset rules give for `layers` (dirs, files, whiteouts, opaque markers), or the error code. */
function model(layers: TestTarEntry[][]): string[] | "IMAGE_LAYER_INVALID" {
  let tree = new Map<string, ModelNode>();
  const under = (p: string, q: string) => q.startsWith(`${p}/`);
  for (const layer of layers) {
    const lower = tree;
    const hide = new Set<string>();
    // Whiteouts: each resolved against the lower tree.
    for (const e of layer) {
      const parts = e.path.replace(/\/$/, "").split("/");
      const name = parts.pop()!;
      if (!name.startsWith(".wh.")) continue;
      let missing = false;
      for (let i = 1; i <= parts.length && !missing; i++) {
        const a = lower.get(parts.slice(0, i).join("/"));
        if (!a) missing = true;
        else if (a.kind !== "dir") return "IMAGE_LAYER_INVALID";
      }
      if (missing) continue;
      const dir = parts.join("/");
      if (name === ".wh..wh..opq") {
        for (const p of lower.keys()) if (dir === "" || under(dir, p)) hide.add(p);
      } else {
        const victim = dir === "" ? name.slice(4) : `${dir}/${name.slice(4)}`;
        for (const p of lower.keys()) if (p === victim || under(victim, p)) hide.add(p);
      }
    }
    tree = new Map([...lower].filter(([p]) => !hide.has(p)));
    // Entries, in order.
    for (const e of layer) {
      const p = e.path.replace(/\/$/, "");
      const parts = p.split("/");
      if (parts[parts.length - 1]!.startsWith(".wh.")) continue;
      for (let i = 1; i < parts.length; i++) {
        const a = parts.slice(0, i).join("/");
        const n = tree.get(a);
        if (!n) tree.set(a, { kind: "dir", uid: 0, body: "" });
        else if (n.kind !== "dir") return "IMAGE_LAYER_INVALID";
      }
      const kind = e.body !== undefined ? "file" : "dir";
      const old = tree.get(p);
      if (!(old?.kind === "dir" && kind === "dir")) for (const q of [...tree.keys()]) if (under(p, q)) tree.delete(q);
      tree.set(p, { kind, uid: e.uid ?? 0, body: typeof e.body === "string" ? e.body : "" });
    }
  }
  return [...tree]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([p, n]) => `/${p} ${n.kind} uid=${n.uid}${n.kind === "file" ? ` ${n.body}` : ""}`);
}

/** A seeded generator of floats in [0, 1) (the simulation's), so every run is the same. */
function rng(seed: number): () => number {
  const random = new SeededRandom(seed);
  return () => random.float();
}

/** Random layers over a few short names, so paths collide, replace and hide each other often. */
function randomLayers(seed: number): TestTarEntry[][] {
  const r = rng(seed);
  const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)]!;
  const dirPath = () => Array.from({ length: Math.floor(r() * 3) }, () => pick(["a", "b", "c"])).join("/");
  const layers: TestTarEntry[][] = [];
  for (let l = 0, n = 1 + Math.floor(r() * 4); l < n; l++) {
    const layer: TestTarEntry[] = [];
    for (let i = 0, m = 1 + Math.floor(r() * 8); i < m; i++) {
      const d = dirPath();
      const at = (name: string) => (d ? `${d}/${name}` : name);
      const x = r();
      if (x < 0.4) layer.push({ path: `${at(pick(["a", "b", "c"]))}/`, uid: 1 + Math.floor(r() * 9) });
      else if (x < 0.7)
        layer.push({ path: at(pick(["a", "b", "c", "f"])), body: `L${l}.${i}`, uid: 1 + Math.floor(r() * 9) });
      else if (x < 0.87) layer.push({ path: at(`.wh.${pick(["a", "b", "c", "f"])}`) });
      else layer.push({ path: at(".wh..wh..opq") });
    }
    layers.push(layer);
  }
  return layers;
}

/** Number of seeded cases tried. */
const RANDOM_CASES = 1500;

describe("the merge matches the reference model over random layers", () => {
  test(`${RANDOM_CASES} seeded cases`, async () => {
    let errors = 0;
    for (let seed = 1; seed <= RANDOM_CASES; seed++) {
      const layers = randomLayers(seed);
      const want = model(layers);
      const got = await merged(layers).catch((e: { code?: string }) => e.code ?? String(e));
      if (want === "IMAGE_LAYER_INVALID") errors++;
      if (JSON.stringify(got) !== JSON.stringify(want)) {
        throw new Error(
          `seed ${seed}: layers ${JSON.stringify(layers)}\nwant ${JSON.stringify(want)}\ngot  ${JSON.stringify(got)}`,
        );
      }
    }
    // The generator must mostly make valid images, or the comparison proves little.
    expect(errors).toBeLessThan(RANDOM_CASES / 2);
  }, 120_000);
});
