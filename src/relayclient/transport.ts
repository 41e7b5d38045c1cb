/**
 * What a relay connection looks like to its user (the proxy's and the
 * host endpoint's relay path; docs/relay.md, "Client"), whatever carries
 * it: a datagram pipe to the other role of one grant, plus status.
 *
 * Owns: the interface, the refusal error and the handling of the relay's
 * status messages and close reasons shared by the WebSocket and QUIC
 * clients. Must never: queue datagrams without bound (a datagram that does
 * not fit is dropped and counted, as on UDP).
 */
import { Value } from "@sinclair/typebox/value";
import { MAX_RELAY_FRAME_BYTES } from "../protocol/connection.ts";
import type { ErrorCode } from "../protocol/errors.ts";
import { closeReasonCode, RelayStatus } from "../protocol/relay.ts";

/** Bytes a client queues towards the relay before it drops datagrams (the relay's own bound is the same). */
export const RELAY_CLIENT_SEND_BUFFER_BYTES = 256 * 1024;
/** Default time for connecting and having the token accepted, ms. */
export const RELAY_CLIENT_CONNECT_TIMEOUT_MS = 10_000;

/** How a relay connection ended. */
export interface RelayClose {
  /** The transport's close code (WebSocket close code, or the relay's close frame code on QUIC; 1006 when the connection broke). */
  closeCode: number;
  reason: string;
  /** The stable code when the relay closed with one (refusal or enforced limit), else null. */
  code: ErrorCode | null;
}

/** The relay refused the session or it failed before the token was accepted. */
export class RelayConnectError extends Error {
  constructor(
    message: string,
    readonly close: RelayClose,
  ) {
    super(message);
  }
}

/** Counters of one relay connection. */
export interface RelayClientCounters {
  datagramsSent: number;
  datagramsReceived: number;
  /** Datagrams not sent: over MAX_RELAY_FRAME_BYTES, the send buffer full, or not open. */
  datagramsDropped: number;
}

/** One relay session, admitted. */
export interface RelayTransport {
  /** True while the other role of the grant is connected to the relay. */
  readonly paired: boolean;
  /** Null while open; how it ended afterwards. */
  readonly closedWith: RelayClose | null;
  /** Resolves when the connection ends. */
  readonly closed: Promise<RelayClose>;
  readonly counters: RelayClientCounters;
  /** Sends one datagram (1..MAX_RELAY_FRAME_BYTES); false when dropped. Never throws. */
  send(datagram: Uint8Array): boolean;
  /** Closes the connection (normal closure). */
  close(): void;
}

/** Callbacks of a relay connection. */
export interface RelayHandlers {
  /** A datagram from the other role, unchanged. */
  onDatagram: (datagram: Uint8Array) => void;
  /** The other role arrived (true) or left (false). */
  onPairing?: (paired: boolean) => void;
}

/** The close record for a code and reason. */
export function relayClose(closeCode: number, reason: string): RelayClose {
  return { closeCode, reason, code: closeReasonCode(reason) };
}

/**
 * The state machine both clients share: status messages in, ready/paired
 * out, close bookkeeping. The transports call its methods from their events.
 */
export class RelayClientState {
  paired = false;
  closedWith: RelayClose | null = null;
  readonly counters: RelayClientCounters = { datagramsSent: 0, datagramsReceived: 0, datagramsDropped: 0 };
  readonly closed: Promise<RelayClose>;
  /** Resolves when the relay accepted the token. */
  readonly ready: Promise<void>;
  private resolveClosed!: (c: RelayClose) => void;
  private resolveReady!: () => void;
  private rejectReady!: (e: Error) => void;
  private isReady = false;

  constructor(private readonly handlers: RelayHandlers) {
    this.closed = new Promise((r) => (this.resolveClosed = r));
    this.ready = new Promise((res, rej) => {
      this.resolveReady = res;
      this.rejectReady = rej;
    });
    this.ready.catch(() => {});
  }

  /** A text message from the relay. Returns false when it is not a status message (the caller closes). */
  status(text: string): boolean {
    let m: unknown;
    try {
      m = JSON.parse(text);
    } catch {
      return false;
    }
    if (!Value.Check(RelayStatus, m)) return false;
    if (m.type === "ready") {
      this.isReady = true;
      this.setPaired(m.paired);
      this.resolveReady();
    } else this.setPaired(m.type === "paired");
    return true;
  }

  /** A datagram from the relay. */
  datagram(d: Uint8Array): void {
    if (!this.isReady || this.closedWith) return;
    this.counters.datagramsReceived++;
    this.handlers.onDatagram(d);
  }

  /** Whether `d` may be sent now; counts a drop when not. */
  admit(d: Uint8Array): boolean {
    if (this.isReady && !this.closedWith && d.length >= 1 && d.length <= MAX_RELAY_FRAME_BYTES) return true;
    this.counters.datagramsDropped++;
    return false;
  }

  /** The connection ended. Idempotent. */
  ended(c: RelayClose): void {
    if (this.closedWith) return;
    this.closedWith = c;
    if (this.paired) this.setPaired(false);
    this.rejectReady(
      new RelayConnectError(
        `relay closed the session before accepting it: ${c.code ?? c.closeCode}${c.reason && !c.code ? ` (${c.reason})` : ""}`,
        c,
      ),
    );
    this.resolveClosed(c);
  }

  /**
   * The RelayTransport over this state: `push` hands an admitted datagram to
   * the wire (false when the wire's own buffer is full: counted as a drop),
   * `close` ends the connection normally.
   */
  transport(push: (d: Uint8Array) => boolean, close: () => void): RelayTransport {
    const state = this;
    return {
      get paired() {
        return state.paired;
      },
      get closedWith() {
        return state.closedWith;
      },
      closed: state.closed,
      counters: state.counters,
      send(d) {
        if (!state.admit(d)) return false;
        if (!push(d)) {
          state.counters.datagramsDropped++;
          return false;
        }
        state.counters.datagramsSent++;
        return true;
      },
      close,
    };
  }

  private setPaired(p: boolean): void {
    if (p === this.paired) return;
    this.paired = p;
    this.handlers.onPairing?.(p);
  }
}
