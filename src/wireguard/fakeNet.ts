/**
 * A test double of the datagram transport: an in-memory network joining
 * Devices by name, with a queue the test pumps explicitly, a log of every
 * frame, and a filter to drop or hold frames. Used with FakeClock to run
 * handshakes, rekeys and restarts deterministically in-process.
 *
 * Owns: nothing in production. Must never: be used outside tests.
 */
import type { Device, DeviceIo, Peer } from "./device.ts";
import type { Endpoint } from "./peer.ts";

/** An in-memory endpoint: the name of the attached Device. */
export interface MemEndpoint extends Endpoint {
  readonly key: string;
}

/** One datagram on the in-memory network. */
export interface Frame {
  from: string;
  to: string;
  bytes: Uint8Array;
}

/** A delivered IP packet with the public key (base64) of the peer it came from. */
export interface Delivered {
  packet: Uint8Array;
  peer: string;
}

/** The in-memory network. */
export class MemoryNet {
  private readonly devices = new Map<string, Device<MemEndpoint>>();
  /** Frames waiting for pump(). */
  readonly queue: Frame[] = [];
  /** Every frame ever sent, in order. */
  readonly log: Frame[] = [];
  /** Packets each Device delivered, by Device name. */
  readonly delivered = new Map<string, Delivered[]>();
  /** Decides per frame at pump time: "pass" (default), "drop", or "hold" (kept in `held`). */
  filter: (f: Frame) => "pass" | "drop" | "hold" = () => "pass";
  /** Frames the filter held back. */
  readonly held: Frame[] = [];

  /** The endpoint value for a Device name. */
  endpoint(name: string): MemEndpoint {
    return { key: name };
  }

  /** The DeviceIo for the Device that will be attached as `name`. */
  io(name: string): DeviceIo<MemEndpoint> {
    this.delivered.set(name, []);
    return {
      sendDatagram: (bytes: Uint8Array, to: MemEndpoint) => {
        const f = { from: name, to: to.key, bytes };
        this.queue.push(f);
        this.log.push(f);
      },
      deliverPacket: (packet: Uint8Array, peer: Peer<MemEndpoint>) => {
        this.delivered.get(name)!.push({ packet, peer: Buffer.from(peer.remote.publicKey).toString("base64") });
      },
    };
  }

  /** Attaches (or replaces, as after a restart) the Device named `name`. */
  attach(name: string, device: Device<MemEndpoint>): void {
    this.devices.set(name, device);
  }

  /** Injects a datagram as if `from` had sent it. */
  inject(from: string, to: string, bytes: Uint8Array): void {
    this.devices.get(to)?.receiveDatagram(bytes, this.endpoint(from));
  }

  /** Delivers queued frames (and those they cause) until the queue is empty or `maxFrames` were handled. Returns how many. */
  pump(maxFrames = 10_000): number {
    let n = 0;
    while (this.queue.length > 0 && n < maxFrames) {
      const f = this.queue.shift()!;
      n++;
      const verdict = this.filter(f);
      if (verdict === "drop") continue;
      if (verdict === "hold") {
        this.held.push(f);
        continue;
      }
      this.devices.get(f.to)?.receiveDatagram(f.bytes, this.endpoint(f.from));
    }
    return n;
  }
}
