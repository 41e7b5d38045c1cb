/**
 * The relay client over WebSocket (RFC 6455; src/protocol/relay.ts): the
 * transport every proxy and host endpoint always has. Connects to a relay
 * map entry's `url`, presents the role's relay token as the first message,
 * and resolves once the relay accepts it.
 *
 * Owns: one WebSocket. Must never: log the token, queue more than
 * RELAY_CLIENT_SEND_BUFFER_BYTES, or reconnect by itself (a reconnect
 * needs a token the caller decides to use; see docs/relay.md).
 */
import type { SignedRelayToken } from "../protocol/connection.ts";
import {
  RELAY_CLIENT_CONNECT_TIMEOUT_MS,
  RELAY_CLIENT_SEND_BUFFER_BYTES,
  RelayClientState,
  relayClose,
  type RelayHandlers,
  type RelayTransport,
} from "./transport.ts";

/** Options of connectRelay. */
export interface ConnectRelayOptions extends RelayHandlers {
  /** `wss://…/v1/relay` from the relay map (`ws://` only for a loopback test relay). */
  url: string;
  token: SignedRelayToken;
  /** Extra PEM CA certificates to trust (a private relay CA, or a test's self-signed certificate). */
  ca?: string;
  /** Default RELAY_CLIENT_CONNECT_TIMEOUT_MS. */
  timeoutMs?: number;
}

/** Connects and presents the token. Rejects with RelayConnectError (carrying the relay's stable code when it refused) or on timeout. */
export async function connectRelay(o: ConnectRelayOptions): Promise<RelayTransport> {
  const state = new RelayClientState(o);
  const ws = new WebSocket(o.url, o.ca ? { tls: { ca: o.ca } } : {});
  ws.binaryType = "arraybuffer";
  ws.onopen = () => ws.send(JSON.stringify(o.token));
  ws.onmessage = (ev: MessageEvent) => {
    if (typeof ev.data === "string") {
      if (!state.status(ev.data)) ws.close(1002, "unexpected text message");
    } else state.datagram(new Uint8Array(ev.data as ArrayBuffer));
  };
  ws.onclose = (ev: CloseEvent) => state.ended(relayClose(ev.code, ev.reason));
  ws.onerror = () => {};
  const transport: RelayTransport = state.transport(
    (d) => {
      if (ws.readyState !== WebSocket.OPEN || ws.bufferedAmount > RELAY_CLIENT_SEND_BUFFER_BYTES) return false;
      ws.send(d);
      return true;
    },
    () => ws.close(1000, ""),
  );
  const timeoutMs = o.timeoutMs ?? RELAY_CLIENT_CONNECT_TIMEOUT_MS;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      ws.close(1000, "");
      state.ended(relayClose(1006, "connect timeout"));
      reject(new Error(`relay ${o.url} did not accept the session within ${timeoutMs} ms`));
    }, timeoutMs);
  });
  try {
    await Promise.race([state.ready, timeout]);
  } finally {
    clearTimeout(timer);
  }
  return transport;
}
