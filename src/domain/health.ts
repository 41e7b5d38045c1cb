/**
 * Host health from heartbeat age (spec "Administrative state and health"):
 * healthy under 30 s, suspect from 30 to 90 s, lost after 90 s. Pure.
 */
import type { HostHealth } from "../protocol/views.ts";

/** Heartbeat age below which a host is healthy, ms. */
export const HEALTHY_HEARTBEAT_AGE_MS = 30_000;
/** Heartbeat age above which a host is lost, ms. */
export const LOST_HEARTBEAT_AGE_MS = 90_000;

/** Derived host health (defined with the API shapes in src/protocol/views.ts). */
export type { HostHealth };

/** Health for a heartbeat at `heartbeatAtMs` (null: never) seen at `nowMs`. */
export function healthFromHeartbeat(heartbeatAtMs: number | null, nowMs: number): HostHealth {
  if (heartbeatAtMs === null) return "unknown";
  const ageMs = nowMs - heartbeatAtMs;
  if (ageMs < HEALTHY_HEARTBEAT_AGE_MS) return "healthy";
  if (ageMs <= LOST_HEARTBEAT_AGE_MS) return "suspect";
  return "lost";
}
