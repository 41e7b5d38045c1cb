/**
 * The relay client over QUIC (Bun's experimental `node:quic`; RFC 9000),
 * for a relay map entry with a `quic` address: one connection, one
 * bidirectional stream, frames as in src/protocol/relay.ts. Callers fall
 * back to connectRelay (WebSocket) when this rejects.
 *
 * Owns: one QUIC session. Must never: log the token, queue beyond the
 * stream's high-water mark (datagrams that do not fit are dropped), or load
 * `node:quic` before it is called.
 */
import type { SignedRelayToken } from "../protocol/connection.ts";
import {
  decodeCloseBody,
  encodeStreamFrame,
  RELAY_QUIC_ALPN,
  StreamFrameDecoder,
  StreamFrameKind,
} from "../protocol/relay.ts";
import {
  RELAY_CLIENT_CONNECT_TIMEOUT_MS,
  RELAY_CLIENT_SEND_BUFFER_BYTES,
  RelayClientState,
  relayClose,
  type RelayHandlers,
  type RelayTransport,
} from "./transport.ts";

/** Options of connectRelayQuic. */
export interface ConnectRelayQuicOptions extends RelayHandlers {
  /** `host:port` from the relay map's `quic` field. */
  address: string;
  /** TLS server name to verify (the relay's certificate name). */
  servername: string;
  token: SignedRelayToken;
  /** Extra PEM CA certificates to trust. */
  ca?: string;
  /** Default RELAY_CLIENT_CONNECT_TIMEOUT_MS. */
  timeoutMs?: number;
}

/** Connects over QUIC and presents the token. Rejects with RelayConnectError on refusal, or an Error when QUIC is unavailable or times out. */
export async function connectRelayQuic(o: ConnectRelayQuicOptions): Promise<RelayTransport> {
  const quic = await import("node:quic");
  const timeoutMs = o.timeoutMs ?? RELAY_CLIENT_CONNECT_TIMEOUT_MS;
  const session = await quic.connect(o.address, {
    alpn: RELAY_QUIC_ALPN,
    servername: o.servername,
    ...(o.ca ? { ca: [Buffer.from(o.ca)] } : {}),
    verifyPeer: "strict",
  });
  session.closed.catch(() => {});
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      session.destroy();
      reject(new Error(`relay ${o.address} did not accept the QUIC session within ${timeoutMs} ms`));
    }, timeoutMs);
  });
  const state = new RelayClientState(o);
  try {
    await Promise.race([session.opened, timeout]);
    const stream = await Promise.race([session.createBidirectionalStream(), timeout]);
    stream.highWaterMark = RELAY_CLIENT_SEND_BUFFER_BYTES;
    const writer = stream.writer;
    let open = true;
    const write = (kind: StreamFrameKind, body: Uint8Array) => open && writer.writeSync(encodeStreamFrame(kind, body));
    const finish = (closeCode: number, reason: string) => {
      state.ended(relayClose(closeCode, reason));
      if (!open) return;
      open = false;
      try {
        writer.endSync();
      } catch {
        // already closed
      }
      void session.close().catch(() => {});
    };
    write(StreamFrameKind.text, new TextEncoder().encode(JSON.stringify(o.token)));
    void (async () => {
      const decoder = new StreamFrameDecoder();
      const text = new TextDecoder();
      try {
        for await (const chunks of stream) {
          for (const chunk of chunks) {
            for (const f of decoder.push(chunk)) {
              if (f.kind === StreamFrameKind.datagram) state.datagram(f.body.slice());
              else if (f.kind === StreamFrameKind.text) {
                if (!state.status(text.decode(f.body))) finish(1002, "unexpected text message");
              } else if (f.kind === StreamFrameKind.ping) write(StreamFrameKind.pong, f.body);
              else if (f.kind === StreamFrameKind.close) {
                const c = decodeCloseBody(f.body);
                finish(c?.code ?? 1002, c?.reason ?? "");
              }
            }
            if (decoder.failed) finish(1002, "malformed stream frame");
          }
        }
        finish(1006, "stream ended");
      } catch {
        finish(1006, "stream reset");
      }
    })();
    await Promise.race([state.ready, timeout]);
    return state.transport(
      (d) => write(StreamFrameKind.datagram, d),
      () => {
        write(StreamFrameKind.close, new Uint8Array([0x03, 0xe8]));
        finish(1000, "");
      },
    );
  } catch (e) {
    session.destroy();
    throw e;
  } finally {
    clearTimeout(timer);
  }
}
