/**
 * The relay's WebSocket transport (spec "Packet relays": "WebSocket over
 * TLS ... a fallback every client has"; RFC 6455): one Bun.serve listener
 * whose upgrades on RELAY_WS_PATH become hub sessions.
 *
 * Owns: the listener, its WebSocket settings (message size bound, send
 * buffer bound with drops instead of queueing, no compression, Bun's
 * ping-based idle reaping), the mapping of socket events to hub calls, and
 * batched sends: Bun (uWebSockets) corks only the socket whose handler is
 * running, so an echo's replies leave in one write per read while a relay's
 * sends to the partner would each be their own write; datagrams for a
 * socket are therefore queued within one event-loop turn and flushed inside
 * cork() at its end (setImmediate), one write per socket per turn.
 * Must never: buffer without bound, log a message, or answer anything but
 * the relay path (404 elsewhere).
 */
import type { Server, ServerWebSocket } from "bun";
import { RELAY_WS_PATH } from "../protocol/relay.ts";
import type { RelayHub } from "./hub.ts";
import type { RelaySession } from "./session.ts";
import { requestTarget } from "../protocol/requestTarget.ts";

/** Largest WebSocket message Bun accepts before closing with 1009 itself; between MAX_RELAY_FRAME_BYTES and this, the hub refuses with RELAY_FRAME_INVALID. */
export const RELAY_WS_MAX_MESSAGE_BYTES = 16 * 1024;
/** Bytes queued towards one slow socket before further datagrams to it are dropped (and counted). */
export const RELAY_WS_SEND_BUFFER_BYTES = 256 * 1024;
/** Seconds without any frame (Bun pings first) before Bun closes a dead connection. */
export const RELAY_WS_IDLE_SECONDS = 120;

/**
 * The relay's WebSocket settings for Bun.serve (frames ≤ 16 KiB, 256 KiB
 * send buffer without closing on it, no compression, 120 s idle with
 * pings); bench/relay.ts's baseline echo server uses the same ones.
 */
export const RELAY_WS_SETTINGS = {
  maxPayloadLength: RELAY_WS_MAX_MESSAGE_BYTES,
  backpressureLimit: RELAY_WS_SEND_BUFFER_BYTES,
  closeOnBackpressureLimit: false,
  perMessageDeflate: false,
  idleTimeout: RELAY_WS_IDLE_SECONDS,
  sendPings: true,
} as const;
/** Datagrams queued for one socket within one event-loop turn before further ones are dropped (≈ 360 KB of 1,400-byte frames). */
export const RELAY_WS_MAX_BATCH_FRAMES = 256;

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

/** Queues datagrams per socket and flushes each socket's queue in one corked write per event-loop turn (see the module header). */
class CorkedSender {
  private queued = new Map<ServerWebSocket<SocketData>, Uint8Array[]>();
  private scheduled = false;

  constructor(private readonly hub: RelayHub) {}

  /** Queues `frame` for `ws`; false when its send buffer or this turn's queue is full (the datagram is dropped). */
  send(ws: ServerWebSocket<SocketData>, frame: Uint8Array): boolean {
    let q = this.queued.get(ws);
    if (!q) {
      if (ws.getBufferedAmount() > RELAY_WS_SEND_BUFFER_BYTES) return false;
      q = [];
      this.queued.set(ws, q);
    } else if (q.length >= RELAY_WS_MAX_BATCH_FRAMES) return false;
    q.push(frame);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
    return true;
  }

  /** Sends what is queued for `ws` now (before a status message or a close, so nothing overtakes a datagram). */
  flushSocket(ws: ServerWebSocket<SocketData>): void {
    const frames = this.queued.get(ws);
    if (!frames) return;
    this.queued.delete(ws);
    this.write(ws, frames);
  }

  private write(ws: ServerWebSocket<SocketData>, frames: Uint8Array[]): void {
    if (ws.readyState !== WebSocket.OPEN) return;
    ws.cork(() => {
      // Bun: > 0 sent, -1 queued under backpressure (within RELAY_WS_SEND_BUFFER_BYTES), 0 dropped.
      for (const f of frames) if (ws.send(f) === 0) this.hub.dropped("backpressure");
    });
  }

  private readonly flush = () => {
    this.scheduled = false;
    const all = this.queued;
    this.queued = new Map();
    for (const [ws, frames] of all) this.write(ws, frames);
  };
}

/** Binds and starts serving. Throws when the address cannot be bound. */
export function startWsListener(o: WsListenerOptions): WsListener {
  const hub = o.hub;
  const sender = new CorkedSender(hub);
  const server: Server<SocketData> = Bun.serve<SocketData>({
    hostname: o.hostname,
    port: o.port,
    ...(o.tls ? { tls: { cert: o.tls.cert, key: o.tls.key } } : {}),
    fetch(req, srv) {
      if (requestTarget(req).pathname !== RELAY_WS_PATH) return new Response("not found\n", { status: 404 });
      const remoteAddress = srv.requestIP(req)?.address ?? "unknown";
      if (srv.upgrade(req, { data: { remoteAddress, session: null } })) return undefined;
      return new Response("a WebSocket upgrade is required\n", { status: 426, headers: { upgrade: "websocket" } });
    },
    websocket: {
      ...RELAY_WS_SETTINGS,
      open(ws) {
        ws.data.session = hub.open(relaySocketOf(ws, sender));
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

function relaySocketOf(ws: ServerWebSocket<SocketData>, sender: CorkedSender) {
  return {
    remoteAddress: ws.data.remoteAddress,
    sendDatagram: (frame: Uint8Array) => sender.send(ws, frame),
    sendText: (text: string) => {
      sender.flushSocket(ws);
      ws.send(text);
    },
    ping: () => void ws.ping(),
    close: (code: number, reason: string) => {
      sender.flushSocket(ws);
      ws.close(code, reason);
    },
  };
}
