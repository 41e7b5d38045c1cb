/**
 * A bounded, streaming tar reader and a deterministic tar writer for image
 * layers.
 *
 * Owns: parsing header blocks (checksum, octal and base-256 numbers) of the
 * header variants writers use, each by its own layout: POSIX ustar/pax
 * (magic `ustar\0`, version `00`: a 155-byte name prefix at 345), star
 * (the same magic with `tar\0` at 508: a 131-byte prefix), GNU (magic
 * `ustar  \0`: no prefix; atime, ctime and sparse data at 345, long names in
 * `L`/`K` records) and v7 (no magic: no prefix; a directory is a `\0`-type
 * member whose name ends in `/`); PAX records (tarPax.ts); and writing
 * entries back in one canonical form. Implements the layer format the OCI
 * image spec's "Image Layer Filesystem Changeset" builds on (POSIX.1-2001
 * pax). Names, link targets and xattr names are byte names (byteName.ts),
 * never decoded. Pure byte handling: no file system access. Must never:
 * trust a size, a name length or a header count beyond the bounds below,
 * read one variant's fields as another's, or return a body longer than its
 * header says.
 */
import { imageError } from "../errors.ts";
import { byteName, nameBytes, showName, utf8Text } from "./byteName.ts";
import { paxOverrides, parsePaxRecords } from "./tarPax.ts";

/** Tar block size, bytes. */
export const TAR_BLOCK_BYTES = 512;
/** Largest PAX extended header or GNU long-name record accepted, bytes. */
export const MAX_TAR_META_BYTES = 1024 * 1024;
/** Longest entry path or link target accepted, bytes (Linux PATH_MAX). */
export const MAX_TAR_PATH_BYTES = 4096;

/** Kinds of tar entries an image may hold. */
export type TarEntryKind = "file" | "hardlink" | "symlink" | "char" | "block" | "dir" | "fifo";

/** One parsed tar header (after PAX and GNU records were applied). */
export interface TarHeader {
  /** Member name as written (not normalized), a byte name (byteName.ts). */
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
  /** Symlink target or hard-link member name ("" otherwise), a byte name. */
  linkname: string;
  devmajor: number;
  devminor: number;
  /** Extended attributes from PAX records (tarPax.ts), name (a byte name) → raw value bytes. */
  xattrs: Map<string, Uint8Array>;
  /** PAX records the reader read but cannot keep (POSIX ACLs), by key; absent when none. */
  unkept?: string[];
}

/** The header layouts writers use (see the module header). */
export type TarHeaderFormat = "posix" | "star" | "gnu" | "v7";

const KIND_BY_TYPEFLAG: Record<string, TarEntryKind> = {
  "0": "file",
  "\0": "file",
  "7": "file",
  "1": "hardlink",
  "2": "symlink",
  "3": "char",
  "4": "block",
  "5": "dir",
  "6": "fifo",
  // GNU incremental "dumpdir": a directory whose body lists its names for `tar -G`; extracted as a plain directory.
  D: "dir",
};

/**
 * A chunk stream that can also jump: `skip(n)` makes the next chunk start
 * `n` bytes further on than it would have (a file read by position), and
 * returns false when that is past the end. readTar uses it for the bodies
 * its consumer leaves unread, so they are never read.
 */
export interface SkippableChunks extends AsyncIterable<Uint8Array> {
  skip(n: number): boolean;
}

