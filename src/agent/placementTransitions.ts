/**
 * One structured log line and the metrics per placement transition (spec
 * "Observability and retention": structured logs with the correlation
 * fields; issue 18 item 13). The message is constant ("placement
 * transition"); the IDs (allocationId, placementId, generation), the
 * previous and new state, the time spent in the previous state and the
 * error code are fields. A repeated observation of the same state (a
 * workload exit code reported while running) logs its own constant line.
 * Must never: log a payload, a nonce or the placement's spec.
 */
import type { PlacementObservedState } from "../protocol/agent.ts";
import type { LocalPlacement, ObservationExtra } from "./store.ts";
import type { AgentLog } from "./ports.ts";
import type { AgentMetrics } from "./metrics.ts";

/** Receives every observation the reconciler records, with the placement as it was before. */
export type TransitionSink = (
  before: LocalPlacement,
  state: PlacementObservedState,
  extra: ObservationExtra,
  nowMs: number,
) => void;

/** The sink that logs each transition and counts it in `metrics` (absent: log only). */
export function transitionSink(log: AgentLog, metrics?: AgentMetrics): TransitionSink {
  return (before, state, extra, nowMs) => {
    const ids = { allocationId: before.allocationId, placementId: before.placementId, generation: before.generation };
    if (before.observed === state) {
      if (extra.workloadExitCode !== undefined)
        log.info("workload exited", { ...ids, state, exitCode: extra.workloadExitCode });
      return;
    }
    const durationMs = Math.max(0, nowMs - before.updatedAtMs);
    const errorCode = state === "error" ? (extra.errorCode ?? before.errorCode ?? null) : null;
    const fields = {
      ...ids,
      from: before.observed,
      state,
      durationMs,
      ...(errorCode ? { errorCode } : {}),
      ...(extra.exit ? { exitReason: extra.exit.reason } : {}),
      ...(extra.vmPid ? { vmPid: extra.vmPid } : {}),
    };
    if (state === "error") log.warn("placement transition", fields);
    else log.info("placement transition", fields);
    metrics?.transition(before.observed, state, durationMs, errorCode);
  };
}
