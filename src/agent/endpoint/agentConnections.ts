/**
 * The agent's half of private networking in the control protocol (spec "The
 * agent protocol": configure_connection, connectivity_update): hands each
 * configure_connection from a poll response (PollResponse.connections) to
 * the host endpoint, turns its outcome into the command's acknowledgement,
 * and keeps the connectivity_update (AgentPayload.connectivity) the next
 * envelope carries: sent when something it reports changed, again after a
 * failed send, and once at the start of every session.
 *
 * Owns: the set of commands being applied (a redelivery of one in flight is
 * not applied twice), the update's sequence number (strictly increasing for
 * the whole process, so within each session too) and whether one is due.
 * Must never: acknowledge a revoke before the endpoint removed the peer (the
 * scheduler takes the acknowledgement as proof that it is gone), report the
 * private key, or hold more than MAX_CONNECTION_COMMANDS_IN_FLIGHT commands.
 */
import { AGENT_ERROR_CODES, type AgentErrorCode } from "../../protocol/errors.ts";
import type { CommandAck, ConfigureConnection, ConnectivityUpdate } from "../../protocol/agent.ts";
import type { ConfigureResult } from "./endpoint.ts";
import type { Clock } from "../../protocol/clock.ts";

/** Most configure_connection commands applied at once; a redelivery past it waits for the next poll. */
export const MAX_CONNECTION_COMMANDS_IN_FLIGHT = 64;

/**
 * The host endpoint as the agent drives it (HostEndpoint in production, a
 * fake in unit tests and the simulation).
 */
export interface ConnectionEndpointPort {
  /** Applies or revokes one grant; never rejects (a refusal is a result with a stable code). */
  configure(cmd: ConfigureConnection): Promise<ConfigureResult>;
  /** What a connectivity_update reports now, without `seq` and `at`. */
  connectivity(): Omit<ConnectivityUpdate, "seq" | "at">;
  /** Drops every grant whose placement is gone from this host or was replaced (a grant never spans a replacement). Never rejects. */
  prune(): Promise<void>;
  /** Removes every grant and closes the socket. Never rejects. */
  close(): Promise<void>;
}

const AGENT_CODES: ReadonlySet<string> = new Set(AGENT_ERROR_CODES);

/**
 * The acknowledgement of `cmd` after `result`: "accepted" when applied (or
 * revoked), else "rejected" with the refusal's code when it is an agent
 * error code (STALE_GENERATION, NETWORK_SETUP_FAILED); every refusal's own
 * code also travels in connectivity_update.refusedGrants. Pure.
 */
export function connectionAck(cmd: ConfigureConnection, result: ConfigureResult): CommandAck {
  if (result.ok) return { commandId: cmd.commandId, result: "accepted" };
  return {
    commandId: cmd.commandId,
    result: "rejected",
    ...(AGENT_CODES.has(result.code) ? { errorCode: result.code as AgentErrorCode } : {}),
  };
}

/** See the module header. */
export class AgentConnections {
  private seq = 0;
  private due = true;
  private readonly inFlight = new Set<string>();

  constructor(
    private readonly endpoint: ConnectionEndpointPort,
    private readonly clock: Clock,
  ) {}

  /**
   * Starts applying one configure_connection; resolves with its
   * acknowledgement. Null when the same command is being applied already,
   * or MAX_CONNECTION_COMMANDS_IN_FLIGHT are (the scheduler redelivers it).
   */
  take(cmd: ConfigureConnection): Promise<CommandAck> | null {
    if (this.inFlight.has(cmd.commandId) || this.inFlight.size >= MAX_CONNECTION_COMMANDS_IN_FLIGHT) return null;
    this.inFlight.add(cmd.commandId);
    return this.endpoint
      .configure(cmd)
      .then((r) => connectionAck(cmd, r))
      .finally(() => this.inFlight.delete(cmd.commandId));
  }

  /** Something the update reports changed: send one with the next envelope. */
  changed(): void {
    this.due = true;
  }

  /** The update the next envelope carries, or null when nothing changed since the last one sent. */
  pending(): ConnectivityUpdate | null {
    if (!this.due) return null;
    this.due = false;
    return { seq: ++this.seq, ...this.endpoint.connectivity(), at: new Date(this.clock.wallMs()).toISOString() };
  }

  /** The envelope carrying the last update was not accepted: send a fresh one with the next. */
  failed(): void {
    this.due = true;
  }

  /** True when an update waits to be sent. */
  hasPending(): boolean {
    return this.due;
  }

  /** Placements changed: drop grants whose placement is gone or replaced. Never rejects. */
  placementsChanged(): Promise<void> {
    return this.endpoint.prune();
  }

  /** Closes the endpoint (every grant removed). Never rejects. */
  close(): Promise<void> {
    return this.endpoint.close();
  }
}
