/**
 * The agent's control loop (spec "The agent protocol", "Transport",
 * "Sessions and epochs"): long-polls the scheduler through the control
 * channel port, opens a session (epoch) on the first poll, hands commands
 * to command intake and deliveries to the guest, and flushes observations
 * and acknowledgements through /v1/agents/messages, one send in flight.
 * Observations leave the outbox only once the scheduler accepted them.
 * configure_connection commands (PollResponse.connections) go to the host
 * endpoint's glue (src/agent/endpoint/agentConnections.ts), whose
 * acknowledgements ride with the other acks and whose connectivity_update
 * rides in AgentPayload.connectivity of the next envelope.
 * Must never: send observations before the session has an epoch, drop an
 * observation the scheduler has not accepted, or keep polling once stopped.
 */
import { BeachballError } from "../../protocol/errors.ts";
import {
  MAX_DELIVERY_ACKS_PER_ENVELOPE,
  type AgentPayload,
  type BootstrapDelivery,
  type CommandAck,
  type ConfigureConnection,
  type ConnectivityUpdate,
  type DeliveryAck,
  type PollResponse,
} from "../../protocol/agent.ts";
import type { AgentStore } from "../store.ts";
import { errorText, type AgentLog, type ControlChannel, type Timers } from "../ports.ts";
import type { HealthReport } from "../health.ts";
import { takeCommand } from "./commandIntake.ts";
import type { Clock } from "../../protocol/clock.ts";

/** Park requested per poll, ms (below the 30 s healthy-heartbeat bound). */
export const AGENT_POLL_WAIT_MS = 20_000;
/** Most observations or command acks per envelope. */
export const MAX_UPDATES_PER_SEND = 200;
/** First retry delay after a failed poll, ms (doubles up to POLL_BACKOFF_MAX_MS). */
export const POLL_BACKOFF_MIN_MS = 250;
/** Longest retry delay after failed polls, ms. */
export const POLL_BACKOFF_MAX_MS = 5_000;
/** Retry delay after a failed flush, ms. */
export const FLUSH_RETRY_MS = 500;

/** What the control loop works with. */
export interface ControlLoopDeps {
  channel: ControlChannel;
  store: AgentStore;
  clock: Clock;
  timers: Timers;
  log: AgentLog;
  /** The machine's boot ID (spec "Sessions and epochs"). */
  bootId: string;
  /** This host's ID: new placements' resource names carry its tag (resourceNames.ts). */
  hostId: string;
  health(): HealthReport;
  /** True while quarantined resources block every command but ensure_absent. */
  quarantined(): boolean;
  /** A command was persisted: drive its placement. */
  onCommand(placementId: string): void;
  /** Hands one delivery to the guest; resolves with the acknowledgement. */
  deliver(d: BootstrapDelivery): Promise<DeliveryAck>;
  /** Private networking (absent when this host runs no endpoint: its configure_connection commands are then rejected). */
  connections?: ConnectionControl;
}

/** What the control loop needs of the host endpoint's glue (AgentConnections). */
export interface ConnectionControl {
  /** Starts applying a command; resolves with its ack; null when it is being applied already. */
  take(cmd: ConfigureConnection): Promise<CommandAck> | null;
  /** The connectivity_update for the next envelope, or null. */
  pending(): ConnectivityUpdate | null;
  /** The envelope that carried the last update was not accepted. */
  failed(): void;
  /** A new session began: its first envelopes must carry an update. */
  changed(): void;
  hasPending(): boolean;
}

/** See the module header. */
export class ControlLoop {
  private epoch = "";
  private stopped = false;
  private acks: CommandAck[] = [];
  private deliveryAcks: DeliveryAck[] = [];
  private flushing: Promise<void> | null = null;
  private flushAgain = false;
  private loopDone: Promise<void> = Promise.resolve();
  private readonly pollAbort = new AbortController();

  constructor(private readonly deps: ControlLoopDeps) {}

  /** The current session epoch ("" before the first poll answered). */
  get agentEpoch(): string {
    return this.epoch;
  }

  /** Starts the poll loop. */
  start(): void {
    this.loopDone = this.pollLoop();
  }

  /** Stops polling and flushing: aborts the parked poll and any send in flight, and waits for the loop to end. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.pollAbort.abort();
    await this.loopDone.catch(() => undefined);
  }

  /**
   * After stop(): one last send of what the outbox and ack queues hold (all
   * of it true: nothing is recorded while the agent stops), bounded by
   * `timeoutMs`. Failures are left for the next start.
   */
  async finalFlush(timeoutMs: number): Promise<void> {
    if (!this.epoch) return;
    await this.flushing?.catch(() => undefined);
    const updates = this.deps.store.pendingUpdates(MAX_UPDATES_PER_SEND);
    if (!updates.length && !this.acks.length && !this.deliveryAcks.length) return;
    const abort = new AbortController();
    const cancel = this.deps.timers.after(timeoutMs, () => abort.abort());
    try {
      await this.deps.channel.send(
        "messages",
        this.epoch,
        {
          bootId: this.deps.bootId,
          updates,
          acks: this.acks.splice(0, MAX_UPDATES_PER_SEND),
          deliveryAcks: this.deliveryAcks.splice(0, MAX_DELIVERY_ACKS_PER_ENVELOPE),
          health: this.deps.health(),
        },
        abort.signal,
      );
      if (updates.length) this.deps.store.ackUpdates(updates[updates.length - 1]!.seq);
    } catch (e) {
      this.deps.log.warn("final flush failed (the next start sends it)", { error: errorText(e) });
    } finally {
      cancel();
    }
  }

