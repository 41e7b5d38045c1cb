import { describe, expect, test } from "bun:test";
import { Metrics } from "./metrics.ts";

describe("metrics", () => {
  test("renders counters and gauges in Prometheus text", () => {
    const m = new Metrics();
    m.inc("bb_allocation_transitions_total", "Transitions", { state: "ready", workload_class: "ci-small" });
    m.inc("bb_allocation_transitions_total", "Transitions", { state: "ready", workload_class: "ci-small" });
    const text = m.render([{ name: "bb_hosts", help: "Hosts", series: [{ labels: { state: "active" }, value: 2 }] }]);
    expect(text).toContain('bb_allocation_transitions_total{state="ready",workload_class="ci-small"} 2');
    expect(text).toContain('bb_hosts{state="active"} 2');
    expect(text).toContain("# TYPE bb_hosts gauge");
  });
  test("refuses labels outside the allowed set (no allocation IDs)", () => {
    const m = new Metrics();
    expect(() => m.inc("x", "x", { allocation_id: "alloc_1" })).toThrow("not allowed");
  });
});

describe("histograms and sources", () => {
  test("a histogram renders cumulative buckets, +Inf, sum and count", () => {
    const m = new Metrics();
    for (const v of [0.004, 0.2, 3])
      m.observe("bb_allocation_create_to_ready_seconds", "Create to ready", v, { workload_class: "ci-small" });
    m.observe("bb_allocation_create_to_ready_seconds", "Create to ready", -1, { workload_class: "ci-small" });
    const text = m.render([]);
    expect(text).toContain("# TYPE bb_allocation_create_to_ready_seconds histogram");
    expect(text).toContain('bb_allocation_create_to_ready_seconds_bucket{workload_class="ci-small",le="0.005"} 1');
    expect(text).toContain('bb_allocation_create_to_ready_seconds_bucket{workload_class="ci-small",le="0.25"} 2');
    expect(text).toContain('bb_allocation_create_to_ready_seconds_bucket{workload_class="ci-small",le="+Inf"} 3');
    expect(text).toContain('bb_allocation_create_to_ready_seconds_count{workload_class="ci-small"} 3');
    expect(text).toMatch(/bb_allocation_create_to_ready_seconds_sum\{workload_class="ci-small"\} 3\.204/);
    const plain = new Metrics();
    plain.observe("bb_agent_poll_wakeup_seconds", "Wake-up", 0.001);
    expect(plain.render([])).toContain('bb_agent_poll_wakeup_seconds_bucket{le="0.005"} 1');
  });
  test("histograms refuse labels outside the allowed set too", () => {
    expect(() => new Metrics().observe("x_seconds", "x", 1, { allocation_id: "alloc_1" })).toThrow("not allowed");
  });
  test("renderAll appends added sources (process metrics)", async () => {
    const { processMetricsText } = await import("./processMetrics.ts");
    const m = new Metrics();
    m.addSource(processMetricsText);
    const text = await m.renderAll([]);
    for (const name of [
      "process_cpu_seconds_total",
      "process_resident_memory_bytes",
      "process_open_fds",
      "nodejs_heap_size_used_bytes",
    ])
      expect(text).toContain(`# TYPE ${name} `);
    // Bun has no event-loop delay monitor: those families would read nonsense, so they are left out.
    expect(text).not.toContain("nodejs_eventloop_lag");
    expect(text).not.toMatch(/\n\n/);
  });
});
