/**
 * PAX extended header records (POSIX.1-2001 `pax` format, typeflags `x`
 * and `g`) as the layer reader (tar.ts) applies them to one entry.
 *
 * Owns: splitting records (`"<len> <key>=<value>\n"`), and turning the keys
 * an image needs into header overrides: `path`, `linkpath`, `size`, `uid`,
 * `gid`, `mtime`, extended attributes (`SCHILY.xattr.<name>` as GNU tar and
 * star write them, `LIBARCHIVE.xattr.<%-encoded name>` with a base64 value
 * as bsdtar writes them), and POSIX ACL records (`SCHILY.acl.*`), which are
 * reported as unkept because no squashfs can hold them.
 * Names stay byte-exact (byteName.ts): keys and values are never decoded as
 * UTF-8, whatever `hdrcharset` says.
 * Refuses: malformed records, a non-numeric number (IMAGE_LAYER_INVALID),
 * GNU PAX sparse files (`GNU.sparse.*`, IMAGE_LAYER_UNSUPPORTED: read as a
 * plain file they would give a file with the wrong bytes).
 * Must never: drop a record that changes what a file is without saying so.
 */
import { imageError } from "../errors.ts";
import { byteName, showName } from "./byteName.ts";

/** Most extended-attribute bytes (names plus values) on one entry. */
export const MAX_TAR_XATTR_BYTES = 64 * 1024;

const SCHILY_XATTR = "SCHILY.xattr.";
const LIBARCHIVE_XATTR = "LIBARCHIVE.xattr.";
/** PAX keys of POSIX and NFSv4 ACLs (GNU tar `--acls`, star). */
const ACL_KEYS = new Set(["SCHILY.acl.access", "SCHILY.acl.default", "SCHILY.acl.ace"]);

const invalid = (msg: string) => imageError("IMAGE_LAYER_INVALID", msg);

/** Parses PAX records into key (a byte name) → raw value bytes; later records win. Throws IMAGE_LAYER_INVALID. */
export function parsePaxRecords(body: Uint8Array): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  let i = 0;
  while (i < body.length) {
    if (body[i] === 0) break; // some writers pad with NULs
    const sp = body.indexOf(0x20, i);
    if (sp < 0) throw invalid("PAX record without a length");
    const digits = byteName(body.subarray(i, sp));
    const len = /^[0-9]{1,9}$/.test(digits) ? Number(digits) : NaN;
    if (!Number.isSafeInteger(len) || len <= sp - i + 1 || i + len > body.length || body[i + len - 1] !== 0x0a) {
      throw invalid("malformed PAX record");
    }
    const rec = body.subarray(sp + 1, i + len - 1);
    const eq = rec.indexOf(0x3d);
    if (eq <= 0) throw invalid("PAX record without a key");
    out.set(byteName(rec.subarray(0, eq)), rec.subarray(eq + 1));
    i += len;
  }
  return out;
}

/** What PAX records change in one entry's header. Absent fields keep the header's value. */
export interface PaxOverrides {
  path?: string;
  linkname?: string;
  size?: number;
  uid?: number;
  gid?: number;
  mtime?: number;
  /** Extended attributes, name (a byte name) → value bytes. */
  xattrs: Map<string, Uint8Array>;
  /** Keys of records the reader read but cannot keep (ACLs). */
  unkept: string[];
}

function whole(key: string, v: Uint8Array, fraction: boolean): number | undefined {
  const t = byteName(v);
  if (t === "") return undefined; // an empty value reverts to the header's field
  if (!(fraction ? /^[0-9]{1,20}(\.[0-9]{0,20})?$/ : /^[0-9]{1,20}$/).test(t))
    throw invalid(`bad PAX ${key} ${showName(t, 40)}`);
  const n = Math.floor(Number(t));
  if (!Number.isSafeInteger(n)) throw invalid(`PAX ${key} too large`);
  return n;
}

/** Percent-decodes a LIBARCHIVE.xattr name to its bytes. Throws IMAGE_LAYER_INVALID. */
function percentDecoded(s: string): string {
  return s.replace(/%([0-9A-Fa-f]{2})|%/g, (m, hex: string | undefined) => {
    if (hex === undefined) throw invalid(`bad %-escape in PAX key ${showName(s, 80)}`);
    return String.fromCharCode(parseInt(hex, 16));
  });
}

/**
 * The overrides `records` make (see the module header). Throws
 * IMAGE_LAYER_INVALID (bad numbers, xattrs over MAX_TAR_XATTR_BYTES) and
 * IMAGE_LAYER_UNSUPPORTED (GNU sparse records).
 */
export function paxOverrides(records: Map<string, Uint8Array>): PaxOverrides {
  const o: PaxOverrides = { xattrs: new Map(), unkept: [] };
  let xattrBytes = 0;
  const addXattr = (name: string, v: Uint8Array) => {
    if (name === "") throw invalid("PAX extended attribute with an empty name");
    xattrBytes += name.length + v.length;
    if (xattrBytes > MAX_TAR_XATTR_BYTES) throw invalid(`extended attributes exceed ${MAX_TAR_XATTR_BYTES} bytes`);
    o.xattrs.set(name, v);
  };
  for (const [k, v] of records) {
    if (k === "path") o.path = byteName(v);
    else if (k === "linkpath") o.linkname = byteName(v);
    else if (k === "size" || k === "uid" || k === "gid") {
      const n = whole(k, v, false);
      if (n !== undefined) o[k] = n;
    } else if (k === "mtime") {
      const n = whole(k, v, true);
      if (n !== undefined) o.mtime = n;
    } else if (k.startsWith("GNU.sparse.")) {
      throw imageError("IMAGE_LAYER_UNSUPPORTED", `GNU sparse file (PAX ${k}); write the layer without --sparse`);
    } else if (k.startsWith(LIBARCHIVE_XATTR)) {
      const value = Buffer.from(byteName(v), "base64");
      const name = percentDecoded(k.slice(LIBARCHIVE_XATTR.length));
      // bsdtar writes SCHILY.xattr beside it for the same attribute; that one wins.
      if (!records.has(SCHILY_XATTR + name)) addXattr(name, value);
    } else if (k.startsWith(SCHILY_XATTR)) addXattr(k.slice(SCHILY_XATTR.length), v);
    else if (ACL_KEYS.has(k)) o.unkept.push(k);
  }
  return o;
}