/** Pulls exact byte counts out of an async chunk stream. */
class ByteReader {
  private buf: Uint8Array = new Uint8Array(0);
  private off = 0;
  private done = false;
  private readonly it: AsyncIterator<Uint8Array>;
  private readonly jump: ((n: number) => boolean) | null;
  /** Bytes consumed so far. */
  position = 0;
  constructor(source: AsyncIterable<Uint8Array> | SkippableChunks) {
    this.it = source[Symbol.asyncIterator]();
    this.jump = "skip" in source ? (n) => source.skip(n) : null;
  }
  /** Passes over the next `n` bytes without yielding them (without reading them, from a SkippableChunks). Throws IMAGE_LAYER_INVALID when truncated. */
  async skip(n: number): Promise<void> {
    const held = Math.min(n, this.buf.length - this.off);
    this.off += held;
    this.position += held;
    const left = n - held;
    if (left === 0) return;
    if (this.jump) {
      if (this.done || !this.jump(left))
        throw imageError("IMAGE_LAYER_INVALID", `tar stream truncated inside an entry at byte ${this.position}`);
      this.position += left;
      return;
    }
    for await (const _ of this.chunks(left)) {
      /* skip */
    }
  }
  private async fill(): Promise<boolean> {
    if (this.done) return false;
    const r = await this.it.next();
    if (r.done) {
      this.done = true;
      return false;
    }
    const rest = this.buf.subarray(this.off);
    if (rest.length === 0) {
      this.buf = r.value;
      this.off = 0;
      return true;
    }
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
        throw imageError(
          "IMAGE_LAYER_INVALID",
          `tar stream truncated at byte ${this.position + this.buf.length - this.off}`,
        );
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

/**
 * The value of an octal field in its common spelling (spaces, octal digits,
 * spaces, then NUL or the field's end), read from the bytes; null for any
 * other spelling, which parseTarNumber reads (and refuses) as text.
 */
function plainOctal(field: Uint8Array): number | null {
  const n = field.length;
  let i = 0;
  while (i < n && field[i] === 0x20) i++;
  let v = 0;
  let digits = 0;
  for (; i < n; i++, digits++) {
    const c = field[i]!;
    if (c < 0x30 || c > 0x37) break;
    v = v * 8 + (c - 0x30);
  }
  while (i < n && field[i] === 0x20) i++;
  return digits > 0 && (i === n || field[i] === 0) && Number.isSafeInteger(v) ? v : null;
}

/** Parses an octal or base-256 numeric field. Throws IMAGE_LAYER_INVALID. */
export function parseTarNumber(field: Uint8Array, what: string): number {
  const plain = plainOctal(field);
  if (plain !== null) return plain;
  if (field.length > 0 && (field[0]! & 0x80) !== 0) {
    if (field[0] === 0xff) throw imageError("IMAGE_LAYER_INVALID", `negative base-256 ${what}`);
    let v = field[0]! & 0x7f;
    for (let i = 1; i < field.length; i++) {
      v = v * 256 + field[i]!;
      if (!Number.isSafeInteger(v)) throw imageError("IMAGE_LAYER_INVALID", `${what} too large`);
    }
    return v;
  }
  const text = byteName(field).replace(/\0.*$/s, "").trim();
  if (text === "") return 0;
  if (!/^[0-7]+$/.test(text))
    throw imageError("IMAGE_LAYER_INVALID", `bad octal ${what} ${JSON.stringify(text.slice(0, 20))}`);
  const v = parseInt(text, 8);
  if (!Number.isSafeInteger(v)) throw imageError("IMAGE_LAYER_INVALID", `${what} too large`);
  return v;
}

function allZero(b: Uint8Array): boolean {
  for (let i = 0; i < b.length; i++) if (b[i] !== 0) return false;
  return true;
}

function cString(b: Uint8Array): string {
  const nul = b.indexOf(0);
  return byteName(nul >= 0 ? b.subarray(0, nul) : b);
}

/** True when the stored checksum matches the header's unsigned byte sum (or the signed one some old writers used). */
function checksumOk(h: Uint8Array): boolean {
  const stored = parseTarNumber(h.subarray(148, 156), "checksum");
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < TAR_BLOCK_BYTES; i++) {
    const x = i >= 148 && i < 156 ? 0x20 : h[i]!;
    unsigned += x;
    signed += x > 127 ? x - 256 : x;
  }
  return stored === unsigned || stored === signed;
}

const same = (h: Uint8Array, off: number, s: string) => {
  for (let i = 0; i < s.length; i++) if (h[off + i] !== s.charCodeAt(i)) return false;
  return true;
};

/**
 * Which header layout `h` uses, from its magic and version (as Go's
 * archive/tar and GNU tar tell them apart). Throws IMAGE_LAYER_UNSUPPORTED
 * for a `ustar` magic with an unknown version: its fields past the magic
 * cannot be read safely.
 */
export function tarHeaderFormat(h: Uint8Array): TarHeaderFormat {
  if (same(h, 257, "ustar\0")) {
    if (!same(h, 263, "00"))
      throw imageError(
        "IMAGE_LAYER_UNSUPPORTED",
        `tar header with magic "ustar\\0" and unknown version ${showName(byteName(h.subarray(263, 265)))}`,
      );
    return same(h, 508, "tar\0") ? "star" : "posix";
  }
  if (same(h, 257, "ustar  \0")) return "gnu";
  if (h.subarray(257, 265).every((b) => b === 0)) return "v7";
  throw imageError(
    "IMAGE_LAYER_UNSUPPORTED",
    `tar header with unknown magic ${showName(byteName(h.subarray(257, 265)))}`,
  );
}

/** The name prefix field of each layout, [offset, length]; none for GNU and v7. */
const PREFIX_FIELD: Record<TarHeaderFormat, [number, number] | null> = {
  posix: [345, 155],
  star: [345, 131],
  gnu: null,
  v7: null,
};

/** One entry: its header and, for files, its body as chunks (consume it or it is skipped). */
export interface TarEntry {
  header: TarHeader;
  body: AsyncGenerator<Uint8Array>;
  /** Byte offset of the body in the tar stream (where a copy of the stream holds it). */
  offset: number;
}

async function readMeta(r: ByteReader, size: number, what: string): Promise<Uint8Array> {
  if (size > MAX_TAR_META_BYTES)
    throw imageError("IMAGE_LAYER_INVALID", `${what} record of ${size} bytes exceeds ${MAX_TAR_META_BYTES}`);
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
 * sparse files). From a SkippableChunks source, bodies left unread are
 * jumped over, never read.
 */
export async function* readTar(source: AsyncIterable<Uint8Array> | SkippableChunks): AsyncGenerator<TarEntry> {
  const r = new ByteReader(source);
  let pax: Map<string, Uint8Array> | null = null;
  let longName: string | null = null;
  let longLink: string | null = null;
  const globalPax = new Map<string, Uint8Array>();
  for (;;) {
    const h = await r.read(TAR_BLOCK_BYTES);
    if (!h || allZero(h)) break;
    if (!checksumOk(h))
      throw imageError("IMAGE_LAYER_INVALID", `tar header checksum mismatch at byte ${r.position - TAR_BLOCK_BYTES}`);
    const typeflag = String.fromCharCode(h[156]!);
    let size = parseTarNumber(h.subarray(124, 136), "size");
    const format = tarHeaderFormat(h);
    if (typeflag === "x" || typeflag === "g" || typeflag === "L" || typeflag === "K") {
      const body = await readMeta(r, size, typeflag === "L" || typeflag === "K" ? "GNU long name" : "PAX");
      if (typeflag === "x") pax = parsePaxRecords(body);
      else if (typeflag === "L") longName = cString(body);
      else if (typeflag === "K") longLink = cString(body);
      // "g": defaults for every later member (POSIX pax "typeflag g"), under each member's own "x" records.
      else for (const [k, v] of parsePaxRecords(body)) globalPax.set(k, v);
      continue;
    }
    let kind = KIND_BY_TYPEFLAG[typeflag];
    if (!kind)
      throw imageError("IMAGE_LAYER_UNSUPPORTED", `tar entry type ${JSON.stringify(typeflag)} is not supported`);
    const prefixField = PREFIX_FIELD[format];
    const prefix = prefixField ? cString(h.subarray(prefixField[0], prefixField[0] + prefixField[1])) : "";
    let path = longName ?? (prefix ? `${prefix}/${cString(h.subarray(0, 100))}` : cString(h.subarray(0, 100)));
    let linkname = longLink ?? cString(h.subarray(157, 257));
    let uid = parseTarNumber(h.subarray(108, 116), "uid");
    let gid = parseTarNumber(h.subarray(116, 124), "gid");
    let mtime = parseTarNumber(h.subarray(136, 148), "mtime");
    let xattrs = new Map<string, Uint8Array>();
    let unkept: string[] = [];
    const records = globalPax.size ? new Map([...globalPax, ...(pax ?? [])]) : pax;
    if (records) {
      let o;
      try {
        o = paxOverrides(records);
      } catch (e) {
        if (e instanceof Error)
          e.message += ` (member ${showName(records.has("path") ? byteName(records.get("path")!) : path)})`;
        throw e;
      }
      path = o.path ?? path;
      linkname = o.linkname ?? linkname;
      size = o.size ?? size;
      uid = o.uid ?? uid;
      gid = o.gid ?? gid;
      mtime = o.mtime ?? mtime;
      xattrs = o.xattrs;
      unkept = o.unkept;
    }
    pax = null;
    longName = null;
    longLink = null;
    if (path.length > MAX_TAR_PATH_BYTES || linkname.length > MAX_TAR_PATH_BYTES) {
      throw imageError("IMAGE_LAYER_INVALID", `tar member name longer than ${MAX_TAR_PATH_BYTES} bytes`);
    }
    if (path.includes("\0") || linkname.includes("\0"))
      throw imageError("IMAGE_LAYER_INVALID", `tar member name ${showName(path)} holds a NUL byte`);
    if (kind === "file" && path.endsWith("/")) {
      // v7 writers mark a directory only by the slash; a "0"/"7" member with one names no file.
      if (typeflag !== "\0")
        throw imageError("IMAGE_LAYER_INVALID", `regular file member ${showName(path)} ends in "/"`);
      kind = "dir";
    }
    // Only regular files carry a body; like Go's archive/tar, the size of header-only types is ignored,
    // but a GNU dumpdir's listing follows its header and is skipped.
    const bodySize = kind === "file" ? size : 0;
    const skipSize = typeflag === "D" ? size : bodySize;
    const header: TarHeader = {
      path,
      kind,
      mode: parseTarNumber(h.subarray(100, 108), "mode") & 0o7777,
      uid,
      gid,
      mtime,
      size: bodySize,
      linkname,
      devmajor: kind === "char" || kind === "block" ? parseTarNumber(h.subarray(329, 337), "devmajor") : 0,
      devminor: kind === "char" || kind === "block" ? parseTarNumber(h.subarray(337, 345), "devminor") : 0,
      xattrs,
      ...(unkept.length ? { unkept } : {}),
    };
    const state = { left: bodySize };
    const afterBody = skipSize - bodySize;
    async function* body(): AsyncGenerator<Uint8Array> {
      for await (const c of r.chunks(state.left)) {
        state.left -= c.length;
        yield c;
      }
    }
    yield { header, body: body(), offset: r.position };
    // Skip what the consumer left (it may have stopped early, which closes its generator).
    if (state.left > 0) await r.skip(state.left);
    if (afterBody > 0) await r.skip(afterBody);
    const total = skipSize;
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

/** One PAX record; `key` is a byte name. */
function paxRecord(key: string, value: Uint8Array): Uint8Array {
  const k = nameBytes(` ${key}=`);
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

const TYPEFLAG_BY_KIND: Record<TarEntryKind, string> = {
  file: "0",
  hardlink: "1",
  symlink: "2",
  char: "3",
  block: "4",
  dir: "5",
  fifo: "6",
};

/** Writes ASCII `s` at `off`. */
function putAscii(b: Uint8Array, off: number, s: string): void {
  for (let i = 0; i < s.length; i++) b[off + i] = s.charCodeAt(i);
}

/**
 * Writes `n` as `width - 1` octal digits and a NUL at `off` (what `octal(n,
 * width)` spells); a number with more digits is written as that string cut
 * to `width` bytes, as it always was.
 */
function putOctal(b: Uint8Array, off: number, n: number, width: number): void {
  if (!(n >= 0 && n < 8 ** (width - 1) && Number.isInteger(n))) {
    const s = octal(n, width);
    putAscii(b, off, s.length > width ? s.slice(0, width) : s);
    return;
  }
  let v = n;
  for (let i = width - 2; i >= 0; i--) {
    b[off + i] = 0x30 + (v % 8);
    v = Math.floor(v / 8);
  }
  b[off + width - 1] = 0;
}

function headerBlock(
  name: Uint8Array,
  typeflag: string,
  h: {
    mode: number;
    uid: number;
    gid: number;
    mtime: number;
    size: number;
    linkname: Uint8Array;
    devmajor: number;
    devminor: number;
  },
): Uint8Array {
  // Fields written in place (no per-field strings or views: this runs once per entry of a root of many thousands).
  const b = new Uint8Array(TAR_BLOCK_BYTES);
  b.set(name.length > 100 ? name.subarray(0, 100) : name, 0);
  putOctal(b, 100, h.mode, 8);
  putOctal(b, 108, h.uid, 8);
  putOctal(b, 116, h.gid, 8);
  putOctal(b, 124, h.size, 12);
  putOctal(b, 136, h.mtime, 12);
  b[156] = typeflag.charCodeAt(0);
  b.set(h.linkname.length > 100 ? h.linkname.subarray(0, 100) : h.linkname, 157);
  putAscii(b, 257, "ustar\0");
  putAscii(b, 263, "00");
  putOctal(b, 329, h.devmajor, 8);
  putOctal(b, 337, h.devminor, 8);
  b.fill(0x20, 148, 156);
  let sum = 0;
  for (let i = 0; i < TAR_BLOCK_BYTES; i++) sum += b[i]!;
  putAscii(b, 148, sum.toString(8).padStart(6, "0") + "\0 ");
  return b;
}

/** The largest value a 12-digit octal field holds (8 GiB − 1) and an 8-digit one (2097151). */
const MAX_OCTAL_12 = 0o77777777777;
const MAX_OCTAL_8 = 0o7777777;

/**
 * Encodes one entry's header blocks (a PAX header first when the name,
 * link target, ids, size or extended attributes do not fit ustar), in a
 * canonical form: the same header always gives the same bytes. Names are
 * byte names (byteName.ts), written byte-exact; throws a plain Error for a
 * string that is not one (a caller bug). The caller
 * writes the body (for files) and `tarPadding(size)` after it.
 */
export function encodeTarHeader(h: TarHeader): Uint8Array {
  const records: Uint8Array[] = [];
  const name = nameBytes(h.path);
  const link = nameBytes(h.linkname);
  const xattrNames = h.xattrs.size ? [...h.xattrs.keys()].sort() : [];
  // Names that are not UTF-8 go out byte-exact, marked as such (as GNU tar does); only a PAX header can say so.
  const paxNames = name.length > 99 || link.length > 99 || xattrNames.length > 0;
  if (paxNames && [h.path, h.linkname, ...xattrNames].some((n) => utf8Text(n) === null))
    records.push(paxRecord("hdrcharset", enc.encode("BINARY")));
  if (name.length > 99) records.push(paxRecord("path", name));
  if (link.length > 99) records.push(paxRecord("linkpath", link));
  if (h.uid > MAX_OCTAL_8) records.push(paxRecord("uid", enc.encode(String(h.uid))));
  if (h.gid > MAX_OCTAL_8) records.push(paxRecord("gid", enc.encode(String(h.gid))));
  if (h.size > MAX_OCTAL_12) records.push(paxRecord("size", enc.encode(String(h.size))));
  for (const x of xattrNames) records.push(paxRecord(`SCHILY.xattr.${x}`, h.xattrs.get(x)!));
  const fields = {
    mode: h.mode,
    uid: Math.min(h.uid, MAX_OCTAL_8),
    gid: Math.min(h.gid, MAX_OCTAL_8),
    mtime: Math.min(h.mtime, MAX_OCTAL_12),
    size: Math.min(h.size, MAX_OCTAL_12),
    linkname: link.length > 99 ? new Uint8Array(0) : link,
    devmajor: h.devmajor,
    devminor: h.devminor,
  };
  const main = headerBlock(name.length > 99 ? name.subarray(0, 99) : name, TYPEFLAG_BY_KIND[h.kind], fields);
  if (records.length === 0) return main;
  const paxBody = Buffer.concat(records);
  const paxHeader = headerBlock(enc.encode("././@PaxHeader"), "x", {
    mode: 0o644,
    uid: 0,
    gid: 0,
    mtime: 0,
    size: paxBody.length,
    linkname: new Uint8Array(0),
    devmajor: 0,
    devminor: 0,
  });
  return Buffer.concat([paxHeader, paxBody, tarPadding(paxBody.length), main]);
}

/** Zero bytes that pad a body of `size` bytes to the block size. */
export function tarPadding(size: number): Uint8Array {
  return new Uint8Array((TAR_BLOCK_BYTES - (size % TAR_BLOCK_BYTES)) % TAR_BLOCK_BYTES);
}

/** The two zero blocks that end an archive. */
export const TAR_END = new Uint8Array(2 * TAR_BLOCK_BYTES);
