/**
 * A bounded, streaming tar reader and a deterministic tar writer for image
 * layers (POSIX ustar with PAX extended headers, GNU long names on input).
 *
 * Owns: parsing header blocks (checksum, octal and base-256 numbers, ustar
 * prefix, PAX `path`/`linkpath`/`size`/`uid`/`gid`/`mtime` and
 * `SCHILY.xattr.*`, GNU `L`/`K` records) and writing entries back in one
 * canonical form. Implements the layer format the OCI image spec's "Image
 * Layer Filesystem Changeset" builds on (POSIX.1-2001 pax). Pure byte
 * handling: no file system access. Must never: trust a size, a name length
 * or a header count beyond the bounds below, or return a body longer than
 * its header says.
 */
import { imageError } from "../errors.ts";

/** Tar block size, bytes. */
export const TAR_BLOCK_BYTES = 512;
/** Largest PAX extended header or GNU long-name record accepted, bytes. */
export const MAX_TAR_META_BYTES = 1024 * 1024;
/** Longest entry path or link target accepted, bytes (Linux PATH_MAX). */
export const MAX_TAR_PATH_BYTES = 4096;
/** Most extended-attribute bytes (names plus values) on one entry. */
export const MAX_TAR_XATTR_BYTES = 64 * 1024;

/** Kinds of tar entries an image may hold. */
export type TarEntryKind = "file" | "hardlink" | "symlink" | "char" | "block" | "dir" | "fifo";

/** One parsed tar header (after PAX and GNU records were applied). */
export interface TarHeader {
  /** Member name as written (not normalized). */
  path: string;
  kind: TarEntryKind;
  /** Permission and special bits (mode & 0o7777). */
  mode: number;
  uid: number;
  gid: number;
  /** Modification time, whole seconds since the epoch. */
  mtime: number;
  /** Body size in bytes (0 for everything but files). */
  size: number;
  /** Symlink target or hard-link member name ("" otherwise). */
  linkname: string;
  devmajor: number;
  devminor: number;
  /** Extended attributes from `SCHILY.xattr.<name>` records, values as raw bytes. */
  xattrs: Map<string, Uint8Array>;
}

const KIND_BY_TYPEFLAG: Record<string, TarEntryKind> = {
  "0": "file", "\0": "file", "7": "file", "1": "hardlink", "2": "symlink", "3": "char", "4": "block", "5": "dir", "6": "fifo",
};

const dec = new TextDecoder("utf-8");

/** Pulls exact byte counts out of an async chunk stream. */
class ByteReader {
  private buf = new Uint8Array(0);
  private off = 0;
  private done = false;
  private readonly it: AsyncIterator<Uint8Array>;
  /** Bytes consumed so far. */
  position = 0;
  constructor(source: AsyncIterable<Uint8Array>) {
    this.it = source[Symbol.asyncIterator]();
  }
  private async fill(): Promise<boolean> {
    if (this.done) return false;
    const r = await this.it.next();
    if (r.done) {
      this.done = true;
      return false;
    }
    const rest = this.buf.subarray(this.off);
    const next = new Uint8Array(rest.length + r.value.length);
    next.set(rest, 0);
    next.set(r.value, rest.length);
    this.buf = next;
    this.off = 0;
    return true;
  }
  /** Exactly `n` bytes, or null at a clean end of stream (no bytes left). Throws IMAGE_LAYER_INVALID when truncated mid-way. */
  async read(n: number): Promise<Uint8Array | null> {
    while (this.buf.length - this.off < n) {
      if (!(await this.fill())) {
        if (this.buf.length - this.off === 0) return null;
        throw imageError("IMAGE_LAYER_INVALID", `tar stream truncated at byte ${this.position + this.buf.length - this.off}`);
      }
    }
    const out = this.buf.subarray(this.off, this.off + n);
    this.off += n;
    this.position += n;
    return out;
  }
  /** Yields the next `n` bytes in chunks (without copying them all into memory). Throws IMAGE_LAYER_INVALID when truncated. */
  async *chunks(n: number): AsyncGenerator<Uint8Array> {
    let left = n;
    while (left > 0) {
      if (this.buf.length - this.off === 0 && !(await this.fill())) {
        throw imageError("IMAGE_LAYER_INVALID", `tar stream truncated inside an entry at byte ${this.position}`);
      }
      const take = Math.min(left, this.buf.length - this.off);
      const out = this.buf.subarray(this.off, this.off + take);
      this.off += take;
      this.position += take;
      left -= take;
      yield out;
    }
  }
  /** Drains whatever follows (tar writers may pad past the end blocks). */
  async drain(): Promise<void> {
    while (await this.fill()) this.off = this.buf.length;
  }
}

