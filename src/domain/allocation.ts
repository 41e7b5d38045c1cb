/**
 * The allocation state machine (spec "States", "The reconciliation loop",
 * "Replacement"). Pure: the Allocation object applies these rules.
 * Must never: allow a transition out of a terminal state, or mark an
 * allocation released before absence of its placement was observed.
 */
import type { AllocationState } from "../protocol/api.ts";

/** States with no further transition. */
export const TERMINAL_STATES: ReadonlySet<AllocationState> = new Set(["released", "failed"]);

/** Allowed transitions; anything else is a bug the object refuses. */
const ALLOWED: Record<AllocationState, readonly AllocationState[]> = {
  pending: ["reserving", "released", "failed"],
  reserving: ["pending", "provisioning", "releasing", "released", "failed"],
  provisioning: ["ready", "releasing", "pending"],
  // ready → pending is a replacement after host loss (fenced, or authorized by the controller).
  ready: ["releasing", "paused", "suspending", "pending"],
  // paused, suspending → pending: a replacement after host loss, as from ready (a new VM; what it had in memory is lost).
  paused: ["ready", "releasing", "pending"],
  // suspending → ready: the agent could not suspend the VM, which kept running.
  suspending: ["suspended", "releasing", "ready", "pending"],
  // suspended → provisioning: a resume restores the VM on its host as the next generation (issue 21).
  suspended: ["provisioning", "pending", "releasing"],
  releasing: ["released", "failed", "pending"],
  released: [],
  failed: [],
};

/** True if `from → to` is an allowed transition. */
export function canTransition(from: AllocationState, to: AllocationState): boolean {
  return ALLOWED[from].includes(to);
}

/** Timeouts the reconciler enforces (spec "Timeouts": policy values with these defaults). */
export interface TimeoutPolicy {
  /** From reservation to guest readiness, ms. On expiry: GUEST_BOOT_TIMEOUT. */
  provisioningTimeoutMs: number;
  /** Longest an allocation may stay pending for lack of capacity, ms. On expiry: NO_CAPACITY. */
  pendingTimeoutMs: number;
  /** Default lifetime of an allocation when the request names none, ms. */
  defaultTtlMs: number;
  /** Execution lease length, ms; renewed by agent heartbeats. */
  leaseMs: number;
  /** Most automatic replacements before readiness. */
  maxAttempts: number;
  /**
   * Margin after the old placement's lease expiry before a replacement may
   * start, ms: covers the agent's lease check period and the tolerated clock skew.
   */
  leaseGraceMs: number;
  /** How often a non-terminal allocation asks its host about the placement, ms. */
  hostCheckIntervalMs: number;
  /** Days a terminal allocation is kept before it deletes itself. */
  retentionDays: number;
  /** Longest an allocation may stay suspended, ms (its files hold host disk). On expiry: released, reason SUSPEND_EXPIRED. */
  suspendedMaxAgeMs: number;
}

/** Default timeout policy. */
export const DEFAULT_TIMEOUTS: TimeoutPolicy = {
  provisioningTimeoutMs: 5 * 60_000,
  pendingTimeoutMs: 10 * 60_000,
  defaultTtlMs: 60 * 60_000,
  leaseMs: 120_000,
  maxAttempts: 3,
  leaseGraceMs: 15_000,
  hostCheckIntervalMs: 10_000,
  retentionDays: 7,
  suspendedMaxAgeMs: 24 * 60 * 60_000,
};

/**
 * Release reasons that end an allocation `released`, not `failed`: the
 * client's own release, its lifetime, and the longest a suspended VM is kept
 * (SUSPEND_EXPIRED, issue 21). Any other reason is a failure.
 */
export const ORDINARY_END_REASONS: ReadonlySet<string> = new Set(["CLIENT_RELEASE", "TTL_EXPIRED", "SUSPEND_EXPIRED"]);

/** What the client wants of an allocation (issue 21 adds paused and suspended). */
export type DesiredAllocationState = "ready" | "paused" | "suspended" | "released";

/** Longest an alarm is scheduled out, ms (spec "The reconciliation loop"). */
export const MAX_ALARM_DELAY_MS = 60_000;

/** Backoff before asking the directory again after no host accepted, ms (capped exponential). */
export function noCapacityBackoffMs(roundsWithoutCapacity: number): number {
  return Math.min(30_000, 500 * 2 ** Math.min(roundsWithoutCapacity, 6));
}

/**
 * Whether a failed attempt may be replaced automatically: only if the guest
 * never reported readiness and no bootstrap payload was consumed (spec "Replacement").
 */
export function mayReplaceAutomatically(
  a: { guestReady: boolean; payloadConsumed: boolean; attempts: number },
  policy: TimeoutPolicy,
): boolean {
  return !a.guestReady && !a.payloadConsumed && a.attempts < policy.maxAttempts;
}
