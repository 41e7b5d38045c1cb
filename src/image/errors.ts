/**
 * The stable error codes of the image subsystem and the one way to build an
 * error that carries one.
 *
 * Owns: `ImageErrorCode` (a subset of AGENT_ERROR_CODES plus
 * IMAGE_BUILD_ERROR_CODES in src/protocol/errors.ts, spec "Messages") and
 * `imageError`. Callers branch
 * on `code`, never on message text. Must never: put a private key, a
 * signature secret or a credential-bearing URL in a message.
 */
import { type AgentErrorCode, IMAGE_BUILD_ERROR_CODES, type ImageBuildErrorCode } from "../protocol/errors.ts";

/** Error codes image verification, signing checks, the cache and the OCI builder throw. */
export type ImageErrorCode = Extract<AgentErrorCode, "IMAGE_DIGEST_MISMATCH" | "IMAGE_NOT_FOUND" | "IMAGE_SIGNATURE_INVALID"> | ImageBuildErrorCode;

/** An Error carrying a stable image error code. */
export type ImageError = Error & { code: ImageErrorCode };

/** Builds an Error carrying a stable image error code. Throws nothing. */
export function imageError(code: ImageErrorCode, msg: string): ImageError {
  return Object.assign(new Error(msg), { code });
}

/** The image error code of a thrown value, or undefined when it carries none. */
export function imageErrorCode(e: unknown): ImageErrorCode | undefined {
  const c = (e as { code?: unknown } | null)?.code;
  if (c === "IMAGE_DIGEST_MISMATCH" || c === "IMAGE_NOT_FOUND" || c === "IMAGE_SIGNATURE_INVALID") return c;
  return (IMAGE_BUILD_ERROR_CODES as readonly unknown[]).includes(c) ? (c as ImageBuildErrorCode) : undefined;
}
