/**
 * The Host object's memory-only mailbox for its agent (spec "One allocation
 * end to end", "The agent protocol"): the agent's parked polls and the
 * bootstrap deliveries waiting to be handed out. A payload lives here, in
 * this instance's memory, until the agent acknowledges it or its wait ends;
 * it is never written. Bounded by MAX_PARKED_POLLS and
 * MAX_PENDING_DELIVERIES_PER_HOST.
 * Must never: store a payload, or hand one delivery out twice in one session.
 */
import type { Clock } from "../../protocol/clock.ts";
import { BeachballError } from "../../protocol/errors.ts";
import type { BootstrapDelivery, Envelope } from "../../protocol/agent.ts";
import type { DeliveryOutcome } from "./hostTypes.ts";

/** Most deliveries held in memory per host at once. */
export const MAX_PENDING_DELIVERIES_PER_HOST = 64;
/** Most polls of one host parked at once (a reconnecting agent may briefly have two). */
export const MAX_PARKED_POLLS = 8;

interface PendingDelivery {
  delivery: BootstrapDelivery;
  handedOut: boolean;
  settle: (o: DeliveryOutcome) => void;
}

/** One agent's acknowledgement of a delivery. */
export type DeliveryAck = Envelope["payload"]["deliveryAcks"][number];

/** See the module header. One per Host instance; `clock` is the scheduler's (wake times are wall ms). */
export class HostMailbox {
  /** Parked polls of this host's agent: each resolves when woken or after its park. */
  private readonly parked = new Set<(wokenAtMs: number | null) => void>();
  /** Bootstrap deliveries waiting for the agent, by delivery ID (memory only). */
  private readonly deliveries = new Map<string, PendingDelivery>();
  /** True once the host stops: polls no longer park. */
  draining = false;

  constructor(private readonly clock: Clock) {}

  /** Parks until woken (resolves with the wake time, ms) or `ms` passes (resolves null). */
  park(ms: number): Promise<number | null> {
    if (this.parked.size >= MAX_PARKED_POLLS) return Promise.resolve(null);
    return new Promise((resolve) => {
      const done = (wokenAtMs: number | null) => {
        clearTimeout(timer);
        this.parked.delete(done);
        resolve(wokenAtMs);
      };
      const timer = setTimeout(() => done(null), ms);
      this.parked.add(done);
    });
  }

  /** Wakes every parked poll of this host. */
  wakePolls(): void {
    const now = this.clock.wallMs();
    for (const w of [...this.parked]) w(now);
  }

  /** Ends parked polls at once and keeps new ones from parking. */
  drain(): void {
    this.draining = true;
    this.wakePolls();
  }

  /** True if a delivery waits to be handed out. */
  hasUnsent(): boolean {
    for (const p of this.deliveries.values()) if (!p.handedOut) return true;
    return false;
  }

  /** The deliveries not yet handed out, marked as handed out (each rides in one poll response per session). */
  handOut(): BootstrapDelivery[] {
    const out: BootstrapDelivery[] = [];
    for (const p of this.deliveries.values()) {
      if (p.handedOut) continue;
      p.handedOut = true;
      out.push(p.delivery);
    }
    return out;
  }

  /** A new agent session: every waiting delivery goes out again (the old process may have lost it). */
  resendAll(): void {
    for (const p of this.deliveries.values()) p.handedOut = false;
  }

  /** Settles the waiting delivery the agent acknowledged (a consumed one with its `digest`). */
  settle(d: DeliveryAck): void {
    if (d.result === "consumed" && d.digest) {
      this.deliveries.get(d.deliveryId)?.settle({ result: "consumed", digest: d.digest });
    } else {
      this.deliveries
        .get(d.deliveryId)
        ?.settle({ result: d.result === "guest_not_connected" ? "guest_not_connected" : "rejected" });
    }
  }

  /**
   * Holds `delivery` for the agent's next poll and resolves with the agent's
   * acknowledgement, or `timeout` after `timeoutMs`. A delivery ID already
   * waiting is `rejected`. Throws RATE_LIMITED past MAX_PENDING_DELIVERIES_PER_HOST.
   */
  deliver(delivery: BootstrapDelivery, timeoutMs: number): Promise<DeliveryOutcome> {
    if (this.deliveries.has(delivery.deliveryId)) return Promise.resolve({ result: "rejected" });
    if (this.deliveries.size >= MAX_PENDING_DELIVERIES_PER_HOST)
      throw new BeachballError("RATE_LIMITED", "too many deliveries in flight for this host", { retryAfterSeconds: 5 });
    const outcome = new Promise<DeliveryOutcome>((resolve) => {
      const timer = setTimeout(() => finish({ result: "timeout" }), timeoutMs);
      const finish = (o: DeliveryOutcome) => {
        clearTimeout(timer);
        if (this.deliveries.get(delivery.deliveryId)?.settle === finish) this.deliveries.delete(delivery.deliveryId);
        resolve(o);
      };
      this.deliveries.set(delivery.deliveryId, { delivery, handedOut: false, settle: finish });
    });
    this.wakePolls();
    return outcome;
  }
}
