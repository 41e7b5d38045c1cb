/**
 * The relay's WebSocket transport (spec "Packet relays": "WebSocket over
 * TLS ... a fallback every client has"; RFC 6455): one Bun.serve listener
 * whose upgrades on RELAY_WS_PATH become hub sessions.
 *
 * Owns: the listener, its WebSocket settings (message size bound, send
 * buffer bound with drops instead of queueing, no compression, Bun's
 * ping-based idle reaping) and the mapping of socket events to hub calls.
 * Must never: buffer without bound, log a message, or answer anything but
 * the relay path (404 elsewhere).
 */
import type { Server, ServerWebSocket } from "bun";
import { RELAY_WS_PATH } from "../protocol/relay.ts";
import type { RelayHub } from "./hub.ts";
import type { RelaySession } from "./session.ts";

/** Largest WebSocket message Bun accepts before closing with 1009 itself; between MAX_RELAY_FRAME_BYTES and this, the hub refuses with RELAY_FRAME_INVALID. */
export const RELAY_WS_MAX_MESSAGE_BYTES = 16 * 1024;
/** Bytes queued towards one slow socket before further datagrams to it are dropped (and counted). */
export const RELAY_WS_SEND_BUFFER_BYTES = 256 * 1024;
/** Seconds without any frame (Bun pings first) before Bun closes a dead connection. */
export const RELAY_WS_IDLE_SECONDS = 120;

interface SocketData {
  remoteAddress: string;
  session: RelaySession | null;
}

/** A running WebSocket listener. */
export interface WsListener {
  /** `ws://` or `wss://` URL of the relay path, with the bound port. */
  readonly url: string;
  readonly port: number;
  /** Stops accepting and closes every connection at once. */
  stop(): void;
}

/** Options of startWsListener. */
export interface WsListenerOptions {
  hub: RelayHub;
  hostname: string;
  /** 0 picks a free port. */
  port: number;
  /** PEM certificate chain and key; null serves plain `ws://` (the caller allows that on loopback only). */
  tls: { cert: string; key: string } | null;
}

/** Binds and starts serving. Throws when the address cannot be bound. */
export function startWsListener(o: WsListenerOptions): WsListener {
  const hub = o.hub;
  const server: Server<SocketData> = Bun.serve<SocketData>({
    hostname: o.hostname,
    port: o.port,
    ...(o.tls ? { tls: { cert: o.tls.cert, key: o.tls.key } } : {}),
    fetch(req, srv) {
      if (new URL(req.url).pathname !== RELAY_WS_PATH) return new Response("not found\n", { status: 404 });
      const remoteAddress = srv.requestIP(req)?.address ?? "unknown";
      if (srv.upgrade(req, { data: { remoteAddress, session: null } })) return undefined;
      return new Response("a WebSocket upgrade is required\n", { status: 426, headers: { upgrade: "websocket" } });
    },
    websocket: {
      maxPayloadLength: RELAY_WS_MAX_MESSAGE_BYTES,
      backpressureLimit: RELAY_WS_SEND_BUFFER_BYTES,
      closeOnBackpressureLimit: false,
      perMessageDeflate: false,
      idleTimeout: RELAY_WS_IDLE_SECONDS,
      sendPings: true,
      open(ws) {
        ws.data.session = hub.open(relaySocketOf(ws));
      },
      message(ws, message) {
        const s = ws.data.session;
        if (!s) return;
        if (typeof message === "string") hub.text(s, message);
        else hub.binary(s, message);
      },
      pong(ws) {
        const s = ws.data.session;
        if (s) hub.heard(s);
      },
      close(ws) {
        const s = ws.data.session;
        if (s) hub.closed(s);
      },
    },
  });
  const port = server.port ?? o.port;
  const host = o.hostname.includes(":") ? `[${o.hostname}]` : o.hostname;
  return {
    url: `${o.tls ? "wss" : "ws"}://${host}:${port}${RELAY_WS_PATH}`,
    port,
    stop: () => void server.stop(true),
  };
}

function relaySocketOf(ws: ServerWebSocket<SocketData>) {
  return {
    remoteAddress: ws.data.remoteAddress,
    // Bun: > 0 sent, -1 queued under backpressure (still within RELAY_WS_SEND_BUFFER_BYTES), 0 dropped.
    sendDatagram: (frame: Uint8Array) => ws.send(frame) !== 0,
    sendText: (text: string) => void ws.send(text),
    ping: () => void ws.ping(),
    close: (code: number, reason: string) => ws.close(code, reason),
  };
}
