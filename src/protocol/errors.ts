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
  /** The path exists but not for this method (the answer carries `Allow`). */
  METHOD_NOT_ALLOWED: 405,
  /** The route speaks WebSocket only (`GET /v1/connections/{id}/connect`) and the request was no upgrade. */
  UPGRADE_REQUIRED: 426,
  /**
   * A request that breaks its route's declared shape: a body field of the
   * wrong type or unknown to the schema (the detail names the field path and,
   * for an unknown field, the allowed ones), a malformed path parameter, a
   * query parameter out of range. 400 as for every other malformed request;
   * 422 is kept for well-formed requests the scheduler cannot act on
   * (UNKNOWN_WORKLOAD_CLASS, IDEMPOTENCY_CONFLICT).
   */
  VALIDATION_FAILED: 400,
  MALFORMED_JSON: 400,
  /** A body on a JSON route that is not `application/json` (or is content-encoded); refused before it is read (RFC 9110 §15.5.16). */
  UNSUPPORTED_MEDIA_TYPE: 415,
  /** JSON nested deeper than the route allows (checked before parsing). */
  JSON_TOO_DEEP: 400,
  /** A Content-Length that is not a decimal byte count, or a body that does not match it. */
  INVALID_CONTENT_LENGTH: 400,
  BODY_TOO_LARGE: 413,
  PAYLOAD_TOO_LARGE: 413,
  UNKNOWN_WORKLOAD_CLASS: 422,
  IDEMPOTENCY_CONFLICT: 422,
  QUOTA_CONCURRENT_ALLOCATIONS: 409,
  /** The run queue holds its bound of waiting runs (the caller's or the deployment's); retry after `Retry-After` (issue 22). */
  QUOTA_QUEUED_RUNS: 429,
  /** The controller's monthly budget would be passed: what it spent this month plus what its live allocations reserve (price × lifetime) plus this one (issue 22). */
  COST_LIMIT_EXCEEDED: 429,
  /** The controller holds its bound of active leases (issue 22). */
  QUOTA_ACTIVE_LEASES: 409,
  /** The lease expired or was released; a heartbeat or extend never revives it (issue 22). */
  LEASE_ENDED: 409,
  QUOTA_DEPLOYMENT_ALLOCATIONS: 409,
  QUOTA_RETAINED_RECORDS: 409,
  QUOTA_REGISTERED_HOSTS: 409,
  QUOTA_ACTIVE_HOSTS: 409,
  REPLACEMENT_NOT_BLOCKED: 409,
  OVERLAPPING_AGENT_SESSION: 409,
  HOST_UNSCHEDULABLE: 409,
  RATE_LIMITED: 429,
  /** The caller already has its bound of requests (or of log follow streams) in flight; retry after `Retry-After` (src/scheduler/callerLimits.ts). */
  CONCURRENCY_LIMITED: 429,
  INVALID_STATE: 409,
  /** A suspend of an allocation whose workload class does not allow it (`suspendable` in the manifest, issue 21). */
  NOT_SUSPENDABLE: 409,
  /** A fork of an allocation that consumed a bootstrap payload, without `allowConsumedPayload` (issue 21, "Fork"). */
  PAYLOAD_CONSUMED: 409,
  STALE_GENERATION: 409,
  GUEST_NOT_CONNECTED: 503,
  DELIVERY_TIMEOUT: 503,
  DELIVERY_CONFLICT: 409,
  ENROLLMENT_TOKEN_INVALID: 401,
  ENROLLMENT_CONFLICT: 409,
  HOST_NOT_ACTIVE: 409,
  /** A disabled host is fenced for good: it cannot be activated or drained (enroll it again). */
  HOST_DISABLED: 409,
  /** An agent update names a placement this host does not have. */
  UNKNOWN_PLACEMENT: 404,
  /** An agent update's sequence number is not above the last one applied for its placement in this session. */
  SEQUENCE_NOT_INCREASING: 409,
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
  /** The scheduler's main event loop has not run for longer than the health listener's bound (src/scheduler/health/loopHeartbeat.ts, MAX_LOOP_STALL_MS): requests on its port wait. */
  SCHEDULER_STALLED: 503,
  /** One object's stored state failed its checks; it is quarantined and named in the detail. */
  OBJECT_DAMAGED: 500,
  INTERNAL: 500,
  IMAGE_SOURCE_INVALID: 422,
  IMAGE_BLOB_DIGEST_MISMATCH: 422,
  IMAGE_LAYER_PATH_ESCAPE: 422,
  IMAGE_LAYER_INVALID: 422,
  IMAGE_LAYER_UNSUPPORTED: 422,
  /** A grant, relay map or relay token whose Ed25519 signature does not verify against a trusted key (src/protocol/connection.ts). */
  GRANT_SIGNATURE_INVALID: 401,
  /** A grant past its `expiresAtMs`. */
  GRANT_EXPIRED: 401,
  /** A grant issued in the future beyond the allowed clock skew. */
  GRANT_NOT_YET_VALID: 401,
  /** A grant that does not match exactly what the verifier expected (allocation, generation, host, keys, addresses). */
  GRANT_MISMATCH: 403,
  /** A grant that was revoked. */
  GRANT_REVOKED: 403,
  /** A relay token that is malformed or whose signature does not verify. */
  RELAY_TOKEN_INVALID: 401,
  /** A relay token past its `expiresAtMs` (or issued in the future). */
  RELAY_TOKEN_EXPIRED: 401,
  /** A relay token minted for another relay. */
  RELAY_TOKEN_WRONG_RELAY: 403,
  /** The grant already has a session of this role at the relay (a third party cannot join a pair). */
  RELAY_PAIR_TAKEN: 409,
  /** A relay token whose limits exceed the relay's configured caps (src/relay/config.ts). */
  RELAY_LIMITS_OVER_CAP: 403,
  /** The relay is at one of its bounds (sessions, pending pairs, handshakes in all or from one address): try later or another relay. */
  RELAY_BUSY: 503,
  /** No relay token arrived within the relay's handshake deadline. */
  RELAY_HANDSHAKE_TIMEOUT: 408,
  /** A relay frame of the wrong kind (text after the token, binary before it) or longer than MAX_RELAY_FRAME_BYTES. */
  RELAY_FRAME_INVALID: 400,
  /** The pair forwarded its token's `maxBytes`; both sessions are closed. */
  RELAY_BYTES_EXHAUSTED: 429,
  /** A relay session forwarded nothing for its token's `idleTimeoutMs`. */
  RELAY_IDLE_TIMEOUT: 408,
  /** A relay session that stopped answering was replaced by a reconnect of the same role with a valid token. */
  RELAY_SESSION_REPLACED: 409,
  /** A replacement cannot advance while a grant for the old generation may still be applied (spec "Revocation and replacement"). */
  CONNECTIONS_NOT_FENCED: 409,
  /** The allocation's host has not reported its WireGuard endpoint (public key and candidates) yet; retry later. */
  CONNECTIVITY_UNAVAILABLE: 503,
  /** A log read asked for an offset past the end of the allocation's log (src/protocol/logs.ts); the body carries `endOffset`. */
  LOG_OFFSET_PAST_END: 416,
  /** The guest's control service: no grant in `beachball-grant`, or one that is malformed, untrusted, expired or for another allocation, generation, port, transport or peer (docs/exec-and-files.md). */
  CONTROL_UNAUTHORIZED: 401,
  /** The guest's control service has no verification keys yet (the agent's `control_config` has not arrived); retry shortly. */
  GUEST_NOT_READY: 503,
  /** A files route's path (or a tar entry, or a symlink on the way) leads outside the guest's allowed roots. */
  PATH_ESCAPE: 403,
  /** A control request over one of its bounds (a body, an argument count, an exec count, a tar's entries or bytes); the detail names the bound. */
  TOO_LARGE: 413,
  /** No exec with this ID for the grant's tenant (another tenant's exec is answered the same way). */
  EXEC_NOT_FOUND: 404,
  /** No file at the path (inside the allowed roots). */
  FILE_NOT_FOUND: 404,
  /** The path exists and the route would not replace it (mkdir without `parents`, move without `overwrite`). */
  FILE_EXISTS: 409,
  /** The path is of the wrong kind for the route (listing a file, reading a directory, a parent that is a file). */
  FILE_TYPE_MISMATCH: 409,
  /** An upload's SHA-256 does not match the one the client sent; the partial upload is discarded. */
  CHECKSUM_MISMATCH: 422,
  /** A write carried an offset other than the stdin's or upload's current end (a gap, or past a retried write's end). */
  OFFSET_MISMATCH: 409,
  /** An output read at the end of a stream that passed MAX_EXEC_OUTPUT_BYTES: later bytes were discarded. */
  OUTPUT_TRUNCATED: 410,
  /** The exec could not start: no such program, user or working directory (the detail says which). */
  EXEC_START_FAILED: 422,
  /** The exec has no terminal (resize) or its stdin is closed or was never open (stdin write). */
  EXEC_STATE_CONFLICT: 409,
} as const;

