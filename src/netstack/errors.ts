/**
 * Errors of the TCP/IP stack: one class with a closed union of stable codes.
 * Callers branch on `code`, never on the message.
 */

/**
 * Stable codes:
 * - `refused`: the peer answered the SYN with RST;
 * - `reset`: the peer reset an established connection;
 * - `timeout`: no answer (connect timeout, retransmissions exhausted);
 * - `aborted`: this side aborted the connection (abort(), stack closed);
 * - `closed`: the operation needs a direction that is already closed;
 * - `no-memory`: the stack's pools or heap are exhausted;
 * - `too-many-connections`: MAX_CONNECTIONS / MAX_LISTENERS reached;
 * - `write-queue-full`: write() called with WRITE_QUEUE_LIMIT_BYTES already pending;
 * - `invalid-argument`: bad address, port or size;
 * - `address-in-use`: listen() on a taken port;
 * - `stack-failed`: the stack hit an internal assertion and stopped.
 */
export type NetstackErrorCode =
  | "refused"
  | "reset"
  | "timeout"
  | "aborted"
  | "closed"
  | "no-memory"
  | "too-many-connections"
  | "write-queue-full"
  | "invalid-argument"
  | "address-in-use"
  | "stack-failed";

/** A stack or connection failure with a stable code. */
export class NetstackError extends Error {
  constructor(
    readonly code: NetstackErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "NetstackError";
  }
}
