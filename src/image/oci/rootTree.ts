/**
 * The merged root file system of an OCI image, built in memory from its
 * layers and written out as one canonical tar stream.
 *
 * Owns: applying one layer (OCI image-spec "Image Layer Filesystem
 * Changeset": additions, modifications, `.wh.<name>` whiteouts and
 * `.wh..wh..opq` opaque directories), keeping ownership, modes, times,
 * extended attributes and hard links, and refusing what an image must not
 * hold. The spec says a whiteout hides only what lower layers made and may
 * sit anywhere in its layer's tar, so a layer is applied in two steps: all
 * its whiteouts, each resolved against the tree as the lower layers left
 * it, then its other entries in stream order. Where a whiteout sits in the
 * tar, or which of this layer's entries touched a directory, never matters.
 * Names are byte names (byteName.ts), kept byte-exact. File bodies go
 * to numbered staging files the caller provides; no layer path is ever
 * created on the build host, so a hostile layer cannot touch it.
 *
 * Refusals (spec "Images", "Boot OCI images"):
 * - IMAGE_LAYER_PATH_ESCAPE: an absolute member name or one with a `..`
 *   component; a symlink followed while resolving a member's parent whose
 *   target climbs above the root; a hard link to a path outside the tree
 *   (or to nothing); a whiteout whose parent escapes.
 * - IMAGE_LAYER_UNSUPPORTED: a character or block device outside /dev.
 * - IMAGE_LAYER_INVALID: a member under a non-directory, a hard link to a
 *   directory, an empty whiteout name, too many entries or symlink hops.
 * Must never: follow a symlink on the host, or write a device node anywhere
 * but into the output stream.
 */
import { imageError } from "../errors.ts";
import { showName } from "./byteName.ts";
import { encodeTarHeader, type TarHeader, tarPadding } from "./tar.ts";

/** Most entries (files, directories, links) a merged tree may hold. */
export const MAX_TREE_ENTRIES = 2_000_000;
/** Most tar entries one layer may hold (they are held until the layer's whiteouts are known). */
export const MAX_LAYER_ENTRIES = MAX_TREE_ENTRIES;
/** Most symlinks followed while resolving one path (Linux's MAXSYMLINKS). */
export const MAX_SYMLINK_HOPS = 40;
/** Whiteout prefix and the opaque-directory marker (OCI image-spec). */
export const WHITEOUT_PREFIX = ".wh.";
export const OPAQUE_MARKER = ".wh..wh..opq";

type Kind = "file" | "symlink" | "char" | "block" | "dir" | "fifo";

/** What a name points at; hard links share one. */
interface Inode {
  kind: Kind;
  mode: number;
  uid: number;
  gid: number;
  mtime: number;
  xattrs: Map<string, Uint8Array>;
  /** PAX records about this inode the tar reader could not keep (ACLs), by key. */
  unkept?: string[];
  /** Files: where the body's bytes are. */
  body?: StagedBody;
  /** Symlinks: target as written. */
  target?: string;
  devmajor?: number;
  devminor?: number;
}

interface Node {
  inode: Inode;
  /** Directories only. */
  children?: Map<string, Node>;
}

/** A layer's entry other than a whiteout, waiting for the layer's whiteouts to be applied. */
interface Change {
  h: TarHeader;
  parts: string[];
  body?: StagedBody;
}

/** Where a file body's bytes are: `size` bytes at `offset` of the private file `path`. */
export interface StagedBody {
  path: string;
  offset: number;
  size: number;
}

/**
 * Where file bodies go: `stage(chunks, at)` stores a body (or knows where a
 * copy of the layer stream already holds it: `at.offset` in that stream)
 * and says where it is. A stager that does not consume `chunks` leaves
 * them to be skipped.
 */
export type BodyStager = (
  chunks: AsyncIterable<Uint8Array>,
  at: { offset: number; size: number },
) => Promise<StagedBody>;

const escape = (msg: string) => imageError("IMAGE_LAYER_PATH_ESCAPE", msg);
const invalid = (msg: string) => imageError("IMAGE_LAYER_INVALID", msg);
const show = (p: string) => showName(p);

/**
 * Splits a member name into components. `./` prefixes and empty or `.`
 * components are dropped; an absolute name or any `..` component throws
 * IMAGE_LAYER_PATH_ESCAPE. The root itself is `[]`.
 */