/** One stable error code (see ERROR_STATUS for the HTTP status of each). */
export type ErrorCode = keyof typeof ERROR_STATUS;

/**
 * Bounded error codes an agent may report for a placement (spec "Messages":
 * "Agent errors use stable codes such as …"). The spec's
 * FIRECRACKER_START_FAILED is VMM_START_FAILED here: it covers QEMU too.
 * The agent's one error type (AgentError, src/agent/errors.ts) carries
 * exactly these.
 */
export const AGENT_ERROR_CODES = [
  "IMAGE_DIGEST_MISMATCH",
  "IMAGE_NOT_FOUND",
  "IMAGE_SIGNATURE_INVALID",
  "INSUFFICIENT_LOCAL_DISK",
  "VMM_START_FAILED",
  "VM_EXITED",
  "GUEST_BOOT_TIMEOUT",
  "NETWORK_SETUP_FAILED",
  "CGROUP_SETUP_FAILED",
  "STALE_GENERATION",
  "LEASE_EXPIRED",
  "CLEANUP_FAILED",
  "COMMAND_CONFLICT",
  /** The host's VMM driver cannot do what was asked (pause, suspend, restore; issue 21). */
  "VMM_UNSUPPORTED",
  /** The VMM did not confirm a control request (pause, resume, a state save) in time or refused it. */
  "VMM_CONTROL_FAILED",
  /** A snapshot written by another driver or for another machine shape (src/agent/vmm/driver.ts VmSnapshot.compat). */
  "SNAPSHOT_INCOMPATIBLE",
  /** A fork's parent placement is not suspended on this host at the generation the command names, or its snapshot is gone. */
  "SNAPSHOT_MISSING",
  "INTERNAL",
] as const;

