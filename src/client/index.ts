/**
 * The public entry point `beachball/client` (package.json "exports"): the
 * typed scheduler client, its body types and the error types it throws.
 * Everything a workload controller needs; examples/controller.ts uses only
 * this module. Must never: export scheduler or agent internals.
 */
export {
  SchedulerClient,
  SchedulerUnreachableError,
  WaitTimeoutError,
  retryTransport,
  retryDelayMs,
  parseRetryAfter,
  MAX_RETRY_AFTER_MS,
  RETRY_BACKOFF_MS,
  DEFAULT_MAX_ATTEMPTS,
  TRANSPORT_RETRY_MS,
  REQUEST_TIMEOUT_MS,
  DELIVERY_RETRY_MS,
} from "./schedulerClient.ts";
export {
  waitForEvent,
  isTerminalEvent,
  WAIT_FALLBACK_POLL_MS,
  WAIT_TRANSPORT_RETRY_MS,
  RECONNECT_MIN_MS,
  RECONNECT_MAX_MS,
} from "./allocationWait.ts";
export type { EventSource, EventWaitOptions, EventWaitResult } from "./allocationWait.ts";
export { EVENT_FOLLOW_WAIT_MS, MAX_EVENT_FOLLOWERS } from "../protocol/eventFollow.ts";
export type { ClientOptions, ClientPorts, CreateRequest } from "./schedulerClient.ts";
export type * from "./types.ts";
export { BeachballError, ERROR_STATUS, isErrorCode, type ErrorCode } from "../protocol/errors.ts";
export { UnexpectedAnswerError } from "../protocol/problem.ts";
export { ControlClient, grantHeaderValue, UPLOAD_CHUNK_BYTES } from "./control.ts";
export type { AttachOutput, AttachSession, ControlClientPorts, OutputRead } from "./control.ts";
export type {
  ExecList,
  ExecStartBody,
  ExecView,
  ExecStream,
  ExecSignal,
  FileList,
  FileStat,
  UploadState,
  TarExtractResult,
} from "../protocol/control.ts";
