/**
 * The relay's counters and gauges, as the health endpoint shows them (JSON
 * and Prometheus text exposition format 0.0.4).
 *
 * Owns: names and meanings. Must never: hold a grant ID, an address, a
 * token or any frame content: only numbers by closed sets of labels.
 */
import type { ErrorCode } from "../protocol/errors.ts";

/** Why a datagram was not forwarded. */
export type DropReason = "rate" | "unpaired" | "backpressure" | "contending";

/** Counters (monotonic) and gauges (current). */
export interface RelayCounters {
  /** Sockets accepted by a transport (WebSocket or QUIC stream). */
  connectionsOpened: number;
  /** Gauge: sockets that have not presented a token yet. */
  handshakes: number;
  /** Gauge: admitted sessions (including a reconnect waiting for a probe). */
  sessions: number;
  /** Gauge: grants with one side waiting for the other. */
  pairsPending: number;
  /** Gauge: grants with both sides present. */
  pairsPaired: number;
  tokensAccepted: number;
  framesForwarded: number;
  bytesForwarded: number;
  /** Datagrams received but not forwarded, by reason. */
  framesDropped: Record<DropReason, number>;
  /** Sockets closed by the relay, by stable code (refusals and enforced limits). */
  closes: Partial<Record<ErrorCode, number>>;
}

/** All zeros. */
export function newRelayCounters(): RelayCounters {
  return {
    connectionsOpened: 0,
    handshakes: 0,
    sessions: 0,
    pairsPending: 0,
    pairsPaired: 0,
    tokensAccepted: 0,
    framesForwarded: 0,
    bytesForwarded: 0,
    framesDropped: { rate: 0, unpaired: 0, backpressure: 0, contending: 0 },
    closes: {},
  };
}

/** The counters in Prometheus text format, every name prefixed `bb_relay_`. */
export function prometheusText(c: RelayCounters): string {
  const lines: string[] = [];
  const one = (name: string, type: "counter" | "gauge", help: string, v: number) =>
    lines.push(`# HELP bb_relay_${name} ${help}`, `# TYPE bb_relay_${name} ${type}`, `bb_relay_${name} ${v}`);
  one("connections_opened_total", "counter", "Sockets accepted.", c.connectionsOpened);
  one("handshakes", "gauge", "Sockets without a token yet.", c.handshakes);
  one("sessions", "gauge", "Admitted sessions.", c.sessions);
  one("pairs_pending", "gauge", "Grants with one side waiting.", c.pairsPending);
  one("pairs_paired", "gauge", "Grants with both sides present.", c.pairsPaired);
  one("tokens_accepted_total", "counter", "Relay tokens accepted.", c.tokensAccepted);
  one("frames_forwarded_total", "counter", "Datagrams forwarded.", c.framesForwarded);
  one("bytes_forwarded_total", "counter", "Datagram bytes forwarded.", c.bytesForwarded);
  lines.push(
    "# HELP bb_relay_frames_dropped_total Datagrams not forwarded, by reason.",
    "# TYPE bb_relay_frames_dropped_total counter",
  );
  for (const [r, v] of Object.entries(c.framesDropped)) lines.push(`bb_relay_frames_dropped_total{reason="${r}"} ${v}`);
  lines.push(
    "# HELP bb_relay_closes_total Sockets closed by the relay, by stable code.",
    "# TYPE bb_relay_closes_total counter",
  );
  for (const [code, v] of Object.entries(c.closes)) lines.push(`bb_relay_closes_total{code="${code}"} ${v}`);
  return `${lines.join("\n")}\n`;
}
