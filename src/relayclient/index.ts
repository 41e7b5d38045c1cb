/**
 * The relay client library (docs/relay.md, "Client"): role-free, so the
 * proxy (src/proxy) and the host endpoint (src/agent) both use it as their
 * relay transport without importing the relay role (src/relay).
 *
 * Owns: nothing but re-exports. Must never: import a role; it imports only
 * src/protocol (test/architecture.test.ts checks it).
 */
export { connectRelay, type ConnectRelayOptions } from "./wsClient.ts";
export { connectRelayQuic, type ConnectRelayQuicOptions } from "./quicClient.ts";
export {
  RELAY_CLIENT_CONNECT_TIMEOUT_MS,
  RELAY_CLIENT_SEND_BUFFER_BYTES,
  RelayConnectError,
  type RelayClientCounters,
  type RelayClose,
  type RelayHandlers,
  type RelayTransport,
} from "./transport.ts";
export { RELAY_QUIC_ATTEMPT_MS, relayConnector, type RelayConnectorOptions } from "./connector.ts";
