/**
 * Transport sessions ("keypairs") and their rotation (whitepaper §5.4.5
 * "Transport Data Key Derivation", §6.1–§6.3 limits; rotation as in the Linux
 * module and wireguard-go): each peer keeps `current` (used to send),
 * `previous` (still accepted, for packets in flight) and `next` (a
 * responder's new session, confirmed by the first packet received on it).
 *
 * Owns: a session's keys, sending counter, replay window and age; the
 * three-slot rotation. Must never: hand out a sending counter at or past
 * REJECT_AFTER_MESSAGES, or keep a session's keys after it is dropped.
 */
import { REJECT_AFTER_MESSAGES } from "./constants.ts";
import { wipe } from "./hash.ts";
import type { SessionKeys } from "./noise.ts";
import { ReplayWindow } from "./replay.ts";

/** One transport session. */
export class Keypair {
  readonly sendKey: Uint8Array;
  readonly receiveKey: Uint8Array;
  readonly isInitiator: boolean;
  /** Our index: transport messages to us carry it as receiver. */
  readonly localIndex: number;
  /** The peer's index: we put it in transport messages we send. */
  readonly remoteIndex: number;
  /** Monotonic ms when the handshake that made it finished. */
  readonly createdMs: number;
  /** Next counter to send with (the whitepaper's N_send). */
  sendCounter = 0;
  readonly replay = new ReplayWindow();

  constructor(keys: SessionKeys, createdMs: number) {
    this.sendKey = keys.sendKey;
    this.receiveKey = keys.receiveKey;
    this.isInitiator = keys.isInitiator;
    this.localIndex = keys.localIndex;
    this.remoteIndex = keys.remoteIndex;
    this.createdMs = createdMs;
  }

  /** Takes the next sending counter, or null when the session has used up REJECT_AFTER_MESSAGES. */
  takeCounter(): number | null {
    if (this.sendCounter >= REJECT_AFTER_MESSAGES) return null;
    return this.sendCounter++;
  }

  /** Overwrites the keys (called when the session leaves every slot). */
  destroy(): void {
    wipe(this.sendKey);
    wipe(this.receiveKey);
  }
}

/** A peer's three session slots. `onDrop` is told of every session that leaves them (to free its index). */
export class Keypairs {
  previous: Keypair | null = null;
  current: Keypair | null = null;
  next: Keypair | null = null;

  constructor(private readonly onDrop: (k: Keypair) => void) {}

  private drop(k: Keypair | null): void {
    if (!k) return;
    this.onDrop(k);
    k.destroy();
  }

  /**
   * Installs a new session. As initiator it becomes current at once (the
   * response proved the peer has it); as responder it waits in `next` until
   * the initiator's first transport message arrives on it.
   */
  install(k: Keypair): void {
    if (k.isInitiator) {
      const old = this.previous;
      if (this.next) {
        this.previous = this.next;
        this.next = null;
        this.drop(this.current);
      } else {
        this.previous = this.current;
      }
      this.drop(old);
      this.current = k;
    } else {
      const oldNext = this.next;
      const oldPrevious = this.previous;
      this.next = k;
      this.previous = null;
      this.drop(oldNext);
      this.drop(oldPrevious);
    }
  }

  /** Called after a packet authenticated on `k`: promotes `next` to current. Returns true when it did. */
  confirm(k: Keypair): boolean {
    if (k !== this.next) return false;
    const old = this.previous;
    this.previous = this.current;
    this.current = k;
    this.next = null;
    this.drop(old);
    return true;
  }

  /** Drops every session (zero key material, whitepaper §6.3 / REJECT_AFTER_TIME × 3). */
  clear(): void {
    const all = [this.previous, this.current, this.next];
    this.previous = this.current = this.next = null;
    for (const k of all) this.drop(k);
  }
}
