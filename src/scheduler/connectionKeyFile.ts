/**
 * The connection-signing key file of the embedded host (docs/manifest.md,
 * `connections.signingKey.file`): one line, the base64 Ed25519 seed, in a
 * file that group and others cannot read (mode 0600 or stricter), read each
 * time the key is used (spec "Authentication and identity": secrets named
 * by reference, resolved at use) and never copied.
 * Must never: read a file readable by group or others, read more than a
 * key's worth of bytes, or put the file's content into an error.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import type { SeedSource } from "./connectionSigner.ts";

/** Largest key file read, bytes (a key line is 45). */
const MAX_KEY_FILE_BYTES = 256;

/**
 * A seed source reading `path`. Each call throws an Error when the file is
 * missing, not a regular file, readable by group or others, or larger
 * than MAX_KEY_FILE_BYTES.
 */
export function keyFileSeed(path: string): SeedSource {
  return () => {
    let fd: number;
    try {
      fd = openSync(path, "r");
    } catch (e) {
      throw new Error(`cannot read ${path} (${(e as NodeJS.ErrnoException).code ?? "error"})`);
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) throw new Error(`${path} is not a regular file`);
      const mode = st.mode & 0o777;
      if (mode & 0o077)
        throw new Error(
          `${path} has mode ${mode.toString(8)}; the connection-signing key must not be readable by group or others (chmod 600)`,
        );
      if (st.size > MAX_KEY_FILE_BYTES)
        throw new Error(`${path} is larger than ${MAX_KEY_FILE_BYTES} bytes; not a key file`);
      const buf = Buffer.alloc(MAX_KEY_FILE_BYTES);
      const n = readSync(fd, buf, 0, buf.length, 0);
      return buf.subarray(0, n).toString("utf8");
    } finally {
      closeSync(fd);
    }
  };
}
