/**
 * The image library's own error (src/image is role-free: the CLI signs,
 * verifies and builds with it, the agent resolves images with it):
 * ImageError with a small closed set of stable codes. Roles map these codes
 * to theirs (the agent: AgentError.from in src/agent/errors.ts). Callers
 * branch on `code`, never on message text.
 * Must never: put a private key, a signature secret or a credential-bearing
 * URL in a message.
 */
import { IMAGE_BUILD_ERROR_CODES } from "../protocol/errors.ts";

/**
 * Every stable image error code: an image not found, bytes or a manifest not
 * matching their digest, a signature not trusted (spec "Images",
 * "Prepare"), and the OCI builder's refusals (IMAGE_BUILD_ERROR_CODES in
 * src/protocol/errors.ts).
 */
export const IMAGE_ERROR_CODES = [
  "IMAGE_NOT_FOUND",
  "IMAGE_DIGEST_MISMATCH",
  "IMAGE_SIGNATURE_INVALID",
  ...IMAGE_BUILD_ERROR_CODES,
] as const;

/** One image error code. */
export type ImageErrorCode = (typeof IMAGE_ERROR_CODES)[number];

/** An image that could not be found, verified, trusted or built. */
export class ImageError extends Error {
  /** `code`: the stable reason; `cause`: the underlying error, if any. */
  constructor(
    readonly code: ImageErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "ImageError";
  }
}

/** Builds an ImageError. Throws nothing. */
export function imageError(code: ImageErrorCode, msg: string): ImageError {
  return new ImageError(code, msg);
}

/** The image error code of a thrown value, or undefined when it is not an ImageError. */
export function imageErrorCode(e: unknown): ImageErrorCode | undefined {
  return e instanceof ImageError ? e.code : undefined;
}
