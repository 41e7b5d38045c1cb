/**
 * The agent session rules of a Host (spec "Sessions and epochs", "Host
 * health"): whether an envelope opens a new session, continues the current
 * one or is fenced as stale; when a new session overlaps a still-healthy
 * one from another boot; and how the facts an agent reports merge into the
 * facts the host keeps. Pure: callers pass `nowMs` and the stored facts in;
 * the Host object (src/scheduler/objects/hostSession.ts) persists them.
 * Must never: read a clock or randomness (the new epoch is minted by the
 * caller), or touch storage.
 */
import { HEALTHY_HEARTBEAT_AGE_MS } from "./health.ts";
import { OVERLAP_SUSPECT_MS, type HostFacts } from "./hostConditions.ts";
import type { Envelope } from "../protocol/agent.ts";

/** The part of HostFacts that comes from agent reports (stored as JSON), plus the cached image digests. */
export type AgentFacts = Pick<
  HostFacts,
  "clockSkewMs" | "inventory" | "volumesNearlyFull" | "overlapUntilMs" | "vmmStartFailing"
> & { cachedImages?: string[] };

/** Agent-reported facts before the first envelope. */
export const NO_FACTS: AgentFacts = {
  clockSkewMs: 0,
  inventory: null,
  volumesNearlyFull: false,
  overlapUntilMs: 0,
  vmmStartFailing: false,
  cachedImages: [],
};

/**
 * What an envelope does to the session: `new` for a poll with an empty
 * epoch (an agent process starting: the caller mints a fresh epoch),
 * `current` for the current epoch, `stale` for any other (refused with
 * STALE_AGENT_EPOCH: a message from a replaced agent process).
 */
export function sessionOpening(
  agentEpoch: string,
  type: Envelope["type"],
  currentEpoch: string,
): "new" | "current" | "stale" {
  if (agentEpoch === "" && type === "poll") return "new";
  return agentEpoch === currentEpoch ? "current" : "stale";
}

/** What the host knows of its last session, for the overlap check. */
export interface LastSession {
  /** Boot ID of the last session ("" before the first). */
  bootId: string;
  /** Last heartbeat, ms since the epoch, or null before the first. */
  heartbeatAtMs: number | null;
}

/**
 * True when a new session from boot `bootId` opens while the last session,
 * from another boot, still heartbeats as healthy (two agents may be running
 * for one host: it stays suspect for OVERLAP_SUSPECT_MS).
 */
export function isOverlappingSession(last: LastSession, newSession: boolean, bootId: string, nowMs: number): boolean {
  return (
    newSession &&
    last.bootId !== "" &&
    last.bootId !== bootId &&
    last.heartbeatAtMs !== null &&
    nowMs - last.heartbeatAtMs < HEALTHY_HEARTBEAT_AGE_MS
  );
}

/**
 * The facts after one envelope: the clock skew from its `sentAt` (kept when
 * unparseable), each health field the report carries (kept when absent), and
 * the overlap window moved to `nowMs + OVERLAP_SUSPECT_MS` when `overlapping`.
 */
export function mergeFacts(
  prev: AgentFacts,
  report: { sentAt: string; health?: Envelope["payload"]["health"] },
  nowMs: number,
  overlapping: boolean,
): AgentFacts {
  const sentAtMs = Date.parse(report.sentAt);
  const health = report.health;
  return {
    clockSkewMs: Number.isFinite(sentAtMs) ? Math.abs(sentAtMs - nowMs) : prev.clockSkewMs,
    inventory: health?.inventory ?? prev.inventory,
    volumesNearlyFull: health?.volumesNearlyFull ?? prev.volumesNearlyFull,
    overlapUntilMs: overlapping ? nowMs + OVERLAP_SUSPECT_MS : prev.overlapUntilMs,
    vmmStartFailing: health?.vmmStartFailing ?? prev.vmmStartFailing ?? false,
    cachedImages: health?.cachedImages ?? prev.cachedImages ?? [],
  };
}
