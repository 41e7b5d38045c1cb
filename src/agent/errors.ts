/**
 * The agent's one error type (spec "Messages": bounded, stable agent error
 * codes; the code list is AGENT_ERROR_CODES in src/protocol/errors.ts).
 *
 * Every agent subsystem (images, isolation, cgroups, the VMM drivers, the
 * jailer, Firecracker's API, the guest session, placement work) throws an
 * AgentError naming itself as `subsystem`; an error from outside the agent
 * (the image library's ImageError, a Node error) is converted once, at the
 * boundary where the agent first sees it, with AgentError.from, keeping it
 * as `cause`. So per-subsystem failures compose into one type the way
 * Firecracker's per-subsystem error enums compose into one action error,
 * and the reconciler reports `code` without guessing.
 * Must never: carry a bootstrap payload, a nonce or a credential in a
 * message or fact.
 */
import type { AgentErrorCode } from "../protocol/errors.ts";
import { ImageError, type ImageErrorCode } from "../image/errors.ts";

/** Which part of the agent an error comes from. */
export type AgentSubsystem =
  | "image"
  | "isolation"
  | "cgroup"
  | "vmm"
  | "jailer"
  | "firecracker-api"
  | "guest"
  | "placement";

/** Machine-readable facts about a failure (HTTP status, fault message, paths). Never secrets. */
export type AgentErrorFacts = Record<string, string | number | boolean | undefined>;

/** How the image library's codes map to agent codes (the table is the contract; the builder's refusals never reach a placement). */
const FROM_IMAGE: Record<ImageErrorCode, AgentErrorCode> = {
  IMAGE_NOT_FOUND: "IMAGE_NOT_FOUND",
  IMAGE_DIGEST_MISMATCH: "IMAGE_DIGEST_MISMATCH",
  IMAGE_SIGNATURE_INVALID: "IMAGE_SIGNATURE_INVALID",
  IMAGE_SOURCE_INVALID: "INTERNAL",
  IMAGE_BLOB_DIGEST_MISMATCH: "INTERNAL",
  IMAGE_LAYER_PATH_ESCAPE: "INTERNAL",
  IMAGE_LAYER_INVALID: "INTERNAL",
  IMAGE_LAYER_UNSUPPORTED: "INTERNAL",
};

/** See the module header. */
export class AgentError extends Error {
  /** Where it arose. */
  readonly subsystem: AgentSubsystem;
  /** Extra facts for logs and tests. */
  readonly facts: AgentErrorFacts;

  /** `code`: the stable code reported to the scheduler; `cause`: the error this one wraps. */
  constructor(
    readonly code: AgentErrorCode,
    message: string,
    opts: { subsystem?: AgentSubsystem; cause?: unknown; facts?: AgentErrorFacts } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = "AgentError";
    this.subsystem = opts.subsystem ?? "placement";
    this.facts = opts.facts ?? {};
  }

  /**
   * The boundary conversion: an AgentError stays as it is; an ImageError
   * keeps its code (mapped); anything else becomes `fallback` with the
   * original as `cause`. A foreign `code` property (an errno such as
   * ENOENT) never becomes an agent code.
   */
  static from(e: unknown, fallback: AgentErrorCode, subsystem?: AgentSubsystem): AgentError {
    if (e instanceof AgentError) return e;
    if (e instanceof ImageError) return new AgentError(FROM_IMAGE[e.code], e.message, { subsystem: "image", cause: e });
    const message = e instanceof Error ? e.message : String(e);
    return new AgentError(fallback, message, { cause: e, ...(subsystem ? { subsystem } : {}) });
  }

  /** The message with every cause's message after it ("a: b: c"), bounded to `maxChars`. */
  chain(maxChars = 2_000): string {
    const parts: string[] = [this.message];
    let c: unknown = this.cause;
    for (let depth = 0; c !== undefined && depth < 8; depth++) {
      const m = c instanceof Error ? c.message : String(c);
      if (!parts[parts.length - 1]!.includes(m)) parts.push(m);
      c = c instanceof Error ? c.cause : undefined;
    }
    return parts.join(": ").slice(0, maxChars);
  }
}

/** True when `e` is an AgentError (with `code`, when given). */
export function isAgentError(e: unknown, code?: AgentErrorCode): e is AgentError {
  return e instanceof AgentError && (code === undefined || e.code === code);
}
