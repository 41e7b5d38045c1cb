/**
 * When a Host raises an alert for operators (spec "Observability and
 * retention", "Sessions and epochs", "Administrative state and health"): an
 * overlapping agent session, a VMM that starts failing, and a host fenced by
 * an operator. Each alert's ID is deterministic (type, host, time), so a
 * retried transaction posts it once. Pure; the Host object posts them to
 * Operations.
 * Must never: read a clock (callers pass `nowMs`).
 */
import type { AgentFacts } from "./hostSession.ts";

/** An alert as Operations receives it (src/scheduler/objects/messages.ts, OperationsMessage). */
export interface HostAlert {
  kind: "alert";
  alertId: string;
  type: "host.overlapping_agent_session" | "host.vmm_start_failing" | "host.disabled";
  /** The host ID. */
  subject: string;
  /** The stable code of the condition. */
  reason: "OVERLAPPING_AGENT_SESSION" | "VMM_START_FAILING" | "HOST_FENCED";
  atMs: number;
}

/**
 * The alerts one agent envelope raises, in order: an overlapping session
 * (`overlapping`), then a VMM that started failing (`next` reports it and
 * `prev` did not: raised once per episode, not per heartbeat).
 */
export function alertsAfterReport(
  hostId: string,
  prev: AgentFacts,
  next: AgentFacts,
  overlapping: boolean,
  nowMs: number,
): HostAlert[] {
  const out: HostAlert[] = [];
  if (overlapping)
    out.push({
      kind: "alert",
      alertId: `alert:overlap:${hostId}:${nowMs}`,
      type: "host.overlapping_agent_session",
      subject: hostId,
      reason: "OVERLAPPING_AGENT_SESSION",
      atMs: nowMs,
    });
  if (next.vmmStartFailing && !prev.vmmStartFailing)
    out.push({
      kind: "alert",
      alertId: `alert:vmm:${hostId}:${nowMs}`,
      type: "host.vmm_start_failing",
      subject: hostId,
      reason: "VMM_START_FAILING",
      atMs: nowMs,
    });
  return out;
}

/** The alert an operator's fencing (admin state `disabled`) raises. */
export function fencingAlert(hostId: string, nowMs: number): HostAlert {
  return {
    kind: "alert",
    alertId: `alert:host_disabled:${hostId}:${nowMs}`,
    type: "host.disabled",
    subject: hostId,
    reason: "HOST_FENCED",
    atMs: nowMs,
  };
}
