/**
 * Ed25519 signatures over image manifests (spec "Images": "signature:
 * Ed25519 over canonical bytes"; "Prepare (ensure_present)": verify the
 * manifest's signature against the host's trusted keys).
 *
 * Key format (the only one this module reads or writes):
 * - public key: standard base64 of the raw 32-byte Ed25519 public key
 *   (44 characters, e.g. `r1dmPeJfftEj…299Q=`);
 * - private key: standard base64 of the raw 32-byte Ed25519 seed (RFC 8032
 *   "private key"), 44 characters;
 * - signature: standard base64 of the raw 64-byte signature (88 characters).
 *
 * The signature covers `canonicalManifestBytes`, which exclude the
 * `signature` field, so signing never changes an image's digest.
 * Pure crypto: no file I/O (key files live in keyFile.ts). Must never: log
 * or put a private key in an error message, or accept a manifest when no
 * trusted key verifies it.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign, verify } from "node:crypto";
import { type ImageManifest, canonicalManifestBytes, manifestShapeProblem } from "../protocol/image.ts";
import { imageError } from "./errors.ts";

/** Raw Ed25519 public key and seed length, bytes. */
export const ED25519_KEY_BYTES = 32;
/** Raw Ed25519 signature length, bytes. */
export const ED25519_SIGNATURE_BYTES = 64;

/** DER prefixes that wrap a raw 32-byte key as PKCS#8 (private) or SPKI (public) for node:crypto. */
const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");
const SPKI_ED25519_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

/** A new key pair, both halves as standard base64 of 32 raw bytes. */
export interface SigningKeyPair {
  /** Base64 of the 32-byte seed. Secret: store mode 0600, never log. */
  privateKey: string;
  /** Base64 of the 32-byte public key; goes into hosts' trusted keys. */
  publicKey: string;
}

/** Decodes strict standard base64 of exactly `bytes` bytes, or returns null. */
function decodeExact(s: string, bytes: number): Buffer | null {
  const chars = 4 * Math.ceil(bytes / 3);
  if (s.length !== chars || !/^[A-Za-z0-9+/]+={0,2}$/.test(s)) return null;
  const b = Buffer.from(s, "base64");
  return b.length === bytes && b.toString("base64") === s ? b : null;
}

/** True when `s` is a public key in this module's format (base64 of 32 bytes). Throws nothing. */
export function isPublicKey(s: string): boolean {
  return decodeExact(s, ED25519_KEY_BYTES) !== null;
}

function privateKeyObject(privateKey: string): KeyObject {
  const seed = decodeExact(privateKey.trim(), ED25519_KEY_BYTES);
  if (!seed) throw new Error("signing key is not standard base64 of a 32-byte Ed25519 seed");
  return createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: "der", type: "pkcs8" });
}

function rawPublicKey(k: KeyObject): string {
  const der = createPublicKey(k).export({ format: "der", type: "spki" });
  return Buffer.from(der.subarray(SPKI_ED25519_PREFIX.length)).toString("base64");
}

/** Generates a fresh Ed25519 key pair from the OS CSPRNG. Throws nothing. */
export function generateSigningKey(): SigningKeyPair {
  const { privateKey } = generateKeyPairSync("ed25519");
  const der = privateKey.export({ format: "der", type: "pkcs8" });
  return {
    privateKey: Buffer.from(der.subarray(PKCS8_ED25519_PREFIX.length)).toString("base64"),
    publicKey: rawPublicKey(privateKey),
  };
}

/** The public key (base64) of a private key (base64 seed). Throws an Error when the private key is malformed. */
export function publicKeyOf(privateKey: string): string {
  return rawPublicKey(privateKeyObject(privateKey));
}

/**
 * Returns a copy of `manifest` whose `signature` is the Ed25519 signature
 * (base64) of its canonical bytes under `privateKey` (base64 seed). Any old
 * signature is replaced; `imageDigest` of the result equals that of the
 * input. Throws an Error when the private key is malformed.
 */
export function signManifest(manifest: ImageManifest, privateKey: string): ImageManifest {
  const sig = sign(null, canonicalManifestBytes(manifest), privateKeyObject(privateKey));
  return { ...manifest, signature: sig.toString("base64") };
}

/**
 * Checks that `manifest` is well formed (schema 1 or 2, see
 * `manifestShapeProblem`) and that its signature verifies under at least
 * one of `trustedPublicKeys` (base64, 32 bytes each). Returns the key that
 * verified it.
 *
 * Throws code IMAGE_DIGEST_MISMATCH when the manifest is malformed (the
 * same code verify.ts uses for a malformed manifest), and
 * IMAGE_SIGNATURE_INVALID when the signature is empty or malformed, when
 * no trusted key is given, when a trusted key is malformed (fails closed on
 * a bad configuration), or when no trusted key verifies it.
 */
export function verifyManifestSignature(manifest: ImageManifest, trustedPublicKeys: readonly string[]): string {
  const problem = manifestShapeProblem(manifest);
  if (problem) throw imageError("IMAGE_DIGEST_MISMATCH", `malformed manifest: ${problem}`);
  if (trustedPublicKeys.length === 0)
    throw imageError("IMAGE_SIGNATURE_INVALID", "no trusted image keys are configured");
  const keys = trustedPublicKeys.map((k, i) => {
    const raw = decodeExact(k.trim(), ED25519_KEY_BYTES);
    if (!raw)
      throw imageError(
        "IMAGE_SIGNATURE_INVALID",
        `trusted key #${i + 1} is not base64 of a 32-byte Ed25519 public key`,
      );
    return {
      text: raw.toString("base64"),
      key: createPublicKey({ key: Buffer.concat([SPKI_ED25519_PREFIX, raw]), format: "der", type: "spki" }),
    };
  });
  if (manifest.signature === "") throw imageError("IMAGE_SIGNATURE_INVALID", "manifest is unsigned");
  const sig = decodeExact(manifest.signature, ED25519_SIGNATURE_BYTES);
  if (!sig) throw imageError("IMAGE_SIGNATURE_INVALID", "manifest signature is not base64 of 64 bytes");
  const bytes = canonicalManifestBytes(manifest);
  for (const k of keys) if (verify(null, bytes, k.key, sig)) return k.text;
  throw imageError(
    "IMAGE_SIGNATURE_INVALID",
    `manifest signature does not verify under any of ${keys.length} trusted key(s)`,
  );
}
