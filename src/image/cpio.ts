/**
 * A deterministic newc cpio writer for initramfs images (the format the
 * kernel's initramfs unpacker reads; Documentation/driver-api/early-userspace
 * in the kernel tree).
 *
 * Owns: encoding directories, files, symlinks and character devices with
 * fixed owner (0:0), fixed mtime (0) and inode numbers in entry order, so
 * the same entries always give the same bytes (and the same SHA-256). Pure:
 * file bodies are passed in. Must never: emit an entry name with `..`, a
 * leading `/`, or a duplicate.
 */

/** One initramfs entry; `path` is relative (`bin/busybox`), parents listed before children. */
export type CpioEntry =
  | { path: string; kind: "dir"; mode: number }
  | { path: string; kind: "file"; mode: number; data: Uint8Array }
  | { path: string; kind: "symlink"; target: string }
  | { path: string; kind: "char"; mode: number; major: number; minor: number };

const enc = new TextEncoder();

function pad4(n: number): Uint8Array {
  return new Uint8Array((4 - (n % 4)) % 4);
}

function record(
  name: string,
  mode: number,
  data: Uint8Array,
  ino: number,
  rdev: [number, number] = [0, 0],
): Uint8Array[] {
  const nameBytes = enc.encode(`${name}\0`);
  const fields = [ino, mode, 0, 0, 1, 0, data.length, 0, 0, rdev[0], rdev[1], nameBytes.length, 0];
  const header = enc.encode("070701" + fields.map((f) => f.toString(16).padStart(8, "0")).join(""));
  return [header, nameBytes, pad4(header.length + nameBytes.length), data, pad4(data.length)];
}

/**
 * Encodes `entries` (in the given order) plus the trailer as one newc
 * archive. Throws an Error for an unsafe or duplicate name.
 */
export function encodeCpio(entries: CpioEntry[]): Uint8Array {
  const parts: Uint8Array[] = [];
  const seen = new Set<string>();
  let ino = 1;
  for (const e of entries) {
    if (
      e.path.startsWith("/") ||
      e.path.split("/").some((c) => c === ".." || c === "" || c === ".") ||
      seen.has(e.path)
    ) {
      throw new Error(`unsafe or duplicate initramfs entry ${JSON.stringify(e.path)}`);
    }
    seen.add(e.path);
    if (e.kind === "dir") parts.push(...record(e.path, 0o040000 | e.mode, new Uint8Array(0), ino++));
    else if (e.kind === "file") parts.push(...record(e.path, 0o100000 | e.mode, e.data, ino++));
    else if (e.kind === "symlink") parts.push(...record(e.path, 0o120777, enc.encode(e.target), ino++));
    else parts.push(...record(e.path, 0o020000 | e.mode, new Uint8Array(0), ino++, [e.major, e.minor]));
  }
  parts.push(...record("TRAILER!!!", 0, new Uint8Array(0), 0));
  return Buffer.concat(parts);
}
