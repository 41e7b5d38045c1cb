/**
 * The agent's local metrics endpoint (issue 18 item 13): `GET /metrics`
 * answers the Prometheus text of metrics.ts; everything else is 404. It
 * listens only where `metricsListen` in agent.json says (off by default,
 * so two agents on one machine never clash by default; a loopback address
 * is the usual choice: the agent exposes nothing else).
 * Must never: serve anything but the metrics text, or start on an address
 * it could not parse.
 */
import { isIP } from "node:net";
import type { AgentMetrics } from "./metrics.ts";

/** A parsed `host:port` (IPv6 in brackets). Throws an Error naming `field` for another shape. */
export function parseListen(text: string, field: string): { hostname: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(text);
  const hostname = m?.[1] ?? m?.[2] ?? "";
  const port = Number(m?.[3]);
  if (!m || !isIP(hostname) || !Number.isInteger(port) || port < 1 || port > 65535)
    throw new Error(`${field}: ${JSON.stringify(text)} is not IP:PORT (e.g. 127.0.0.1:9465)`);
  return { hostname, port };
}

/** A running metrics endpoint. */
export interface MetricsServer {
  /** The bound port. */
  port: number;
  stop(): void;
}

/**
 * Serves `metrics` on `listen`. Throws an Error naming the address and the
 * fix when the port is taken (EADDRINUSE).
 */
export function startMetricsServer(metrics: AgentMetrics, listen: { hostname: string; port: number }): MetricsServer {
  try {
    const server = Bun.serve({
      hostname: listen.hostname,
      port: listen.port,
      async fetch(req) {
        if (req.method !== "GET" || new URL(req.url).pathname !== "/metrics")
          return new Response("not found\n", { status: 404 });
        return new Response(await metrics.text(), { headers: { "content-type": metrics.registry.contentType } });
      },
    });
    return { port: server.port ?? listen.port, stop: () => void server.stop(true) };
  } catch (e) {
    if ((e as { code?: string }).code === "EADDRINUSE")
      throw new Error(
        `metricsListen: TCP port ${listen.port} on ${listen.hostname} is already in use; give each agent on a machine its own metricsListen in its agent.json`,
        { cause: e },
      );
    throw e;
  }
}
