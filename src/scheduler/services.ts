/**
 * In-memory services shared by the scheduler's objects within one process:
 * poll wake-ups and the bootstrap delivery hub. Nothing here is persisted:
 * a bootstrap payload exists only in this memory (spec "One allocation end
 * to end"), and a lost wake-up only delays a poll until its park expires.
 */
import type { BootstrapDelivery } from "../protocol/agent.ts";
import type { DeploymentManifest } from "./manifest.ts";
import type { TimeoutPolicy } from "../domain/allocation.ts";
import type { Clock, Randomness } from "./runtime/ports.ts";
import type { Metrics } from "./metrics.ts";

/** Most deliveries held in memory per host at once. */
export const MAX_PENDING_DELIVERIES_PER_HOST = 64;

/** Wakes parked polls of a host. */
export class HostSignals {
  private readonly waiters = new Map<string, Set<() => void>>();
  /** Resolves after `ms` or when `notify(hostId)` is called, whichever is first. */
  wait(hostId: string, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const set = this.waiters.get(hostId) ?? new Set();
      this.waiters.set(hostId, set);
      const done = () => {
        clearTimeout(timer);
        set.delete(done);
        if (set.size === 0) this.waiters.delete(hostId);
        resolve();
      };
      const timer = setTimeout(done, ms);
      set.add(done);
    });
  }
  /** Wakes every poll parked for `hostId`. */
  notify(hostId: string): void {
    for (const w of [...(this.waiters.get(hostId) ?? [])]) w();
  }
  /** Wakes every parked poll (shutdown). */
  notifyAll(): void {
    for (const id of [...this.waiters.keys()]) this.notify(id);
  }
}

/** The outcome of one delivery as the controller sees it. */
export type DeliveryOutcome = { result: "consumed"; digest: string } | { result: "guest_not_connected" | "rejected" | "timeout" };

interface Pending {
  delivery: BootstrapDelivery;
  handedOut: boolean;
  settle: (o: DeliveryOutcome) => void;
}

/** Holds bootstrap payloads in memory until the agent acknowledges them. */
export class DeliveryHub {
  private readonly byHost = new Map<string, Map<string, Pending>>();

  /**
   * Parks a delivery for `hostId` and resolves with its outcome, or
   * `timeout` after `timeoutMs`. Throws Error("TOO_MANY_DELIVERIES") past the bound.
   */
  offer(hostId: string, delivery: BootstrapDelivery, timeoutMs: number): Promise<DeliveryOutcome> {
    const map = this.byHost.get(hostId) ?? new Map<string, Pending>();
    this.byHost.set(hostId, map);
    if (map.has(delivery.deliveryId)) return Promise.resolve({ result: "rejected" });
    if (map.size >= MAX_PENDING_DELIVERIES_PER_HOST) throw new Error("TOO_MANY_DELIVERIES");
    return new Promise((resolve) => {
      const timer = setTimeout(() => finish({ result: "timeout" }), timeoutMs);
      const finish = (o: DeliveryOutcome) => {
        clearTimeout(timer);
        if (map.get(delivery.deliveryId)?.settle === finish) map.delete(delivery.deliveryId);
        resolve(o);
      };
      map.set(delivery.deliveryId, { delivery, handedOut: false, settle: finish });
    });
  }

  /** Deliveries not yet handed to the agent for `hostId` (each is handed out once per poll). */
  take(hostId: string): BootstrapDelivery[] {
    const out: BootstrapDelivery[] = [];
    for (const p of this.byHost.get(hostId)?.values() ?? []) {
      if (p.handedOut) continue;
      p.handedOut = true;
      out.push(p.delivery);
    }
    return out;
  }

  /** True if deliveries are waiting to be handed out. */
  hasWork(hostId: string): boolean {
    for (const p of this.byHost.get(hostId)?.values() ?? []) if (!p.handedOut) return true;
    return false;
  }

  /** Settles a delivery with the agent's acknowledgement. */
  settle(hostId: string, deliveryId: string, outcome: DeliveryOutcome): void {
    this.byHost.get(hostId)?.get(deliveryId)?.settle(outcome);
  }

  /** Re-offers handed-out deliveries after an agent session change (the old session may have lost them). */
  rearm(hostId: string): void {
    for (const p of this.byHost.get(hostId)?.values() ?? []) p.handedOut = false;
  }
}

/** Everything scheduler objects receive through `ctx.services`. */
export interface SchedulerServices {
  hostSignals: HostSignals;
  deliveries: DeliveryHub;
  manifest: DeploymentManifest;
  timeouts: TimeoutPolicy;
  clock: Clock;
  random: Randomness;
  metrics: Metrics;
  /**
   * Deliberately injected bugs, for proving that the simulation catches them
   * (unstable; never set in production). `releaseCapacityOnLeaseExpiry`
   * frees a placement's capacity when its lease expired, without observing
   * absence: the very rule the spec forbids.
   */
  debug: { releaseCapacityOnLeaseExpiry?: boolean };
}
