/**
 * Path selection between two MultipathDevices over an in-memory network on a
 * fake clock: the "client" knows the host's candidates (one unreachable
 * local address, one reachable public one) and a relay that always works;
 * the direct path can be blocked and unblocked.
 */
import { describe, expect, test } from "bun:test";
import { nobleAead } from "./aead/noble.ts";
import { FakeClock, SeededRandom, testPacket as packet } from "./fakes.ts";
import { MultipathDevice } from "./multipath.ts";
import { relayPath, udpPath, type PathEndpoint, type PathIo } from "./paths.ts";
import type { Peer } from "./device.ts";

const CLIENT_PUBLIC = { address: "198.51.100.10", port: 40000 };
const HOST_LOCAL = { address: "10.2.0.2", port: 51820 };
const HOST_PUBLIC = { address: "198.51.100.20", port: 51820 };

function world(seed: number) {
  const clock = new FakeClock();
  const rng = new SeededRandom(seed);
  const aead = nobleAead();
  const queue: Array<() => void> = [];
  let directOpen = true;
  const relayLog: string[] = [];
  const got = { client: [] as number[], host: [] as number[] };
  let client!: MultipathDevice;
  let host!: MultipathDevice;
  const clientIo: PathIo = {
    sendUdp: (d, address, port) => {
      const copy = d.slice();
      if (directOpen && address === HOST_PUBLIC.address && port === HOST_PUBLIC.port) queue.push(() => host.receive(copy, udpPath(CLIENT_PUBLIC.address, CLIENT_PUBLIC.port)));
    },
    sendRelay: (id, d) => {
      const copy = d.slice();
      relayLog.push("c");
      queue.push(() => host.receive(copy, relayPath(id)));
      return true;
    },
  };
  const hostIo: PathIo = {
    sendUdp: (d, address, port) => {
      const copy = d.slice();
      if (directOpen && address === CLIENT_PUBLIC.address && port === CLIENT_PUBLIC.port) queue.push(() => client.receive(copy, udpPath(HOST_PUBLIC.address, HOST_PUBLIC.port)));
    },
    sendRelay: (id, d) => {
      const copy = d.slice();
      relayLog.push("h");
      queue.push(() => client.receive(copy, relayPath(id)));
      return true;
    },
  };
  const num = (p: Uint8Array) => (p[40]! << 8) | p[41]!;
  const clientKey = rng.bytes(32);
  const hostKey = rng.bytes(32);
  client = new MultipathDevice({ privateKey: clientKey, clock, random: rng, aead, io: clientIo, deliver: (p) => got.client.push(num(p)) });
  host = new MultipathDevice({ privateKey: hostKey, clock, random: rng, aead, io: hostIo, deliver: (p) => got.host.push(num(p)) });
  const c = client.addPeer({ publicKey: host.device.publicKey, allowedIps: ["fd00::2/128"] });
  c.selector.setCandidates([HOST_LOCAL, HOST_PUBLIC]);
  c.selector.setRelays(["r1"]);
  const h = host.addPeer({ publicKey: client.device.publicKey, allowedIps: ["fd00::1/128"] });
  h.selector.setRelays(["r1"]);
  const pump = () => {
    for (let i = 0; queue.length && i < 10_000; i++) queue.shift()!();
  };
  const run = (ms: number, step = 100) => {
    for (let t = 0; t < ms; t += step) {
      clock.advance(step);
      client.tick();
      host.tick();
      pump();
    }
  };
  return {
    clock, client, host, got, relayLog, pump, run,
    c: c as { peer: Peer<PathEndpoint>; selector: typeof c.selector },
    h,
    setDirect: (open: boolean) => (directOpen = open),
  };
}

describe("multipath", () => {
  test("the first source that decrypts pins a direct path; after that no datagram goes through the relay", () => {
    const w = world(1);
    w.client.device.sendPacket(packet(1, 2, 1));
    w.pump();
    w.run(300);
    expect(w.c.selector.state().path).toBe("direct");
    expect(w.c.selector.state().direct).toBe("198.51.100.20:51820");
    expect(w.h.selector.state().direct).toBe("198.51.100.10:40000");
    const relayed = w.relayLog.length;
    for (let i = 2; i < 50; i++) {
      w.client.device.sendPacket(packet(1, 2, i));
      w.host.device.sendPacket(packet(2, 1, i));
    }
    w.pump();
    expect(w.relayLog.length).toBe(relayed);
    expect(w.got.host).toEqual(Array.from({ length: 49 }, (_, i) => i + 1));
    expect(w.got.client).toEqual(Array.from({ length: 48 }, (_, i) => i + 2));
  });

  test("with the direct path blocked the relay carries the session; unblocking upgrades to direct without a new handshake and without losing a packet", () => {
    const w = world(2);
    w.setDirect(false);
    w.client.device.sendPacket(packet(1, 2, 1));
    w.pump();
    w.run(2_000);
    expect(w.c.selector.state().path).toBe("relay");
    expect(w.h.selector.state().path).toBe("relay");
    let n = 2;
    const exchange = (count: number) => {
      for (let i = 0; i < count; i++, n++) {
        w.client.device.sendPacket(packet(1, 2, n));
        w.host.device.sendPacket(packet(2, 1, n));
        w.pump();
      }
    };
    exchange(20);
    const handshakes = w.client.device.counters.handshakesCompleted;
    w.setDirect(true);
    w.run(1_500); // at least one probe round reaches the host directly
    exchange(20);
    expect(w.c.selector.state().path).toBe("direct");
    expect(w.h.selector.state().path).toBe("direct");
    const relayed = w.relayLog.length;
    exchange(20);
    expect(w.relayLog.length).toBe(relayed);
    expect(w.client.device.counters.handshakesCompleted).toBe(handshakes);
    const want = Array.from({ length: n - 1 }, (_, i) => i + 1);
    expect(w.got.host).toEqual(want);
    expect(w.got.client).toEqual(want.slice(1));
  });

  test("a pinned direct path that goes silent while the relay carries the peer's traffic is dropped, and traffic continues over the relay", () => {
    const w = world(3);
    w.client.device.sendPacket(packet(1, 2, 1));
    w.pump();
    w.run(300);
    expect(w.c.selector.isDirect()).toBe(true);
    w.setDirect(false);
    // Both sides keep sending; WireGuard's timers retry the handshake, which goes to every path.
    for (let i = 0; i < 60; i++) {
      w.client.device.sendPacket(packet(1, 2, 100 + i));
      w.host.device.sendPacket(packet(2, 1, 100 + i));
      w.run(1_000);
    }
    expect(w.c.selector.state().path).toBe("relay");
    expect(w.c.selector.state().unpins).toBeGreaterThan(0);
    const before = w.got.host.length;
    w.client.device.sendPacket(packet(1, 2, 999));
    w.pump();
    expect(w.got.host.length).toBe(before + 1);
  });
});
