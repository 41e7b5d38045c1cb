/**
 * Key files and in-place signing of image directories (spec "Images").
 *
 * A private key file holds one line: the base64 Ed25519 seed (format in
 * signing.ts). It is created exclusively with mode 0600 and refused when
 * group or others can read it. A public key file holds one line: the base64
 * public key. `signImageDir` rewrites `DIR/manifest.json` atomically and
 * proves the digest did not change. Must never: overwrite an existing key
 * file, print or log a private key, or leave a half-written manifest.
 */
import {
  chmodSync,
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { type ImageManifest, MANIFEST_FILE_NAME, imageDigest, manifestShapeProblem } from "../protocol/image.ts";
import { imageError } from "./errors.ts";
import {
  generateSigningKey,
  isPublicKey,
  publicKeyOf,
  signManifest,
  type SigningKeyPair,
  verifyManifestSignature,
} from "./signing.ts";

/** Largest key file we read, bytes (a key line is 45). */
const MAX_KEY_FILE_BYTES = 4096;
/** Largest manifest.json signImageDir reads, bytes. */
const MAX_MANIFEST_FILE_BYTES = 64 * 1024;
/** Name of the dev signing key inside the dev-build cache directory. */
export const DEV_SIGNING_KEY_FILE = "dev-signing.key";
/** Name of the dev image's public key file, written next to its manifest. */
export const TRUSTED_DEV_KEY_FILE = "trusted-dev-key.pub";

function readSmall(path: string): string {
  const size = statSync(path).size;
  if (size > MAX_KEY_FILE_BYTES) throw new Error(`${path} is larger than ${MAX_KEY_FILE_BYTES} bytes; not a key file`);
  return readFileSync(path, "utf8");
}

/**
 * Generates a key pair and writes the private key to `path` (must not
 * exist; created O_EXCL with mode 0600). Returns both halves. Throws the
 * fs error (EEXIST when the file exists).
 */
export function createPrivateKeyFile(path: string): SigningKeyPair {
  const pair = generateSigningKey();
  const fd = openSync(path, "wx", 0o600);
  try {
    writeSync(fd, `${pair.privateKey}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  chmodSync(path, 0o600); // in case the umask was stricter than needed, or a looser one applied
  return pair;
}

/**
 * Reads a private key file. Throws an Error when it is missing, readable by
 * group or others (mode & 0o077), or not one base64 32-byte seed.
 */
export function readPrivateKeyFile(path: string): SigningKeyPair {
  const mode = statSync(path).mode & 0o777;
  if (mode & 0o077)
    throw new Error(
      `${path} has mode ${mode.toString(8)}; a private key file must not be readable by group or others (chmod 600)`,
    );
  const privateKey = readSmall(path).trim();
  return { privateKey, publicKey: publicKeyOf(privateKey) };
}

/** Reads the private key at `path`, creating it (mode 0600) when absent. Throws like read/createPrivateKeyFile. */
export function ensurePrivateKeyFile(path: string): SigningKeyPair {
  try {
    return createPrivateKeyFile(path);
  } catch (e) {
    if ((e as { code?: string }).code !== "EEXIST") throw e;
    return readPrivateKeyFile(path);
  }
}

/**
 * A trusted public key from a CLI or config value: the base64 key itself,
 * or the path of a file holding it. Throws an Error when neither.
 */
export function readPublicKeyArg(arg: string): string {
  const v = arg.trim();
  if (isPublicKey(v)) return v;
  let text: string;
  try {
    text = readSmall(v).trim();
  } catch {
    throw new Error(
      `trusted key ${JSON.stringify(v.slice(0, 80))} is neither a base64 Ed25519 public key nor a readable key file`,
    );
  }
  if (!isPublicKey(text)) throw new Error(`${v} does not hold a base64 Ed25519 public key`);
  return text;
}

/** Reads and shape-checks `dir/manifest.json`; throws IMAGE_NOT_FOUND or IMAGE_DIGEST_MISMATCH. */
export function readManifestFile(dir: string): ImageManifest {
  const path = join(dir, MANIFEST_FILE_NAME);
  let text: string;
  try {
    if (statSync(path).size > MAX_MANIFEST_FILE_BYTES)
      throw imageError("IMAGE_DIGEST_MISMATCH", `${path} exceeds ${MAX_MANIFEST_FILE_BYTES} bytes`);
    text = readFileSync(path, "utf8");
  } catch (e) {
    if ((e as { code?: string }).code === "IMAGE_DIGEST_MISMATCH") throw e;
    throw imageError("IMAGE_NOT_FOUND", `no readable ${MANIFEST_FILE_NAME} in ${dir}`);
  }
  let m: unknown;
  try {
    m = JSON.parse(text);
  } catch {
    throw imageError("IMAGE_DIGEST_MISMATCH", `${path} is not valid JSON`);
  }
  const problem = manifestShapeProblem(m);
  if (problem) throw imageError("IMAGE_DIGEST_MISMATCH", `${path} is malformed: ${problem}`);
  return m as ImageManifest;
}

/** Writes `text` to `path` via a same-directory temp file, fsync and rename. */
function writeAtomically(path: string, text: string, mode: number): void {
  const tmp = `${path}.tmp-${randomBytes(6).toString("hex")}`;
  const fd = openSync(tmp, "wx", mode);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
}

/**
 * Signs `dir/manifest.json` in place with `privateKey` (base64 seed) and
 * returns the signed manifest and its digest, which equals the digest
 * before signing (checked; an Error if not). Throws IMAGE_NOT_FOUND /
 * IMAGE_DIGEST_MISMATCH for a missing or malformed manifest.
 */
export function signImageDir(dir: string, privateKey: string): { manifest: ImageManifest; digest: string } {
  const before = readManifestFile(dir);
  const digest = imageDigest(before);
  const manifest = signManifest(before, privateKey);
  if (imageDigest(manifest) !== digest)
    throw new Error("signing changed the image digest (canonical bytes must exclude the signature)");
  writeAtomically(join(dir, MANIFEST_FILE_NAME), JSON.stringify(manifest, null, 2) + "\n", 0o644);
  return { manifest, digest };
}

/**
 * Dev images (spec "Images", dev build): makes sure the image in `dir` is
 * signed by the dev key `cacheDir/dev-signing.key` (created once, mode
 * 0600) and writes that key's public half to `dir/trusted-dev-key.pub`.
 * Re-signs only when the current signature does not verify under the dev
 * key; the digest never changes. Returns the public key and the manifest.
 * Throws like signImageDir and ensurePrivateKeyFile.
 */
export function ensureDevSigned(dir: string, cacheDir: string): { publicKey: string; manifest: ImageManifest } {
  mkdirSync(cacheDir, { recursive: true });
  const key = ensurePrivateKeyFile(join(cacheDir, DEV_SIGNING_KEY_FILE));
  let manifest = readManifestFile(dir);
  try {
    verifyManifestSignature(manifest, [key.publicKey]);
  } catch {
    manifest = signImageDir(dir, key.privateKey).manifest;
  }
  writeFileSync(join(dir, TRUSTED_DEV_KEY_FILE), `${key.publicKey}\n`, { mode: 0o644 });
  return { publicKey: key.publicKey, manifest };
}
