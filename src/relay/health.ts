/**
 * The relay's health endpoint (docs/relay.md, "Health"): plain HTTP on its
 * own address (default 127.0.0.1:9443). `GET /healthz` answers 200 with the
 * relay ID and counters as JSON while serving, 503 once shutting down;
 * `GET /metrics` gives the same counters in Prometheus text format.
 *
 * Owns: that listener. Must never: show a token, a grant ID, an address or
 * any frame content (the counters hold numbers only), or accept a body.
 */
import { prometheusText, type RelayCounters } from "./counters.ts";
import { requestTarget } from "../protocol/requestTarget.ts";

/** A running health listener. */
export interface HealthListener {
  readonly url: string;
  readonly port: number;
  stop(): void;
}

/** Starts the health listener. `serving()` is false once the relay shuts down. Throws when the address cannot be bound. */
export function startHealthListener(o: {
  hostname: string;
  port: number;
  relayId: string;
  counters: RelayCounters;
  serving: () => boolean;
}): HealthListener {
  const server = Bun.serve({
    hostname: o.hostname,
    port: o.port,
    maxRequestBodySize: 0,
    fetch(req) {
      if (req.method !== "GET") return new Response("method not allowed\n", { status: 405, headers: { allow: "GET" } });
      const path = requestTarget(req).pathname;
      if (path === "/healthz") {
        const up = o.serving();
        return Response.json(
          { status: up ? "ok" : "shutting_down", relayId: o.relayId, counters: o.counters },
          { status: up ? 200 : 503 },
        );
      }
      if (path === "/metrics")
        return new Response(prometheusText(o.counters), { headers: { "content-type": "text/plain; version=0.0.4" } });
      return new Response("not found\n", { status: 404 });
    },
  });
  const port = server.port ?? o.port;
  const host = o.hostname.includes(":") ? `[${o.hostname}]` : o.hostname;
  return { url: `http://${host}:${port}`, port, stop: () => void server.stop(true) };
}