  private async pollLoop(): Promise<void> {
    let backoffMs = POLL_BACKOFF_MIN_MS;
    let connectivity: ConnectivityUpdate | null = null;
    while (!this.stopped) {
      try {
        const updates = this.deps.store.pendingUpdates(MAX_UPDATES_PER_SEND);
        connectivity = this.epoch ? (this.deps.connections?.pending() ?? null) : null;
        const resp = await this.deps.channel.send(
          "poll",
          this.epoch,
          {
            bootId: this.deps.bootId,
            updates: this.epoch ? updates : [],
            acks: [],
            deliveryAcks: [],
            health: this.deps.health(),
            ...withConnectivity(connectivity),
            waitMs: AGENT_POLL_WAIT_MS,
          },
          this.pollAbort.signal,
        );
        connectivity = null;
        if (this.stopped) break;
        if (this.epoch && updates.length) this.deps.store.ackUpdates(updates[updates.length - 1]!.seq);
        if (resp.agentEpoch !== this.epoch) {
          this.deps.log.info("session opened", { epoch: `${resp.agentEpoch.slice(0, 8)}…` });
          this.deps.connections?.changed();
        }
        this.epoch = resp.agentEpoch;
        backoffMs = POLL_BACKOFF_MIN_MS;
        this.handlePoll(resp);
      } catch (e) {
        if (connectivity) this.deps.connections?.failed();
        connectivity = null;
        if (this.stopped) break;
        if (e instanceof BeachballError && e.code === "STALE_AGENT_EPOCH") this.epoch = "";
        else this.deps.log.warn("poll failed", { error: errorText(e) });
        await this.deps.timers.sleep(backoffMs, this.pollAbort.signal);
        backoffMs = Math.min(backoffMs * 2, POLL_BACKOFF_MAX_MS);
      }
    }
  }

  private handlePoll(resp: PollResponse): void {
    const { store, clock } = this.deps;
    store.applyLeases(resp.leases);
    for (const cmd of resp.commands) {
      const r = takeCommand(store, this.deps.hostId, cmd, resp.agentEpoch, this.deps.quarantined(), clock.wallMs());
      if (r.ack) this.acks.push(r.ack);
      if (r.drive) this.deps.onCommand(cmd.placementId);
    }
    for (const d of resp.deliveries) {
      void this.deps.deliver(d).then((ack) => {
        this.deliveryAcks.push(ack);
        this.flush();
      });
    }
    for (const c of resp.connections ?? []) {
      const conn = this.deps.connections;
      if (!conn) {
        this.acks.push({ commandId: c.commandId, result: "rejected", errorCode: "NETWORK_SETUP_FAILED" });
        continue;
      }
      void conn.take(c)?.then((ack) => {
        this.acks.push(ack);
        this.flush();
      });
    }
    if (
      resp.commands.length ||
      (resp.connections?.length && !this.deps.connections) ||
      this.deps.connections?.hasPending()
    )
      this.flush();
  }

  /** True when observations or acknowledgements wait to be sent. */
  hasPending(): boolean {
    return (
      this.acks.length > 0 ||
      this.deliveryAcks.length > 0 ||
      this.deps.store.hasPendingUpdates() ||
      (!!this.epoch && !!this.deps.connections?.hasPending())
    );
  }

  /** Sends pending observations and acks through /v1/agents/messages (one send in flight; retried until accepted). */
  flush(): void {
    if (this.flushing) {
      this.flushAgain = true;
      return;
    }
    this.flushing = (async () => {
      do {
        this.flushAgain = false;
        if (!this.epoch || this.stopped) break;
        const updates = this.deps.store.pendingUpdates(MAX_UPDATES_PER_SEND);
        const acks = this.acks.splice(0, MAX_UPDATES_PER_SEND);
        const deliveryAcks = this.deliveryAcks.splice(0, MAX_DELIVERY_ACKS_PER_ENVELOPE);
        const connectivity = this.deps.connections?.pending() ?? null;
        if (!updates.length && !acks.length && !deliveryAcks.length && !connectivity) break;
        try {
          // Aborted by stop(): finalFlush then sends once, within its own bound.
          await this.deps.channel.send(
            "messages",
            this.epoch,
            {
              bootId: this.deps.bootId,
              updates,
              acks,
              deliveryAcks,
              health: this.deps.health(),
              ...withConnectivity(connectivity),
            },
            this.pollAbort.signal,
          );
          if (updates.length) this.deps.store.ackUpdates(updates[updates.length - 1]!.seq);
        } catch (e) {
          if (connectivity) this.deps.connections?.failed();
          this.acks.unshift(...acks);
          this.deliveryAcks.unshift(...deliveryAcks);
          if (e instanceof BeachballError && e.code === "STALE_AGENT_EPOCH") this.epoch = "";
          await this.deps.timers.sleep(FLUSH_RETRY_MS, this.pollAbort.signal);
          this.flushAgain = !this.stopped;
        }
      } while (this.flushAgain);
    })().finally(() => {
      this.flushing = null;
    });
  }
}

/** The payload field carrying `u`, or nothing. */
function withConnectivity(u: ConnectivityUpdate | null): Pick<AgentPayload, "connectivity"> {
  return u ? { connectivity: u } : {};
}
