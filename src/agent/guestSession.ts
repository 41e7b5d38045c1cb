/**
 * The host side of the guest control protocol (spec "Guest handshake", "One
 * allocation end to end"): accepts GuestReady only on an exact identity and
 * nonce match, proves the reverse direction with a ping, hands a bootstrap
 * payload over in memory, hands the guest's control service the connection
 * verification keys (`control_config`, guestControlConfig.ts), and relays
 * workload events.
 * Must never: log, persist or re-send payload bytes.
 */
import {
  GUEST_CLOCK_SYNC_INTERVAL_MS,
  NdjsonDecoder,
  encodeGuestMessage,
  type GuestIdentity,
  type GuestToHost,
  type HostToGuest,
} from "../protocol/guest.ts";
import type { GuestChannel } from "./vmm/driver.ts";
import { systemTimers, type Timers } from "./ports.ts";
import type { Clock } from "../protocol/clock.ts";
import { controlConfigMessage } from "./guestControlConfig.ts";
import type { RestoredMessage } from "../protocol/guestRestored.ts";

/** Result of a delivery to the guest. */
export type GuestDeliveryResult =
  | { result: "consumed"; digest: string }
  | { result: "rejected" | "guest_not_connected" };

/** How often a waiting host repeats `identify`, ms. */
export const ASK_INTERVAL_MS = 2_000;

type Waiter = { match: (m: GuestToHost) => boolean; resolve: (m: GuestToHost) => void };

/** One connected guest. */
export class GuestSession {
  private readonly decoder = new NdjsonDecoder();
  private readonly waiters = new Set<Waiter>();
  private closed = false;
  private pings = 0;
  private stopClock: (() => void) | null = null;
  /** Called with the workload's exit code. */
  onWorkloadExit: (code: number) => void = () => {};
  /** Called once when the channel closes. */
  onClose: () => void = () => {};

  /** `timers` bound every wait (the real timers by default). */
  constructor(
    private readonly channel: GuestChannel,
    private readonly expected: GuestIdentity,
    private readonly timers: Timers = systemTimers,
  ) {
    channel.onData((chunk) => {
      let msgs: Record<string, unknown>[];
      try {
        msgs = this.decoder.push(chunk).messages;
      } catch {
        this.close();
        return;
      }
      for (const m of msgs) this.dispatch(m as unknown as GuestToHost);
    });
    channel.onClose(() => {
      this.closed = true;
      for (const w of this.waiters) w.resolve({ type: "shutting_down" });
      this.waiters.clear();
      this.onClose();
    });
  }

  /** True while the channel is open. */
  get connected(): boolean {
    return !this.closed;
  }

  private dispatch(m: GuestToHost): void {
    if (m.type === "workload_exited" && Number.isInteger(m.exitCode)) this.onWorkloadExit(m.exitCode);
    for (const w of [...this.waiters]) {
      if (w.match(m)) {
        this.waiters.delete(w);
        w.resolve(m);
      }
    }
  }

  private send(m: HostToGuest): void {
    if (!this.closed) this.channel.send(encodeGuestMessage(m));
  }

  private waitFor(match: (m: GuestToHost) => boolean, timeoutMs: number): Promise<GuestToHost | null> {
    if (this.closed) return Promise.resolve(null);
    return new Promise((resolve) => {
      const w: Waiter = {
        match,
        resolve: (m) => {
          cancel();
          resolve(m.type === "shutting_down" && !match(m) ? null : m);
        },
      };
      const cancel = this.timers.after(timeoutMs, () => {
        this.waiters.delete(w);
        resolve(null);
      });
      this.waiters.add(w);
    });
  }

  /**
   * Waits for a GuestReady whose identity and nonce match exactly; false on
   * timeout or close. With `ask`, sends `identify` every ASK_INTERVAL_MS
   * meanwhile (for a guest that booted while no agent was listening).
   */
  async waitReady(timeoutMs: number, ask = false): Promise<boolean> {
    const e = this.expected;
    const stopAsking = ask ? this.timers.every(ASK_INTERVAL_MS, () => this.send({ type: "identify" })) : null;
    if (ask) this.send({ type: "identify" });
    const m = await this.waitFor(
      (x) =>
        x.type === "guest_ready" &&
        x.allocationId === e.allocationId &&
        x.placementId === e.placementId &&
        x.generation === e.generation &&
        x.nonce === e.nonce,
      timeoutMs,
    ).finally(() => stopAsking?.());
    if (!m) return false;
    this.send({ type: "ready_ack" });
    return true;
  }

  /** Pings the guest; true if it answered within `timeoutMs`. */
  async ping(timeoutMs: number): Promise<boolean> {
    const id = `p${++this.pings}`;
    const reply = this.waitFor((x) => x.type === "pong" && x.id === id, timeoutMs);
    this.send({ type: "ping", id });
    return (await reply) !== null;
  }

  /** Hands a payload to the guest and waits for its consumption receipt. */
  async deliver(
    deliveryId: string,
    contentType: string,
    dataBase64: string,
    timeoutMs: number,
  ): Promise<GuestDeliveryResult> {
    if (this.closed) return { result: "guest_not_connected" };
    const reply = this.waitFor(
      (x) => (x.type === "bootstrap_consumed" || x.type === "bootstrap_rejected") && x.deliveryId === deliveryId,
      timeoutMs,
    );
    this.send({ type: "bootstrap", deliveryId, contentType, dataBase64 });
    const m = await reply;
    if (!m) return { result: "guest_not_connected" };
    return m.type === "bootstrap_consumed" ? { result: "consumed", digest: m.digest } : { result: "rejected" };
  }

  /**
   * Sends `control_config` with `keys` (key ID → base64 Ed25519 public key),
   * checked against its schema first; the guest's newest message replaces
   * the keys before it. Nothing is sent on a closed channel. Throws
   * AgentError INTERNAL when the schema refuses the keys (guestControlConfig.ts).
   */
  configureControl(keys: Readonly<Record<string, string>>): void {
    this.send(controlConfigMessage(keys));
  }

  /**
   * Sends the host's wall clock (`clock`, `clock.wallMs()` ms since the epoch) now and every
   * GUEST_CLOCK_SYNC_INTERVAL_MS until the channel closes, so the guest's clock (which the control
   * service checks grant freshness on) never drifts far from the host's. A second call replaces the first.
   */
  keepClock(clock: Clock): void {
    this.stopClock?.();
    const tick = () => {
      if (this.closed) this.stopClock?.();
      else this.send({ type: "clock", wallClockMs: Math.round(clock.wallMs()) });
    };
    this.stopClock = this.timers.every(GUEST_CLOCK_SYNC_INTERVAL_MS, tick);
    tick();
  }

  /**
   * Sends a restored VM its `restored` message (src/agent/guestRestored.ts,
   * issue 21): new identity and nonce (this session's expected identity),
   * entropy and wall clock. The guest answers with a fresh guest_ready:
   * call waitReady next.
   */
  restored(message: RestoredMessage): void {
    if (!this.closed) this.channel.send(encodeGuestMessage(message as unknown as HostToGuest));
  }

  /** Asks the guest to sync and power off. */
  shutdown(): void {
    this.send({ type: "shutdown" });
  }

  /** Closes the channel. */
  close(): void {
    if (!this.closed) this.channel.close();
    this.closed = true;
    this.stopClock?.();
    this.stopClock = null;
  }
}
