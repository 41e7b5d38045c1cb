/**
 * The Connection rendezvous over a WebSocket (`GET
 * /v1/connections/{id}/connect`; spec "Coordination and path selection"):
 * the same messages as the long-poll routes, both ways on one socket. The
 * request guard (edge.ts) authenticates the upgrade like the long-poll
 * routes (the role's endpoint token in the Authorization header); this
 * module carries the socket afterwards.
 *
 * Frames, all JSON text:
 * - from the endpoint: a `POST …/messages` body (`{"messages": […]}`); the
 *   answer is `{"type":"accepted", …ConnectionPollResponse}`;
 * - to the endpoint: `{"type":"messages", …ConnectionPollResponse}` with
 *   the peer's messages as they arrive (a message handed to the socket
 *   counts as delivered: the next poll's cursor acknowledges it; the
 *   upgrade's `after` query resumes after a reconnection);
 * - `{"type":"error","code","detail"}` before the server closes the socket
 *   (1008 for a bad frame or past the rate, 1000 once the Connection ended).
 *
 * Bounds (each a named constant): frame size (Bun's maxPayloadLength;
 * larger frames close the socket with 1009), frames per endpoint per
 * window, sockets per Connection role (past it the upgrade is
 * RATE_LIMITED), and a floor between polls that returned nothing without
 * parking, so a full park set never makes a busy loop.
 * Must never: hold a business rule (it calls the front's Connection
 * methods), echo a frame back in an error, or outlive its Connection.
 */
import type { ServerWebSocket, WebSocketHandler } from "bun";
import { Value } from "@sinclair/typebox/value";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { BeachballError } from "../protocol/errors.ts";
import { parseBoundedJson } from "../protocol/boundedBody.ts";
import { declaredKeys, describeFirstSchemaError } from "./schemaErrors.ts";
import {
  ConnectionMessagesBody,
  MAX_CONNECTION_BODY_BYTES,
  MAX_CONNECTION_POLL_WAIT_MS,
  type ConnectionPollBody,
  type ConnectionPollResponse,
  type RelayRole,
} from "../protocol/connection.ts";

/** The messages body's declared keys (schemaErrors.ts may name them). */
const MESSAGES_KEYS = declaredKeys(ConnectionMessagesBody);
/** Largest frame an endpoint may send, bytes (a `POST …/messages` body's bound). */
export const MAX_RENDEZVOUS_FRAME_BYTES = MAX_CONNECTION_BODY_BYTES;
/** Most frames one socket may send per RENDEZVOUS_RATE_WINDOW_MS; past it the socket is closed (1008). */
export const MAX_RENDEZVOUS_FRAMES_PER_WINDOW = 30;
/** The window of MAX_RENDEZVOUS_FRAMES_PER_WINDOW, ms. */
export const RENDEZVOUS_RATE_WINDOW_MS = 10_000;
/** Most open sockets per Connection and role (a reconnecting endpoint may briefly hold two). */
export const MAX_RENDEZVOUS_SOCKETS_PER_ROLE = 2;
/** Pause after a poll that answered nothing without parking (the park set was full), ms. */
export const RENDEZVOUS_IDLE_POLL_FLOOR_MS = 1_000;

/** What each socket carries from its upgrade. */
export interface RendezvousSocketData {
  connectionId: string;
  role: RelayRole;
  /** The peer's messages up to this sequence number were processed before (the upgrade's `after`). */
  after: number;
}

/** The front's Connection methods the bridge calls. */
export interface RendezvousFront {
  connectionPoll(connectionId: string, role: RelayRole, body: ConnectionPollBody): Promise<ConnectionPollResponse>;
  connectionMessages(
    connectionId: string,
    role: RelayRole,
    body: ConnectionMessagesBody,
  ): Promise<ConnectionPollResponse>;
}

/** The clock (its monoMs) and timer the bridge uses. */
export interface RendezvousPorts {
  clock: Clock;
  sleep(ms: number): Promise<void>;
}

interface Live {
  closed: boolean;
  frames: number[];
}

/** The sockets of one server: the upgrade gate and Bun's WebSocket handlers. */
export class RendezvousSockets {
  private readonly open = new Map<string, number>();
  private readonly live = new WeakMap<ServerWebSocket<RendezvousSocketData>, Live>();

  constructor(
    private readonly front: RendezvousFront,
    private readonly ports: RendezvousPorts = { clock: systemClock, sleep: (ms) => Bun.sleep(ms) },
  ) {}

  private nowMs(): number {
    return this.ports.clock.monoMs();
  }

  /** Throws RATE_LIMITED when MAX_RENDEZVOUS_SOCKETS_PER_ROLE sockets of this Connection role are open (checked before upgrading). */
  admit(connectionId: string, role: RelayRole): void {
    if ((this.open.get(`${connectionId}:${role}`) ?? 0) >= MAX_RENDEZVOUS_SOCKETS_PER_ROLE) {
      throw new BeachballError(
        "RATE_LIMITED",
        `at most ${MAX_RENDEZVOUS_SOCKETS_PER_ROLE} rendezvous sockets per Connection and role`,
        { retryAfterSeconds: 5 },
      );
    }
  }