/** One bounded agent error code. */
export type AgentErrorCode = (typeof AGENT_ERROR_CODES)[number];

/**
 * Codes `bb image build` refuses an OCI input with (spec "Images", "Boot OCI
 * images"). Nothing is written to the output or any cache when one is
 * thrown.
 * - IMAGE_SOURCE_INVALID: the layout or archive is malformed (no index,
 *   bad JSON, no manifest for the platform, a bound exceeded).
 * - IMAGE_BLOB_DIGEST_MISMATCH: a blob's bytes do not match its
 *   descriptor's digest or size (or a docker layer its diff ID).
 * - IMAGE_LAYER_PATH_ESCAPE: a layer entry names an absolute or `..` path,
 *   passes through a symlink that leaves the root, hard-links outside the
 *   tree, or whites out a path outside the root.
 * - IMAGE_LAYER_INVALID: a layer is not a well-formed tar stream (bad
 *   checksum, truncated, an entry over a size bound).
 * - IMAGE_LAYER_UNSUPPORTED: a layer holds something an image may not:
 *   a device node outside /dev, an unknown entry type or media type.
 */
export const IMAGE_BUILD_ERROR_CODES = [
  "IMAGE_SOURCE_INVALID",
  "IMAGE_BLOB_DIGEST_MISMATCH",
  "IMAGE_LAYER_PATH_ESCAPE",
  "IMAGE_LAYER_INVALID",
  "IMAGE_LAYER_UNSUPPORTED",
] as const satisfies readonly ErrorCode[];

/** One image build refusal code. */
export type ImageBuildErrorCode = (typeof IMAGE_BUILD_ERROR_CODES)[number];

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
