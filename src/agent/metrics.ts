/**
 * The agent's Prometheus metrics (spec "Observability and retention";
 * issue 18 item 13), through prom-client as the scheduler's process
 * metrics are: placements on this host by observed state (a gauge read
 * from agent.db at scrape time), placement transitions by from/to state,
 * how long placements stayed in a state before leaving it (a histogram, in
 * seconds), and failures by stable agent error code. Labels come only from
 * closed sets (PlacementObservedState, AgentErrorCode); an ID never
 * becomes a label. Served by metricsServer.ts.
 * Must never: take a label value from a peer or from client text.
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { PlacementObservedState } from "../protocol/agent.ts";

/** Histogram buckets for time in a placement state, seconds (a prepare takes ms to minutes; a VM runs up to its lease). */
export const STATE_DURATION_BUCKETS_SECONDS = [
  0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400,
] as const;

/** See the module header. One per agent process. */
export class AgentMetrics {
  /** The registry the metrics endpoint renders. */
  readonly registry = new Registry();
  private readonly transitions: Counter<"from" | "state">;
  private readonly durations: Histogram<"state">;
  private readonly failures: Counter<"code">;

  /** `placementStates`: the observed state of every live placement, read at each scrape. */
  constructor(placementStates: () => PlacementObservedState[]) {
    const registers = [this.registry];
    new Gauge({
      name: "bb_agent_placements",
      help: "Placements on this host by observed state (agent.db)",
      labelNames: ["state"],
      registers,
      collect() {
        this.reset();
        const counts = new Map<string, number>();
        for (const s of placementStates()) counts.set(s, (counts.get(s) ?? 0) + 1);
        for (const [state, n] of counts) this.set({ state }, n);
      },
    });
    this.transitions = new Counter({
      name: "bb_agent_placement_transitions_total",
      help: "Placement state transitions recorded by this agent, by previous and new observed state",
      labelNames: ["from", "state"],
      registers,
    });
    this.durations = new Histogram({
      name: "bb_agent_placement_state_seconds",
      help: "Time a placement spent in a state before its next transition, seconds, by the state it left",
      labelNames: ["state"],
      buckets: [...STATE_DURATION_BUCKETS_SECONDS],
      registers,
    });
    this.failures = new Counter({
      name: "bb_agent_placement_failures_total",
      help: "Placements that turned error, by stable agent error code",
      labelNames: ["code"],
      registers,
    });
  }

  /** Counts one transition `from` → `to` after `durationMs` in `from`; `errorCode` when `to` is error. */
  transition(
    from: PlacementObservedState,
    to: PlacementObservedState,
    durationMs: number,
    errorCode: string | null,
  ): void {
    this.transitions.inc({ from, state: to });
    if (durationMs >= 0 && Number.isFinite(durationMs)) this.durations.observe({ state: from }, durationMs / 1000);
    if (to === "error") this.failures.inc({ code: errorCode ?? "INTERNAL" });
  }

  /** Prometheus text exposition of every agent metric. */
  text(): Promise<string> {
    return this.registry.metrics();
  }
}
