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
