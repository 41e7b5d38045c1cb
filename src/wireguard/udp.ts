/**
 * A Device on one UDP socket (Bun.udpSocket): the real transport for hosts,
 * clients and tests in network namespaces (whitepaper §2.1: WireGuard runs
 * over UDP; the endpoint roams to the last authenticated source).
 *
 * Owns: the socket (with 7 MiB receive and send buffers where allowed, as
 * wireguard-go does), endpoint values ("192.0.2.1:51820", "[fd00::1]:51820"),
 * and the DeviceTimerDriver on the process clock. Must never: throw from a
 * socket callback (the Device drops and counts), or keep the socket or timer
 * open after close().
 */
import { setSocketBuffers, udpSocketFd, type SocketBuffers } from "../../native/sockbuf/sockbuf.ts";
import type { Aead } from "./aead/aead.ts";
import { Device, type DeviceIo, type Peer } from "./device.ts";
import type { WgLimits } from "./limits.ts";
import type { LoadPolicy } from "./load.ts";
import type { Endpoint } from "./peer.ts";
import { systemSuspendAwareClock, systemRandom, type WgRandom } from "./ports.ts";
import { DeviceTimerDriver } from "./timerDriver.ts";
import type { Clock } from "../protocol/clock.ts";

/** A UDP address. */
export interface UdpEndpoint extends Endpoint {
  readonly address: string;
  readonly port: number;
}

/** The endpoint value for an address and port; the key brackets IPv6 addresses. */
export function udpEndpoint(address: string, port: number): UdpEndpoint {
  return { address, port, key: address.includes(":") ? `[${address}]:${port}` : `${address}:${port}` };
}

/** Options of startUdpDevice. */
export interface UdpDeviceOptions {
  privateKey: Uint8Array;
  aead: Aead;
  /** Local address to bind, e.g. "0.0.0.0", "::" or one interface address. */
  hostname: string;
  /** Local UDP port; 0 picks one. */
  port: number;
  /** Called with each decrypted IP packet. */
  onPacket: (packet: Uint8Array, peer: Peer<UdpEndpoint>) => void;
  clock?: Clock;
  random?: WgRandom;
  load?: LoadPolicy;
  limits?: WgLimits;
}

/** A running UDP Device. */
export interface UdpDevice {
  readonly device: Device<UdpEndpoint>;
  /** The bound port. */
  readonly port: number;
  /** The socket's buffers after asking for wireguard-go's 7 MiB each way (native/sockbuf/sockbuf.ts). */
  readonly socketBuffers: SocketBuffers;
  /** Sends an IP packet into the tunnel (routed by destination). */
  sendPacket(packet: Uint8Array): void;
  /** Starts a handshake with `peer` now. */
  initiateHandshake(peer: Peer<UdpEndpoint>): void;
  /** Re-arms the timer after the caller changed peers directly. */
  poke(): void;
  /** Closes the socket and stops the timer. */
  close(): void;
}

/** Binds the socket and starts the Device. Rejects when the address cannot be bound. */
export async function startUdpDevice(o: UdpDeviceOptions): Promise<UdpDevice> {
  const clock = o.clock ?? systemSuspendAwareClock;
  let socket: Bun.udp.Socket<"uint8array"> | null = null;
  const io: DeviceIo<UdpEndpoint> = {
    sendDatagram: (datagram, to) => {
      socket?.send(datagram, to.port, to.address);
    },
    deliverPacket: (packet, peer) => o.onPacket(packet, peer),
  };
  const device = new Device<UdpEndpoint>({
    privateKey: o.privateKey,
    clock,
    random: o.random ?? systemRandom,
    aead: o.aead,
    io,
    ...(o.load ? { load: o.load } : {}),
    ...(o.limits ? { limits: o.limits } : {}),
  });
  const driver = new DeviceTimerDriver(device, clock);
  const bound = await Bun.udpSocket({
    hostname: o.hostname,
    port: o.port,
    binaryType: "uint8array",
    socket: {
      data(_s, buf, port, address) {
        device.receiveDatagram(buf, udpEndpoint(address, port));
        driver.poke();
      },
    },
  });
  socket = bound;
  // The default ≈ 208 KiB overflows when many flows inside the tunnel burst at once.
  const socketBuffers = setSocketBuffers(udpSocketFd(bound));
  return {
    device,
    port: bound.port,
    socketBuffers,
    sendPacket(packet) {
      device.sendPacket(packet);
      driver.poke();
    },
    initiateHandshake(peer) {
      device.initiateHandshake(peer);
      driver.poke();
    },
    poke: () => driver.poke(),
    close() {
      driver.stop();
      bound.close();
      socket = null;
    },
  };
}
