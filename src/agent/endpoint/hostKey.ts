/**
 * The host endpoint's WireGuard key (spec "Private networking": "the private
 * key generated on the host (0600) and never sent anywhere"): generated once
 * from the randomness port and kept at `<dataDir>/wireguard/host.key`
 * (directory 0700, file 0600, standard base64 of 32 bytes and a newline).
 *
 * Owns: that file. Only the public key leaves this module's callers
 * (connectivity_update); the private key goes to the WireGuard Device.
 * Must never: log or report the private key, write it with a wider mode, or
 * use a key file that others can read (refused with a clear error instead).
 */
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { keyPairFromPrivate, type KeyPair25519, type WgRandom } from "../../wireguard/index.ts";

/** The key file under a data directory. */
export function hostKeyPath(dataDir: string): string {
  return join(dataDir, "wireguard", "host.key");
}

/**
 * The host's key pair: read from the key file, or generated with `random`
 * and written there first (atomically: a 0600 temporary file renamed into
 * place). Throws an Error naming the path (never the key) when the file is
 * group/other-accessible, malformed, or cannot be written.
 */
export function loadOrCreateHostKey(dataDir: string, random: WgRandom): KeyPair25519 {
  const dir = join(dataDir, "wireguard");
  const path = hostKeyPath(dataDir);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  if (!existsSync(path)) {
    const tmp = `${path}.tmp-${process.pid}`;
    const fd = openSync(tmp, "wx", 0o600);
    try {
      // Stored clamped (RFC 7748 §5), as `wg genkey` does, so the file reads the same in `wg`.
      writeSync(
        fd,
        Buffer.from(keyPairFromPrivate(random.fill(new Uint8Array(32))).privateKey).toString("base64") + "\n",
      );
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
  }
  const mode = statSync(path).mode & 0o777;
  if (mode & 0o077) throw new Error(`${path} has mode ${mode.toString(8)}; the WireGuard host key must be 0600`);
  const text = readFileSync(path, "utf8").trim();
  const raw = Buffer.from(text, "base64");
  if (!/^[A-Za-z0-9+/]{43}=$/.test(text) || raw.length !== 32)
    throw new Error(`${path} does not hold a base64 32-byte key`);
  return keyPairFromPrivate(new Uint8Array(raw));
}