export function memberComponents(name: string): string[] {
  if (name.startsWith("/")) throw escape(`absolute member name ${show(name)}`);
  const out: string[] = [];
  for (const c of name.split("/")) {
    if (c === "" || c === ".") continue;
    if (c === "..") throw escape(`member name ${show(name)} climbs with ..`);
    out.push(c);
  }
  return out;
}

/** A directory a layer implies without an entry of its own: 0755, root, time 0. */
function newDir(): Node {
  return { inode: { kind: "dir", mode: 0o755, uid: 0, gid: 0, mtime: 0, xattrs: new Map() }, children: new Map() };
}

/** The merged tree. Apply layers in order with `applyLayer`, then `write` it. */
export class RootTree {
  private readonly root: Node = newDir();
  private entries = 1;

  /** Number of names in the tree (root included). */
  get size(): number {
    return this.entries;
  }

  /**
   * Resolves `parts` to a directory node, following symlinks lexically
   * inside the tree. Missing directories are created (layers may omit
   * parents) when `create` is set; returns null when absent otherwise.
   * Throws IMAGE_LAYER_PATH_ESCAPE when a symlink climbs above the root.
   */
  private resolveDir(parts: string[], create: boolean, what: string): Node | null {
    const stack: Node[] = [this.root];
    const queue = [...parts];
    let hops = 0;
    while (queue.length) {
      const c = queue.shift()!;
      if (c === "" || c === ".") continue;
      if (c === "..") {
        if (stack.length === 1) throw escape(`${what}: a symlink on its path leads above the image root`);
        stack.pop();
        continue;
      }
      const dir = stack[stack.length - 1]!;
      let child = dir.children!.get(c);
      if (!child) {
        if (!create) return null;
        child = newDir();
        dir.children!.set(c, child);
        this.count(1);
      }
      if (child.inode.kind === "symlink") {
        if (++hops > MAX_SYMLINK_HOPS) throw invalid(`${what}: more than ${MAX_SYMLINK_HOPS} symlinks on its path`);
        const t = child.inode.target!;
        if (t.startsWith("/")) stack.length = 1;
        queue.unshift(...t.split("/"));
        continue;
      }
      if (child.inode.kind !== "dir")
        throw invalid(`${what}: a path component is a ${child.inode.kind}, not a directory`);
      stack.push(child);
    }
    return stack[stack.length - 1]!;
  }

  private count(n: number): void {
    this.entries += n;
    if (this.entries > MAX_TREE_ENTRIES) throw invalid(`image has more than ${MAX_TREE_ENTRIES} entries`);
  }

  /**
   * Applies one layer (its tar entries in stream order): first every
   * whiteout, against the tree the lower layers made, then every other
   * entry in order (see the module header). File bodies are staged while
   * the layer is read. Throws the codes in the module header, and
   * IMAGE_LAYER_INVALID past MAX_LAYER_ENTRIES entries; the tree is then
   * unusable and the build must stop.
   */
  async applyLayer(
    entries: AsyncIterable<{ header: TarHeader; body: AsyncIterable<Uint8Array>; offset: number }>,
    stage: BodyStager,
  ): Promise<void> {
    const whiteouts: { parts: string[]; path: string }[] = [];
    const changes: Change[] = [];
    let n = 0;
    for await (const { header: h, body, offset } of entries) {
      if (++n > MAX_LAYER_ENTRIES) throw invalid(`layer has more than ${MAX_LAYER_ENTRIES} entries`);
      const parts = memberComponents(h.path);
      const name = parts[parts.length - 1];
      if (name?.startsWith(WHITEOUT_PREFIX)) {
        const hidden = name.slice(WHITEOUT_PREFIX.length);
        if (name !== OPAQUE_MARKER && (hidden === "" || hidden === "." || hidden === ".."))
          throw invalid(`whiteout ${show(h.path)} names no file`);
        whiteouts.push({ parts, path: h.path });
        continue;
      }
      changes.push({ h, parts, ...(h.kind === "file" ? { body: await stage(body, { offset, size: h.size }) } : {}) });
    }
    this.hideLower(whiteouts);
    for (const c of changes) this.applyChange(c);
  }

