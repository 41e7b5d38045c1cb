/**
 * Prometheus metrics (spec "Observability and retention"): counters,
 * histograms and gauges with a small allowed label set: result, reason,
 * state, workload_class, host and phase (plus a histogram's own `le`). A raw
 * allocation ID never becomes a label; `inc` and `observe` refuse any other
 * label name. Sources added with `addSource` (the embedded host's process
 * metrics from prom-client, processMetrics.ts) are appended as they render.
 * Runs on both hosts: no Node-only API here.
 */

/** The only label names a metric may carry. */
export const ALLOWED_LABELS = new Set(["result", "reason", "state", "workload_class", "host", "phase"]);
/** Most distinct label sets per metric (bounds memory if a label value misbehaves). */
export const MAX_SERIES_PER_METRIC = 1000;

/** Histogram buckets for latencies, seconds (a VM boot under TCG takes tens of seconds; a wake-up, milliseconds). */
export const LATENCY_BUCKETS_SECONDS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
] as const;

type Labels = Record<string, string>;

function checkLabels(labels: Labels): void {
  for (const l of Object.keys(labels)) if (!ALLOWED_LABELS.has(l)) throw new Error(`metric label ${l} is not allowed`);
}

interface HistogramSeries {
  labels: Labels;
  counts: number[];
  sum: number;
  count: number;
}

function key(labels: Labels): string {
  return Object.keys(labels)
    .sort()
    .map((k) => `${k}="${labels[k]!.replace(/["\\\n]/g, "_")}"`)
    .join(",");
}

/** In-memory counters; they reset when the process restarts, as Prometheus counters may. */
export class Metrics {
  private readonly counters = new Map<string, { help: string; series: Map<string, number> }>();
  private readonly histograms = new Map<
    string,
    { help: string; buckets: readonly number[]; series: Map<string, HistogramSeries> }
  >();
  private readonly sources: (() => Promise<string> | string)[] = [];

  /** Adds `by` to counter `name` with `labels`. Throws on a label outside ALLOWED_LABELS. */
  inc(name: string, help: string, labels: Labels = {}, by = 1): void {
    checkLabels(labels);
    const c = this.counters.get(name) ?? { help, series: new Map() };
    this.counters.set(name, c);
    const k = key(labels);
    if (!c.series.has(k) && c.series.size >= MAX_SERIES_PER_METRIC) return;
    c.series.set(k, (c.series.get(k) ?? 0) + by);
  }

  /**
   * Records one observation (`value` in the histogram's unit, seconds for
   * `_seconds` names) in histogram `name` with `labels`. Throws on a label
   * outside ALLOWED_LABELS; a negative or non-finite value is dropped.
   */
  observe(
    name: string,
    help: string,
    value: number,
    labels: Labels = {},
    buckets: readonly number[] = LATENCY_BUCKETS_SECONDS,
  ): void {
    checkLabels(labels);
    if (!Number.isFinite(value) || value < 0) return;
    const h = this.histograms.get(name) ?? { help, buckets, series: new Map<string, HistogramSeries>() };
    this.histograms.set(name, h);
    const k = key(labels);
    let s = h.series.get(k);
    if (!s) {
      if (h.series.size >= MAX_SERIES_PER_METRIC) return;
      s = { labels, counts: h.buckets.map(() => 0), sum: 0, count: 0 };
      h.series.set(k, s);
    }
    for (let i = 0; i < h.buckets.length; i++) if (value <= h.buckets[i]!) s.counts[i]!++;
    s.sum += value;
    s.count++;
  }

  /** Appends another exposition (e.g. process metrics) to every render. */
  addSource(source: () => Promise<string> | string): void {
    this.sources.push(source);
  }

  /** render() followed by the added sources' text. */
  async renderAll(gauges: Parameters<Metrics["render"]>[0]): Promise<string> {
    let out = this.render(gauges);
    for (const s of this.sources) out += await s();
    return out;
  }

  /** Prometheus text exposition of the counters and histograms plus `gauges` computed by the caller. */
  render(gauges: { name: string; help: string; series: { labels: Labels; value: number }[] }[]): string {
    const out: string[] = [];
    for (const [name, c] of [...this.counters.entries()].sort()) {
      out.push(`# HELP ${name} ${c.help}`, `# TYPE ${name} counter`);
      for (const [k, v] of c.series) out.push(`${name}${k ? `{${k}}` : ""} ${v}`);
    }
    for (const [name, h] of [...this.histograms.entries()].sort()) {
      out.push(`# HELP ${name} ${h.help}`, `# TYPE ${name} histogram`);
      for (const [k, s] of h.series) {
        const sep = k ? `${k},` : "";
        h.buckets.forEach((b, i) => out.push(`${name}_bucket{${sep}le="${b}"} ${s.counts[i]}`));
        out.push(
          `${name}_bucket{${sep}le="+Inf"} ${s.count}`,
          `${name}_sum${k ? `{${k}}` : ""} ${s.sum}`,
          `${name}_count${k ? `{${k}}` : ""} ${s.count}`,
        );
      }
    }
    for (const g of gauges) {
      out.push(`# HELP ${g.name} ${g.help}`, `# TYPE ${g.name} gauge`);
      for (const s of g.series) {
        checkLabels(s.labels);
        const k = key(s.labels);
        out.push(`${g.name}${k ? `{${k}}` : ""} ${s.value}`);
      }
    }
    return out.join("\n") + "\n";
  }
}
