/**
 * Prometheus metrics (spec "Observability and retention"): counters and
 * gauges with a small allowed label set: result, reason, state,
 * workload_class, host and phase. A raw allocation ID never becomes a label;
 * `inc` refuses any other label name.
 */

/** The only label names a metric may carry. */
export const ALLOWED_LABELS = new Set(["result", "reason", "state", "workload_class", "host", "phase"]);
/** Most distinct label sets per metric (bounds memory if a label value misbehaves). */
export const MAX_SERIES_PER_METRIC = 1000;

type Labels = Record<string, string>;

function key(labels: Labels): string {
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}="${labels[k]!.replace(/["\\\n]/g, "_")}"`)
    .join(",");
}

/** In-memory counters; they reset when the process restarts, as Prometheus counters may. */
export class Metrics {
  private readonly counters = new Map<string, { help: string; series: Map<string, number> }>();

  /** Adds `by` to counter `name` with `labels`. Throws on a label outside ALLOWED_LABELS. */
  inc(name: string, help: string, labels: Labels = {}, by = 1): void {
    for (const l of Object.keys(labels)) if (!ALLOWED_LABELS.has(l)) throw new Error(`metric label ${l} is not allowed`);
    const c = this.counters.get(name) ?? { help, series: new Map() };
    this.counters.set(name, c);
    const k = key(labels);
    if (!c.series.has(k) && c.series.size >= MAX_SERIES_PER_METRIC) return;
    c.series.set(k, (c.series.get(k) ?? 0) + by);
  }

  /** Prometheus text exposition of the counters plus `gauges` computed by the caller. */
  render(gauges: { name: string; help: string; series: { labels: Labels; value: number }[] }[]): string {
    const out: string[] = [];
    for (const [name, c] of [...this.counters.entries()].sort()) {
      out.push(`# HELP ${name} ${c.help}`, `# TYPE ${name} counter`);
      for (const [k, v] of c.series) out.push(`${name}${k ? `{${k}}` : ""} ${v}`);
    }
    for (const g of gauges) {
      out.push(`# HELP ${g.name} ${g.help}`, `# TYPE ${g.name} gauge`);
      for (const s of g.series) {
        for (const l of Object.keys(s.labels)) if (!ALLOWED_LABELS.has(l)) throw new Error(`metric label ${l} is not allowed`);
        const k = key(s.labels);
        out.push(`${g.name}${k ? `{${k}}` : ""} ${s.value}`);
      }
    }
    return out.join("\n") + "\n";
  }
}