/** Parses an octal or base-256 numeric field. Throws IMAGE_LAYER_INVALID. */
export function parseTarNumber(field: Uint8Array, what: string): number {
  if (field.length > 0 && (field[0]! & 0x80) !== 0) {
    if (field[0] === 0xff) throw imageError("IMAGE_LAYER_INVALID", `negative base-256 ${what}`);
    let v = field[0]! & 0x7f;
    for (let i = 1; i < field.length; i++) {
      v = v * 256 + field[i]!;
      if (!Number.isSafeInteger(v)) throw imageError("IMAGE_LAYER_INVALID", `${what} too large`);
    }
    return v;
  }
  const text = dec.decode(field).replace(/\0.*$/s, "").trim();
  if (text === "") return 0;
  if (!/^[0-7]+$/.test(text)) throw imageError("IMAGE_LAYER_INVALID", `bad octal ${what} ${JSON.stringify(text.slice(0, 20))}`);
  const v = parseInt(text, 8);
  if (!Number.isSafeInteger(v)) throw imageError("IMAGE_LAYER_INVALID", `${what} too large`);
  return v;
}

function cString(b: Uint8Array): string {
  const nul = b.indexOf(0);
  return dec.decode(nul >= 0 ? b.subarray(0, nul) : b);
}

function checksumOk(h: Uint8Array): boolean {
  const stored = parseTarNumber(h.subarray(148, 156), "checksum");
  let sum = 0;
  for (let i = 0; i < TAR_BLOCK_BYTES; i++) sum += i >= 148 && i < 156 ? 0x20 : h[i]!;
  return sum === stored;
}

/** Parses PAX records (`"<len> <key>=<value>\n"`) into key → raw value bytes. Throws IMAGE_LAYER_INVALID. */
export function parsePaxRecords(body: Uint8Array): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  let i = 0;
  while (i < body.length) {
    if (body[i] === 0) break; // some writers pad with NULs
    const sp = body.indexOf(0x20, i);
    if (sp < 0) throw imageError("IMAGE_LAYER_INVALID", "PAX record without a length");
    const len = Number(dec.decode(body.subarray(i, sp)));
    if (!Number.isSafeInteger(len) || len <= sp - i + 1 || i + len > body.length || body[i + len - 1] !== 0x0a) {
      throw imageError("IMAGE_LAYER_INVALID", "malformed PAX record");
    }
    const rec = body.subarray(sp + 1, i + len - 1);
    const eq = rec.indexOf(0x3d);
    if (eq <= 0) throw imageError("IMAGE_LAYER_INVALID", "PAX record without a key");
    out.set(dec.decode(rec.subarray(0, eq)), rec.subarray(eq + 1));
    i += len;
  }
  return out;
}

/** One entry: its header and, for files, its body as chunks (consume it or it is skipped). */
export interface TarEntry {
  header: TarHeader;
  body: AsyncGenerator<Uint8Array>;
}

async function readMeta(r: ByteReader, size: number, what: string): Promise<Uint8Array> {
  if (size > MAX_TAR_META_BYTES) throw imageError("IMAGE_LAYER_INVALID", `${what} record of ${size} bytes exceeds ${MAX_TAR_META_BYTES}`);
  const padded = Math.ceil(size / TAR_BLOCK_BYTES) * TAR_BLOCK_BYTES;
  const b = await r.read(padded);
  if (!b) throw imageError("IMAGE_LAYER_INVALID", `tar stream ends inside a ${what} record`);
  return b.slice(0, size);
}

/**
 * Reads tar entries from `source` one at a time. Each entry's body must be
 * consumed (or is skipped) before the next is produced. Stops at the first
 * all-zero block or at the end of the stream. Throws IMAGE_LAYER_INVALID
 * (bad checksum, truncation, malformed PAX, a bound exceeded) and
 * IMAGE_LAYER_UNSUPPORTED (an entry type an image may not hold, e.g. GNU
 * sparse files).
 */
