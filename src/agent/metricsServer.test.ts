/** The agent's metrics endpoint (metricsServer.ts) over real loopback sockets. */
import { expect, test } from "bun:test";
import { AgentMetrics } from "./metrics.ts";
import { parseListen, startMetricsServer } from "./metricsServer.ts";

test("GET /metrics answers the agent's Prometheus text; other paths are 404", async () => {
  const m = new AgentMetrics(() => ["running", "running", "prepared"]);
  m.transition("starting", "running", 1500, null);
  const s = startMetricsServer(m, { hostname: "127.0.0.1", port: 0 });
  try {
    const r = await fetch(`http://127.0.0.1:${s.port}/metrics`);
    const text = await r.text();
    expect(r.status).toBe(200);
    expect(text).toContain('bb_agent_placements{state="running"} 2');
    expect(text).toContain('bb_agent_placement_state_seconds_sum{state="starting"} 1.5');
    expect((await fetch(`http://127.0.0.1:${s.port}/other`)).status).toBe(404);
  } finally {
    s.stop();
  }
});

test("port clash: a taken metrics port is a startup error naming the port and the fix; a bad address names the field", () => {
  const m = new AgentMetrics(() => []);
  const first = startMetricsServer(m, { hostname: "127.0.0.1", port: 0 });
  try {
    expect(() => startMetricsServer(m, { hostname: "127.0.0.1", port: first.port })).toThrow(
      `metricsListen: TCP port ${first.port} on 127.0.0.1 is already in use; give each agent on a machine its own metricsListen`,
    );
  } finally {
    first.stop();
  }
  expect(() => parseListen("localhost:80", "metricsListen")).toThrow("metricsListen:");
  expect(parseListen("[::1]:9465", "metricsListen")).toEqual({ hostname: "::1", port: 9465 });
});
