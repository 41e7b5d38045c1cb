/**
 * Stable error codes shared by the scheduler, the agent and the CLI.
 *
 * Owns: the closed union of codes, each mapped to one HTTP status, and the
 * RFC 9457 problem+json body that carries the code. Callers branch on
 * `code`, never on message text. Codes come from the spec's sections
 * "Placement", "The agent protocol" and "Admission and limits".
 * Must never: carry a secret, a payload or a raw request body in a message.
 */

/** Every stable error code with the HTTP status it maps to. */
export const ERROR_STATUS = {
  UNAUTHENTICATED: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  VALIDATION_FAILED: 422,
  MALFORMED_JSON: 400,
  BODY_TOO_LARGE: 413,
  PAYLOAD_TOO_LARGE: 413,
  UNKNOWN_WORKLOAD_CLASS: 422,
  IDEMPOTENCY_CONFLICT: 422,
  QUOTA_CONCURRENT_ALLOCATIONS: 409,
  QUOTA_DEPLOYMENT_ALLOCATIONS: 409,
  QUOTA_RETAINED_RECORDS: 409,
  QUOTA_REGISTERED_HOSTS: 409,
  QUOTA_ACTIVE_HOSTS: 409,
  REPLACEMENT_NOT_BLOCKED: 409,
  OVERLAPPING_AGENT_SESSION: 409,
  HOST_UNSCHEDULABLE: 409,
  RATE_LIMITED: 429,
  INVALID_STATE: 409,
  STALE_GENERATION: 409,
  GUEST_NOT_CONNECTED: 503,
  DELIVERY_TIMEOUT: 503,
  DELIVERY_CONFLICT: 409,
  ENROLLMENT_TOKEN_INVALID: 401,
  ENROLLMENT_CONFLICT: 409,
  HOST_NOT_ACTIVE: 409,
  INSUFFICIENT_CPU: 409,
  INSUFFICIENT_MEMORY: 409,
  INSUFFICIENT_DISK: 409,
  PLACEMENT_LIMIT_REACHED: 409,
  STALE_AGENT_EPOCH: 409,
  COMMAND_CONFLICT: 409,
  ENVELOPE_TOO_LARGE: 413,
  SHUTTING_DOWN: 503,
  /** The scheduler cannot read or write its data directory (read-only, full, failing disk); retry later. */
  STORAGE_UNAVAILABLE: 503,
  /** One object's stored state failed its checks; it is quarantined and named in the detail. */
  OBJECT_DAMAGED: 500,
  INTERNAL: 500,
} as const;

/** One stable error code (see ERROR_STATUS for the HTTP status of each). */
export type ErrorCode = keyof typeof ERROR_STATUS;

/** Bounded error codes an agent may report for a placement (spec "Messages"). */
export const AGENT_ERROR_CODES = [
  "IMAGE_DIGEST_MISMATCH",
  "IMAGE_NOT_FOUND",
  "IMAGE_SIGNATURE_INVALID",
  "INSUFFICIENT_LOCAL_DISK",
  "VMM_START_FAILED",
  "VM_EXITED",
  "GUEST_BOOT_TIMEOUT",
  "NETWORK_SETUP_FAILED",
  "STALE_GENERATION",
  "LEASE_EXPIRED",
  "CLEANUP_FAILED",
  "COMMAND_CONFLICT",
  "INTERNAL",
] as const;

/** One bounded agent error code. */
export type AgentErrorCode = (typeof AGENT_ERROR_CODES)[number];

/** RFC 9457 problem details with Beachball's stable `code` extension. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  code: ErrorCode;
  detail?: string;
  /** Extra machine-readable facts, such as `retryAfterSeconds`. Never secrets. */
  extra?: Record<string, unknown>;
}

/**
 * An error carrying a stable code. Thrown by scheduler objects and mapped to
 * HTTP by the app's error handler; thrown by clients when a server answers
 * with a problem body.
 */
export class BeachballError extends Error {
  /** The stable code (see ERROR_STATUS). */
  readonly code: ErrorCode;
  /** Extra machine-readable facts for the problem body. */
  readonly extra: Record<string, unknown> | undefined;
  constructor(code: ErrorCode, message: string, extra?: Record<string, unknown>) {
    super(message);
    this.name = "BeachballError";
    this.code = code;
    this.extra = extra;
  }
  /** HTTP status for this code. */
  get status(): number {
    return ERROR_STATUS[this.code];
  }
  /** The problem+json body for this error (RFC 9457). */
  toProblem(): Problem {
    const p: Problem = {
      type: `https://beachball.dev/problems/${this.code.toLowerCase().replaceAll("_", "-")}`,
      title: this.code,
      status: this.status,
      code: this.code,
      detail: this.message,
    };
    if (this.extra) p.extra = this.extra;
    return p;
  }
}

/** True when `v` is a known stable error code. */
export function isErrorCode(v: unknown): v is ErrorCode {
  return typeof v === "string" && Object.hasOwn(ERROR_STATUS, v);
}