export async function* readTar(source: AsyncIterable<Uint8Array>): AsyncGenerator<TarEntry> {
  const r = new ByteReader(source);
  let pax: Map<string, Uint8Array> | null = null;
  let longName: string | null = null;
  let longLink: string | null = null;
  for (;;) {
    const h = await r.read(TAR_BLOCK_BYTES);
    if (!h || h.every((b) => b === 0)) break;
    if (!checksumOk(h)) throw imageError("IMAGE_LAYER_INVALID", `tar header checksum mismatch at byte ${r.position - TAR_BLOCK_BYTES}`);
    const typeflag = String.fromCharCode(h[156]!);
    let size = parseTarNumber(h.subarray(124, 136), "size");
    if (typeflag === "x" || typeflag === "g" || typeflag === "L" || typeflag === "K") {
      const body = await readMeta(r, size, typeflag === "L" || typeflag === "K" ? "GNU long name" : "PAX");
      if (typeflag === "x") pax = parsePaxRecords(body);
      else if (typeflag === "L") longName = cString(body);
      else if (typeflag === "K") longLink = cString(body);
      // "g" (global PAX defaults) carries nothing an image needs; it is parsed for validity and dropped.
      else parsePaxRecords(body);
      continue;
    }
    const kind = KIND_BY_TYPEFLAG[typeflag];
    if (!kind) throw imageError("IMAGE_LAYER_UNSUPPORTED", `tar entry type ${JSON.stringify(typeflag)} is not supported`);
    const magic = dec.decode(h.subarray(257, 263));
    const prefix = magic.startsWith("ustar") ? cString(h.subarray(345, 500)) : "";
    let path = longName ?? (prefix ? `${prefix}/${cString(h.subarray(0, 100))}` : cString(h.subarray(0, 100)));
    let linkname = longLink ?? cString(h.subarray(157, 257));
    let uid = parseTarNumber(h.subarray(108, 116), "uid");
    let gid = parseTarNumber(h.subarray(116, 124), "gid");
    let mtime = parseTarNumber(h.subarray(136, 148), "mtime");
    const xattrs = new Map<string, Uint8Array>();
    if (pax) {
      const text = (k: string) => (pax!.has(k) ? dec.decode(pax!.get(k)) : undefined);
      const num = (k: string, cur: number) => {
        const t = text(k);
        if (t === undefined) return cur;
        const v = Math.floor(Number(t));
        if (!Number.isSafeInteger(v) || v < 0) throw imageError("IMAGE_LAYER_INVALID", `bad PAX ${k}`);
        return v;
      };
      path = text("path") ?? path;
      linkname = text("linkpath") ?? linkname;
      size = num("size", size);
      uid = num("uid", uid);
      gid = num("gid", gid);
      mtime = num("mtime", mtime);
      let xattrBytes = 0;
      for (const [k, v] of pax) {
        if (!k.startsWith("SCHILY.xattr.")) continue;
        const name = k.slice("SCHILY.xattr.".length);
        xattrBytes += name.length + v.length;
        if (xattrBytes > MAX_TAR_XATTR_BYTES) throw imageError("IMAGE_LAYER_INVALID", `extended attributes of ${path.slice(0, 200)} exceed ${MAX_TAR_XATTR_BYTES} bytes`);
        xattrs.set(name, v);
      }
    }
    pax = null;
    longName = null;
    longLink = null;
    if (Buffer.byteLength(path) > MAX_TAR_PATH_BYTES || Buffer.byteLength(linkname) > MAX_TAR_PATH_BYTES) {
      throw imageError("IMAGE_LAYER_INVALID", `tar member name longer than ${MAX_TAR_PATH_BYTES} bytes`);
    }
    if (path.includes("\0") || linkname.includes("\0")) throw imageError("IMAGE_LAYER_INVALID", "tar member name holds a NUL byte");
    // Only regular files carry a body; like Go's archive/tar, the size of header-only types is ignored.
    const bodySize = kind === "file" ? size : 0;
    const header: TarHeader = {
      path, kind, mode: parseTarNumber(h.subarray(100, 108), "mode") & 0o7777, uid, gid, mtime, size: bodySize, linkname,
      devmajor: kind === "char" || kind === "block" ? parseTarNumber(h.subarray(329, 337), "devmajor") : 0,
      devminor: kind === "char" || kind === "block" ? parseTarNumber(h.subarray(337, 345), "devminor") : 0,
      xattrs,
    };
    const state = { left: bodySize };
    async function* body(): AsyncGenerator<Uint8Array> {
      for await (const c of r.chunks(state.left)) {
        state.left -= c.length;
        yield c;
      }
    }
    yield { header, body: body() };
    // Skip what the consumer left (it may have stopped early, which closes its generator).
    if (state.left > 0) for await (const c of r.chunks(state.left)) state.left -= c.length;
    const total = bodySize;
    const pad = (TAR_BLOCK_BYTES - (total % TAR_BLOCK_BYTES)) % TAR_BLOCK_BYTES;
    if (pad > 0 && !(await r.read(pad))) throw imageError("IMAGE_LAYER_INVALID", "tar stream ends inside padding");
  }
  await r.drain();
}

// ---------------------------------------------------------------------------
// Writer

const enc = new TextEncoder();

function octal(n: number, width: number): string {
  return n.toString(8).padStart(width - 1, "0") + "\0";
}