  /** Bun's `websocket` option for Bun.serve. */
  readonly handlers: WebSocketHandler<RendezvousSocketData> = {
    maxPayloadLength: MAX_RENDEZVOUS_FRAME_BYTES,
    idleTimeout: 60,
    sendPings: true,
    open: (ws) => {
      const key = `${ws.data.connectionId}:${ws.data.role}`;
      this.open.set(key, (this.open.get(key) ?? 0) + 1);
      const live: Live = { closed: false, frames: [] };
      this.live.set(ws, live);
      void this.relay(ws, live);
    },
    message: (ws, frame) => void this.receive(ws, frame),
    close: (ws) => {
      const key = `${ws.data.connectionId}:${ws.data.role}`;
      const n = (this.open.get(key) ?? 1) - 1;
      if (n <= 0) this.open.delete(key);
      else this.open.set(key, n);
      const live = this.live.get(ws);
      if (live) live.closed = true;
    },
  };

  private fail(ws: ServerWebSocket<RendezvousSocketData>, closeCode: number, code: string, detail: string): void {
    const live = this.live.get(ws);
    if (live?.closed) return;
    if (live) live.closed = true;
    ws.send(JSON.stringify({ type: "error", code, detail }));
    ws.close(closeCode, code);
  }

  /** The peer's messages, pushed as they arrive, until the socket or the Connection ends. */
  private async relay(ws: ServerWebSocket<RendezvousSocketData>, live: Live): Promise<void> {
    let after = ws.data.after;
    while (!live.closed) {
      const started = this.nowMs();
      let r: ConnectionPollResponse;
      try {
        r = await this.front.connectionPoll(ws.data.connectionId, ws.data.role, {
          after,
          waitMs: MAX_CONNECTION_POLL_WAIT_MS,
        });
      } catch (e) {
        const err = e instanceof BeachballError ? e : new BeachballError("INTERNAL", "internal error");
        return this.fail(ws, err.code === "UNAUTHENTICATED" ? 1000 : 1011, err.code, err.message);
      }
      if (live.closed) return;
      if (r.closed)
        return this.fail(ws, 1000, "UNAUTHENTICATED", "the connection has ended (its grant expired or was revoked)");
      if (r.messages.length > 0) {
        ws.send(JSON.stringify({ type: "messages", ...r }));
        after = Math.max(after, ...r.messages.map((m) => m.seq));
      } else if (this.nowMs() - started < RENDEZVOUS_IDLE_POLL_FLOOR_MS) {
        await this.ports.sleep(RENDEZVOUS_IDLE_POLL_FLOOR_MS);
      }
    }
  }

  /** One frame from the endpoint: rate, JSON, schema, then the messages route's rules. */
  private async receive(ws: ServerWebSocket<RendezvousSocketData>, frame: string | Buffer): Promise<void> {
    const live = this.live.get(ws);
    if (!live || live.closed) return;
    const now = this.nowMs();
    live.frames = live.frames.filter((t) => now - t < RENDEZVOUS_RATE_WINDOW_MS);
    if (live.frames.length >= MAX_RENDEZVOUS_FRAMES_PER_WINDOW)
      return this.fail(
        ws,
        1008,
        "RATE_LIMITED",
        `at most ${MAX_RENDEZVOUS_FRAMES_PER_WINDOW} frames per ${RENDEZVOUS_RATE_WINDOW_MS / 1000} s`,
      );
    live.frames.push(now);
    let body: unknown;
    try {
      // The same depth bound and UTF-8 check as an HTTP body (the frame's size is Bun's maxPayloadLength).
      body = parseBoundedJson(typeof frame === "string" ? new TextEncoder().encode(frame) : frame);
    } catch (e) {
      const err = e instanceof BeachballError ? e : new BeachballError("MALFORMED_JSON", "a frame is not valid JSON");
      return this.fail(ws, 1008, err.code, err.message);
    }
    if (!Value.Check(ConnectionMessagesBody, body)) {
      return this.fail(
        ws,
        1008,
        "VALIDATION_FAILED",
        describeFirstSchemaError(Value.Errors(ConnectionMessagesBody, body), MESSAGES_KEYS),
      );
    }
    try {
      const r = await this.front.connectionMessages(ws.data.connectionId, ws.data.role, body);
      if (!live.closed) ws.send(JSON.stringify({ type: "accepted", ...r }));
    } catch (e) {
      const err = e instanceof BeachballError ? e : new BeachballError("INTERNAL", "internal error");
      if (err.code === "RATE_LIMITED" || err.code === "VALIDATION_FAILED") {
        // The Connection refused this frame and wrote nothing: say so and keep the socket.
        if (!live.closed) ws.send(JSON.stringify({ type: "error", code: err.code, detail: err.message }));
        return;
      }
      this.fail(ws, err.code === "UNAUTHENTICATED" ? 1000 : 1011, err.code, err.message);
    }
  }
}
