/**
 * The embedded scheduler's process metrics (CPU, resident memory, open
 * descriptors, event-loop lag, heap, GC) from prom-client's default
 * collectors, in Prometheus text, under their standard names
 * (`process_*`, `nodejs_*`) so stock dashboards read them. One registry per
 * process, made on first use: collectors hook the runtime, and a process
 * that starts many schedulers (tests) must not hook it many times.
 * Their labels (heap space, GC kind, version) are prom-client's fixed sets,
 * never a value a peer sends. Must never: run on workerd (no process there;
 * the workerd entry does not import this).
 */
import { collectDefaultMetrics, Registry } from "prom-client";

let registry: Registry | null = null;

/**
 * Metric families left out: Bun does not implement the event-loop delay
 * monitor prom-client reads them from (measured, Bun 1.4.5: min
 * 9223372036 s, mean NaN), so they would only mislead.
 */
const UNSUPPORTED_FAMILIES = /^# (?:HELP|TYPE) nodejs_eventloop_lag/m;

/** Starts the collectors (once per process). CPU counters count from here, so call it when the process starts. */
export function startProcessMetrics(): void {
  if (registry) return;
  registry = new Registry();
  collectDefaultMetrics({ register: registry });
}

/** Prometheus text of this process's metrics. */
export async function processMetricsText(): Promise<string> {
  startProcessMetrics();
  const text = await registry!.metrics();
  return text
    .split(/\n\n/)
    .filter((family) => family.trim() && !UNSUPPORTED_FAMILIES.test(family))
    .map((family) => `${family.trim()}\n`)
    .join("");
}