function paxRecord(key: string, value: Uint8Array): Uint8Array {
  const k = enc.encode(` ${key}=`);
  const tail = value.length + 1;
  let len = k.length + tail + 1;
  for (;;) {
    const digits = String(len).length;
    const want = digits + k.length + tail;
    if (want === len) break;
    len = want;
  }
  return Buffer.concat([enc.encode(String(len)), k, value, enc.encode("\n")]);
}

const TYPEFLAG_BY_KIND: Record<TarEntryKind, string> = { file: "0", hardlink: "1", symlink: "2", char: "3", block: "4", dir: "5", fifo: "6" };

function headerBlock(name: string, typeflag: string, h: { mode: number; uid: number; gid: number; mtime: number; size: number; linkname: string; devmajor: number; devminor: number }): Uint8Array {
  const b = new Uint8Array(TAR_BLOCK_BYTES);
  const put = (off: number, s: string, width: number) => b.set(enc.encode(s).subarray(0, width), off);
  put(0, name, 100);
  put(100, octal(h.mode, 8), 8);
  put(108, octal(h.uid, 8), 8);
  put(116, octal(h.gid, 8), 8);
  put(124, octal(h.size, 12), 12);
  put(136, octal(h.mtime, 12), 12);
  put(156, typeflag, 1);
  put(157, h.linkname, 100);
  put(257, "ustar\0", 6);
  put(263, "00", 2);
  put(329, octal(h.devmajor, 8), 8);
  put(337, octal(h.devminor, 8), 8);
  b.fill(0x20, 148, 156);
  let sum = 0;
  for (const x of b) sum += x;
  put(148, sum.toString(8).padStart(6, "0") + "\0 ", 8);
  return b;
}

/** The largest value a 12-digit octal field holds (8 GiB − 1) and an 8-digit one (2097151). */
const MAX_OCTAL_12 = 0o77777777777;
const MAX_OCTAL_8 = 0o7777777;

/**
 * Encodes one entry's header blocks (a PAX header first when the name,
 * link target, ids, size or extended attributes do not fit ustar), in a
 * canonical form: the same header always gives the same bytes. The caller
 * writes the body (for files) and `tarPadding(size)` after it.
 */
export function encodeTarHeader(h: TarHeader): Uint8Array {
  const records: Uint8Array[] = [];
  const nameBytes = enc.encode(h.path);
  const linkBytes = enc.encode(h.linkname);
  if (nameBytes.length > 99) records.push(paxRecord("path", nameBytes));
  if (linkBytes.length > 99) records.push(paxRecord("linkpath", linkBytes));
  if (h.uid > MAX_OCTAL_8) records.push(paxRecord("uid", enc.encode(String(h.uid))));
  if (h.gid > MAX_OCTAL_8) records.push(paxRecord("gid", enc.encode(String(h.gid))));
  if (h.size > MAX_OCTAL_12) records.push(paxRecord("size", enc.encode(String(h.size))));
  for (const name of [...h.xattrs.keys()].sort()) records.push(paxRecord(`SCHILY.xattr.${name}`, h.xattrs.get(name)!));
  const fields = {
    mode: h.mode, uid: Math.min(h.uid, MAX_OCTAL_8), gid: Math.min(h.gid, MAX_OCTAL_8), mtime: Math.min(h.mtime, MAX_OCTAL_12),
    size: Math.min(h.size, MAX_OCTAL_12), linkname: linkBytes.length > 99 ? "" : h.linkname, devmajor: h.devmajor, devminor: h.devminor,
  };
  const name = nameBytes.length > 99 ? "././@PaxHeader" : h.path;
  const main = headerBlock(nameBytes.length > 99 ? dec.decode(nameBytes.subarray(0, 99)).replace(/\uFFFD+$/, "") : name, TYPEFLAG_BY_KIND[h.kind], fields);
  if (records.length === 0) return main;
  const paxBody = Buffer.concat(records);
  const paxHeader = headerBlock("././@PaxHeader", "x", { mode: 0o644, uid: 0, gid: 0, mtime: 0, size: paxBody.length, linkname: "", devmajor: 0, devminor: 0 });
  return Buffer.concat([paxHeader, paxBody, tarPadding(paxBody.length), main]);
}

/** Zero bytes that pad a body of `size` bytes to the block size. */
export function tarPadding(size: number): Uint8Array {
  return new Uint8Array((TAR_BLOCK_BYTES - (size % TAR_BLOCK_BYTES)) % TAR_BLOCK_BYTES);
}

/** The two zero blocks that end an archive. */
export const TAR_END = new Uint8Array(2 * TAR_BLOCK_BYTES);