  /**
   * Removes what `whiteouts` hide. Every whiteout is resolved before any
   * name is removed, so one whiteout removing a symlink never changes what
   * another one (through that symlink) hides.
   */
  private hideLower(whiteouts: { parts: string[]; path: string }[]): void {
    const victims = new Map<Node, { dir: Node; name: string }>();
    for (const w of whiteouts) {
      const name = w.parts[w.parts.length - 1]!;
      const dir = this.resolveDir(w.parts.slice(0, -1), false, `whiteout ${show(w.path)}`);
      if (!dir) continue; // nothing below to hide
      if (name === OPAQUE_MARKER) for (const [n, c] of dir.children!) victims.set(c, { dir, name: n });
      else {
        const hidden = name.slice(WHITEOUT_PREFIX.length);
        const v = dir.children!.get(hidden);
        if (v) victims.set(v, { dir, name: hidden });
      }
    }
    // Each removed name is counted once, also when a victim lies inside another.
    const size = (nd: Node): number => {
      let s = 1;
      if (nd.children) for (const c of nd.children.values()) if (!victims.has(c)) s += size(c);
      return s;
    };
    let removed = 0;
    for (const v of victims.keys()) removed += size(v);
    for (const [v, { dir, name }] of victims) if (dir.children!.get(name) === v) dir.children!.delete(name);
    this.entries -= removed;
  }

  private static sizeOf(n: Node): number {
    let s = 1;
    if (n.children) for (const c of n.children.values()) s += RootTree.sizeOf(c);
    return s;
  }

  private remove(dir: Node, name: string): void {
    const old = dir.children!.get(name);
    if (!old) return;
    dir.children!.delete(name);
    this.entries -= RootTree.sizeOf(old);
  }

  /** Applies one entry that is not a whiteout. */
  private applyChange({ h, parts, body }: Change): void {
    const name = parts[parts.length - 1];
    if (name === undefined) {
      // The root itself: keep its metadata when given as a directory.
      if (h.kind === "dir")
        Object.assign(this.root.inode, { mode: h.mode, uid: h.uid, gid: h.gid, mtime: h.mtime, xattrs: h.xattrs });
      return;
    }
    const dir = this.resolveDir(parts.slice(0, -1), true, `member ${show(h.path)}`)!;
    const existing = dir.children!.get(name);
    if (h.kind === "hardlink") {
      const tparts = memberComponents(h.linkname);
      const tname = tparts[tparts.length - 1];
      if (tname === undefined) throw escape(`hard link ${show(h.path)} points at the root`);
      const tdir = this.resolveDir(tparts.slice(0, -1), false, `hard link ${show(h.path)}`);
      const target = tdir?.children!.get(tname);
      if (!target) throw escape(`hard link ${show(h.path)} points at ${show(h.linkname)}, which is not in the image`);
      if (target.inode.kind === "dir") throw invalid(`hard link ${show(h.path)} points at a directory`);
      if (existing === target) return;
      if (existing) this.remove(dir, name);
      dir.children!.set(name, { inode: target.inode });
      this.count(1);
      return;
    }
    if ((h.kind === "char" || h.kind === "block") && parts[0] !== "dev") {
      throw imageError("IMAGE_LAYER_UNSUPPORTED", `device node ${show(h.path)} outside /dev`);
    }
    const inode: Inode = {
      kind: h.kind,
      mode: h.mode,
      uid: h.uid,
      gid: h.gid,
      mtime: h.mtime,
      xattrs: h.xattrs,
      ...(h.unkept ? { unkept: h.unkept } : {}),
    };
    if (h.kind === "dir" && existing?.inode.kind === "dir") {
      // A directory entry over a directory changes its metadata and keeps its contents.
      existing.inode = { ...inode, kind: "dir" };
      return;
    }
    if (h.kind === "file") inode.body = body!;
    if (h.kind === "symlink") inode.target = h.linkname;
    if (h.kind === "char" || h.kind === "block") Object.assign(inode, { devmajor: h.devmajor, devminor: h.devminor });
    if (existing) this.remove(dir, name);
    dir.children!.set(name, { inode, ...(h.kind === "dir" ? { children: new Map() } : {}) });
    this.count(1);
  }

