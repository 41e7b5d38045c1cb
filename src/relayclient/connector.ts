/**
 * How a role opens one relay session for a relay map entry (docs/relay.md,
 * "Client"; spec "Packet relays"): over QUIC only when the entry names a
 * `quic` address, falling back to the WebSocket `url` when QUIC is
 * unavailable or fails before the relay answered; otherwise over the
 * WebSocket. The relay's TLS certificate is verified against the system's
 * trust store plus `ca` (a private relay CA), with the server name taken
 * from the entry's URL (QUIC verifies a DNS name: a URL with an IP address
 * ends up on the WebSocket). A QUIC attempt gets RELAY_QUIC_ATTEMPT_MS, so
 * a network that drops UDP costs that long before the fallback.
 *
 * Owns: that choice. Must never: fall back after the relay refused the
 * token (a refusal over one transport is a refusal over the other), or
 * skip certificate verification.
 */
import type { RelayEntry, SignedRelayToken } from "../protocol/connection.ts";
import { connectRelayQuic } from "./quicClient.ts";
import { RelayConnectError, type RelayTransport } from "./transport.ts";
import { connectRelay } from "./wsClient.ts";

/** Longest a QUIC attempt may take before the WebSocket is tried, ms. */
export const RELAY_QUIC_ATTEMPT_MS = 3_000;

/** Options of relayConnector. */
export interface RelayConnectorOptions {
  /** Extra PEM CA certificates to trust besides the system's. */
  ca?: string;
  /** Connect timeout per attempt, ms (default RELAY_CLIENT_CONNECT_TIMEOUT_MS). */
  timeoutMs?: number;
}

/**
 * A connector for src/wireguard's MultipathTunnel: `(entry, token,
 * onDatagram) → RelayTransport`. Rejects with RelayConnectError (its
 * `close.code` is the relay's stable code) when the relay refused, or an
 * Error when it could not be reached.
 */
export function relayConnector(o: RelayConnectorOptions = {}) {
  return async (
    entry: RelayEntry,
    token: SignedRelayToken,
    onDatagram: (d: Uint8Array) => void,
  ): Promise<RelayTransport> => {
    const common = {
      token,
      onDatagram,
      ...(o.ca ? { ca: o.ca } : {}),
      ...(o.timeoutMs ? { timeoutMs: o.timeoutMs } : {}),
    };
    if (entry.quic) {
      try {
        const timeoutMs = Math.min(o.timeoutMs ?? RELAY_QUIC_ATTEMPT_MS, RELAY_QUIC_ATTEMPT_MS);
        return await connectRelayQuic({
          ...common,
          timeoutMs,
          address: entry.quic,
          servername: new URL(entry.url).hostname.replace(/^\[|\]$/g, ""),
        });
      } catch (e) {
        if (e instanceof RelayConnectError && e.close.code) throw e;
      }
    }
    return connectRelay({ ...common, url: entry.url });
  };
}
