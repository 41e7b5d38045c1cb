/**
 * The timing and message-count limits a Device runs with: the whitepaper's
 * §6.1 constants by default. Tests may shorten one (say so in the test); the
 * production Device always uses DEFAULT_LIMITS.
 *
 * Owns: the WgLimits shape. Must never: be read from a peer.
 */
import {
  KEEPALIVE_TIMEOUT_MS,
  REJECT_AFTER_MESSAGES,
  REJECT_AFTER_TIME_MS,
  REKEY_AFTER_MESSAGES,
  REKEY_AFTER_TIME_MS,
  REKEY_ATTEMPT_TIME_MS,
  REKEY_TIMEOUT_JITTER_MAX_MS,
  REKEY_TIMEOUT_MS,
} from "./constants.ts";

/** Limits in messages and milliseconds (names as in whitepaper §6.1). */
export interface WgLimits {
  readonly rekeyAfterMessages: number;
  readonly rejectAfterMessages: number;
  readonly rekeyAfterTimeMs: number;
  readonly rejectAfterTimeMs: number;
  readonly rekeyAttemptTimeMs: number;
  readonly rekeyTimeoutMs: number;
  readonly keepaliveTimeoutMs: number;
  /** Upper bound of the random jitter added to handshake timers. */
  readonly jitterMaxMs: number;
}

/** The whitepaper's values. */
export const DEFAULT_LIMITS: WgLimits = {
  rekeyAfterMessages: REKEY_AFTER_MESSAGES,
  rejectAfterMessages: REJECT_AFTER_MESSAGES,
  rekeyAfterTimeMs: REKEY_AFTER_TIME_MS,
  rejectAfterTimeMs: REJECT_AFTER_TIME_MS,
  rekeyAttemptTimeMs: REKEY_ATTEMPT_TIME_MS,
  rekeyTimeoutMs: REKEY_TIMEOUT_MS,
  keepaliveTimeoutMs: KEEPALIVE_TIMEOUT_MS,
  jitterMaxMs: REKEY_TIMEOUT_JITTER_MAX_MS,
};