  /**
   * Writes the tree as one tar stream: depth first, names in byte order,
   * the root first as `./`, every later name of a shared inode as a hard
   * link to the first. `copyBody` puts a file's staged body (exactly
   * `size` bytes) into the same stream, after its header.
   * Deterministic: the same tree gives the same bytes. `sink` receives the
   * chunks in order. With `keep`, only the extended attributes it accepts
   * are written; every other one, and every record the reader could not
   * keep (`Inode.unkept`), goes to `dropped` (path, attribute or record
   * name) instead of vanishing.
   */
  async write(
    sink: (chunk: Uint8Array) => Promise<void> | void,
    copyBody: (body: StagedBody) => Promise<void> | void,
    filter: { keep?: (xattrName: string) => boolean; dropped?: (path: string, name: string) => void } = {},
  ): Promise<void> {
    const firstName = new Map<Inode, string>();
    const xattrsOf = (path: string, i: Inode): Map<string, Uint8Array> => {
      for (const k of i.unkept ?? []) filter.dropped?.(path, k);
      if (!filter.keep || i.xattrs.size === 0) return i.xattrs;
      const kept = new Map<string, Uint8Array>();
      for (const [k, v] of i.xattrs) {
        if (filter.keep(k)) kept.set(k, v);
        else filter.dropped?.(path, k);
      }
      return kept;
    };
    const emit = async (path: string, n: Node): Promise<void> => {
      const i = n.inode;
      const seen = i.kind !== "dir" ? firstName.get(i) : undefined;
      const base = {
        path,
        mode: i.mode,
        uid: i.uid,
        gid: i.gid,
        mtime: i.mtime,
        size: 0,
        linkname: "",
        devmajor: 0,
        devminor: 0,
        xattrs: seen === undefined ? xattrsOf(path, i) : new Map(),
      };
      if (seen !== undefined) {
        await sink(encodeTarHeader({ ...base, kind: "hardlink", linkname: seen, xattrs: new Map() }));
        return;
      }
      if (i.kind !== "dir") firstName.set(i, path);
      if (i.kind === "file") {
        await sink(encodeTarHeader({ ...base, kind: "file", size: i.body!.size }));
        await copyBody(i.body!);
        await sink(tarPadding(i.body!.size));
        return;
      }
      await sink(
        encodeTarHeader({
          ...base,
          kind: i.kind,
          linkname: i.target ?? "",
          devmajor: i.devmajor ?? 0,
          devminor: i.devminor ?? 0,
        }),
      );
      if (n.children) {
        // Byte names: string order is byte order.
        const names = [...n.children.keys()].sort();
        const prefix = path === "./" ? "" : `${path.endsWith("/") ? path.slice(0, -1) : path}/`;
        for (const c of names) await emit(prefix + c, n.children.get(c)!);
      }
    };
    await emit("./", this.root);
  }

  /** Metadata of the root directory (mksquashfs takes it from options, not from the stream). */
  get rootMeta(): { mode: number; uid: number; gid: number; mtime: number } {
    const i = this.root.inode;
    return { mode: i.mode, uid: i.uid, gid: i.gid, mtime: i.mtime };
  }

  /** Adds or replaces a regular file (used for /etc/beachball/workload.json). Parents are created 0755 root. */
  addFile(path: string, body: StagedBody, meta: { mode: number; mtime: number }): void {
    const parts = memberComponents(path);
    const dir = this.resolveDir(parts.slice(0, -1), true, `file ${show(path)}`)!;
    const name = parts[parts.length - 1]!;
    if (dir.children!.has(name)) this.remove(dir, name);
    dir.children!.set(name, {
      inode: { kind: "file", mode: meta.mode, uid: 0, gid: 0, mtime: meta.mtime, xattrs: new Map(), body },
    });
    this.count(1);
  }

  /** True when `path` exists (following symlinks in parents, not in the last component). */
  has(path: string): boolean {
    const parts = memberComponents(path);
    const name = parts[parts.length - 1];
    if (name === undefined) return true;
    try {
      return !!this.resolveDir(parts.slice(0, -1), false, show(path))?.children!.get(name);
    } catch {
      return false;
    }
  }

  /** Where a regular file's body is (following symlinks), or null. */
  fileBody(path: string): StagedBody | null {
    let parts = memberComponents(path);
    for (let hops = 0; hops <= MAX_SYMLINK_HOPS; hops++) {
      const name = parts[parts.length - 1];
      if (name === undefined) return null;
      let dir: Node | null;
      try {
        dir = this.resolveDir(parts.slice(0, -1), false, show(path));
      } catch {
        return null;
      }
      const n = dir?.children!.get(name);
      if (!n) return null;
      if (n.inode.kind === "file") return n.inode.body!;
      if (n.inode.kind !== "symlink") return null;
      const t = n.inode.target!;
      try {
        parts = t.startsWith("/")
          ? memberComponents(t.slice(1))
          : memberComponents([...parts.slice(0, -1), t].join("/"));
      } catch {
        return null;
      }
    }
    return null;
  }
}
