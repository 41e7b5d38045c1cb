/**
 * The relay's QUIC transport, behind `quicListen` / `--quic-listen` (spec
 * "Packet relays": QUIC where it works, WebSocket always). Uses Bun's
 * experimental `node:quic` (RFC 9000/9001). One QUIC connection carries one
 * relay session on its first bidirectional stream, framed as in
 * src/protocol/relay.ts (length-prefixed), because `node:quic` DATAGRAM
 * frames hold about 1,150 bytes and a WireGuard packet needs up to 1,452.
 * A stream is ordered and retransmitted, so a lost packet delays the
 * datagrams behind it (head-of-line blocking) where WebSocket over TCP does
 * the same; this transport's gain is connection setup and migration, not
 * loss behaviour.
 *
 * Owns: the endpoint, the stream per session, and the mapping of stream
 * frames to hub calls. Must never: accept a second stream on a connection,
 * queue datagrams beyond the stream's high-water mark (they are dropped),
 * or load `node:quic` unless QUIC was asked for.
 */
import type { KeyObject } from "node:crypto";
import type { QuicEndpoint, QuicSession, QuicStream } from "node:quic";
import {
  encodeCloseBody,
  encodeStreamFrame,
  RELAY_QUIC_ALPN,
  StreamFrameDecoder,
  StreamFrameKind,
} from "../protocol/relay.ts";
import type { RelayHub } from "./hub.ts";
import type { RelaySession, RelaySocket } from "./session.ts";
import { RELAY_WS_SEND_BUFFER_BYTES } from "./wsServer.ts";

/** How long a closing session may take to deliver its close frame before it is destroyed, ms. */
export const RELAY_QUIC_CLOSE_GRACE_MS = 2_000;
/** QUIC idle timeout (transport parameter), ms: QUIC's own keep-alive PINGs keep a live connection open. */
export const RELAY_QUIC_IDLE_MS = 60_000;

/** A running QUIC listener. */
export interface QuicListener {
  /** `host:port` as a relay map's `quic` field names it. */
  readonly address: string;
  readonly port: number;
  /** Closes the endpoint and every session. */
  stop(): Promise<void>;
}

/** Options of startQuicListener. */
export interface QuicListenerOptions {
  hub: RelayHub;
  hostname: string;
  port: number;
  /** PEM certificate chain and private key (QUIC is always TLS 1.3). */
  tls: { cert: string; key: KeyObject };
  /** Concurrent QUIC connections in all (sessions + handshakes); per address the hub's handshake bound applies, since one host behind NAT holds a session per grant. */
  maxConnections: number;
}

/** Loads node:quic and starts listening. Rejects when node:quic is unavailable or the address cannot be bound. */
export async function startQuicListener(o: QuicListenerOptions): Promise<QuicListener> {
  const quic = await import("node:quic");
  const host = o.hostname.includes(":") ? `[${o.hostname}]` : o.hostname;
  const endpoint: QuicEndpoint = await quic.listen((session) => acceptSession(o.hub, session), {
    endpoint: {
      address: `${host}:${o.port}`,
      maxConnectionsTotal: Math.min(65535, o.maxConnections),
    },
    sni: { "*": { keys: [o.tls.key], certs: [Buffer.from(o.tls.cert)] } },
    alpn: RELAY_QUIC_ALPN,
    transportParams: { initialMaxStreamsBidi: 1, initialMaxStreamsUni: 0, maxIdleTimeout: RELAY_QUIC_IDLE_MS },
  });
  const port = endpoint.address?.port ?? o.port;
  return {
    address: `${host}:${port}`,
    port,
    stop: async () => {
      await endpoint.close().catch(() => {});
    },
  };
}

function acceptSession(hub: RelayHub, session: QuicSession): void {
  let taken = false;
  session.onstream = (stream) => {
    if (taken) return stream.destroy();
    taken = true;
    void serveStream(hub, session, stream);
  };
  session.closed.catch(() => {});
  session.opened.catch(() => {});
}

async function serveStream(hub: RelayHub, session: QuicSession, stream: QuicStream): Promise<void> {
  stream.highWaterMark = RELAY_WS_SEND_BUFFER_BYTES;
  const writer = stream.writer;
  let ended = false;
  const write = (kind: StreamFrameKind, body: Uint8Array) => !ended && writer.writeSync(encodeStreamFrame(kind, body));
  const socket: RelaySocket = {
    remoteAddress: session.path?.remote?.address ?? "unknown",
    sendDatagram: (frame) => write(StreamFrameKind.datagram, frame),
    sendText: (text) => void write(StreamFrameKind.text, new TextEncoder().encode(text)),
    ping: () => void write(StreamFrameKind.ping, Uint8Array.of(1)),
    close: (code, reason) => {
      write(StreamFrameKind.close, encodeCloseBody(code, reason));
      ended = true;
      writer.endSync();
      const t = setTimeout(() => session.destroy(), RELAY_QUIC_CLOSE_GRACE_MS);
      void session
        .close()
        .catch(() => {})
        .finally(() => clearTimeout(t));
    },
  };
  const s: RelaySession = hub.open(socket);
  const decoder = new StreamFrameDecoder();
  const text = new TextDecoder();
  try {
    for await (const chunks of stream) {
      for (const chunk of chunks) {
        for (const f of decoder.push(chunk)) {
          if (f.kind === StreamFrameKind.datagram)
            hub.binary(s, f.body.slice()); // a copy: WebSocket sends are deferred to the end of the turn
          else if (f.kind === StreamFrameKind.text) hub.text(s, text.decode(f.body));
          else if (f.kind === StreamFrameKind.pong) hub.heard(s);
          else if (f.kind === StreamFrameKind.ping) write(StreamFrameKind.pong, f.body);
          else if (f.kind === StreamFrameKind.close) hub.closed(s);
        }
        if (decoder.failed) hub.close(s, "RELAY_FRAME_INVALID");
      }
    }
  } catch {
    // A reset or a destroyed session ends the stream; the session is forgotten below.
  }
  hub.closed(s);
  if (!ended) {
    ended = true;
    try {
      writer.endSync();
    } catch {
      // already closed
    }
    void session.close().catch(() => {});
  }
}
