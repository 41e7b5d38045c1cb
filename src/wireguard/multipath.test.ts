/**
 * Path selection between two MultipathDevices over an in-memory network on a
 * fake clock: the "client" knows the host's candidates (one unreachable
 * local address, one reachable public one) and a relay that always works;
 * the direct path can be blocked and unblocked, each direction on its own.
 */
import { describe, expect, test } from "bun:test";
import { nobleAead } from "./aead/noble.ts";
import { FakeClock } from "../protocol/fakeClock.ts";
import { SeededRandom, testPacket as packet } from "./fakes.ts";
import { MultipathDevice } from "./multipath.ts";
import { PIN_LOST_MS, PIN_PROBE_INTERVAL_MS, relayPath, udpPath, type PathEndpoint, type PathIo } from "./paths.ts";
import type { Peer } from "./device.ts";

const CLIENT_PUBLIC = { address: "198.51.100.10", port: 40000 };
const HOST_LOCAL = { address: "10.2.0.2", port: 51820 };
const HOST_PUBLIC = { address: "198.51.100.20", port: 51820 };

function world(seed: number) {
  const clock = new FakeClock();
  const rng = new SeededRandom(seed);
  const aead = nobleAead();
  const queue: Array<() => void> = [];
  // Each direction of the direct path separately: UDP may be blocked one way only.
  const open = { toHost: true, toClient: true };
  const relayLog: string[] = [];
  const got = { client: [] as number[], host: [] as number[] };
  let client!: MultipathDevice;
  let host!: MultipathDevice;
  const clientIo: PathIo = {
    sendUdp: (d, address, port) => {
      const copy = d.slice();
      if (open.toHost && address === HOST_PUBLIC.address && port === HOST_PUBLIC.port)
        queue.push(() => host.receive(copy, udpPath(CLIENT_PUBLIC.address, CLIENT_PUBLIC.port)));
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
      if (open.toClient && address === CLIENT_PUBLIC.address && port === CLIENT_PUBLIC.port)
        queue.push(() => client.receive(copy, udpPath(HOST_PUBLIC.address, HOST_PUBLIC.port)));
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
  client = new MultipathDevice({
    privateKey: clientKey,
    clock,
    random: rng,
    aead,
    io: clientIo,
    deliver: (p) => got.client.push(num(p)),
  });
  host = new MultipathDevice({
    privateKey: hostKey,
    clock,
    random: rng,
    aead,
    io: hostIo,
    deliver: (p) => got.host.push(num(p)),
  });
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
    clock,
    client,
    host,
    got,
    relayLog,
    pump,
    run,
    c: c as { peer: Peer<PathEndpoint>; selector: typeof c.selector },
    h,
    setDirect: (on: boolean) => (open.toHost = open.toClient = on),
    open,
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

  test("one-way UDP (kind: a path kept on the peer's datagrams, not on ours getting through): with the host's datagrams arriving directly but the client's to it dropped, neither side pins direct and the relay carries every packet both ways", () => {
    const w = world(4);
    // The host knows the client's public address (a published candidate), so its datagrams do arrive directly.
    w.h.selector.setCandidates([CLIENT_PUBLIC]);
    w.open.toHost = false;
    w.client.device.sendPacket(packet(1, 2, 1));
    w.pump();
    w.run(3_000);
    for (let i = 2; i <= 40; i++) {
      w.client.device.sendPacket(packet(1, 2, i));
      w.host.device.sendPacket(packet(2, 1, i));
      w.run(200);
    }
    expect(w.c.selector.state()).toMatchObject({ path: "relay", direct: null, pins: 0 });
    expect(w.h.selector.state()).toMatchObject({ path: "relay", direct: null, pins: 0 });
    expect(w.got.host).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
    expect(w.got.client).toEqual(Array.from({ length: 39 }, (_, i) => i + 2));
    // The client did hear the host directly the whole time; that alone never pins.
    expect(w.c.selector.state().probesSent).toBeGreaterThan(0);
    expect(w.c.selector.state().acksReceived).toBe(0);
  });

  test("one-way UDP the other way: the client's datagrams reach the host directly but the host's to it are dropped; the first handshake completes (its response goes through the relays too), neither side pins and the relay carries every packet", () => {
    const w = world(5);
    w.h.selector.setCandidates([CLIENT_PUBLIC]);
    w.open.toClient = false;
    w.client.device.sendPacket(packet(1, 2, 1));
    w.pump();
    w.run(3_000);
    // The handshake itself: the initiation's direct copy arrives first, and a response sent only back there would be lost.
    expect(w.got.host).toEqual([1]);
    expect(w.client.device.counters.initiationsSent).toBe(1);
    for (let i = 2; i <= 40; i++) {
      w.client.device.sendPacket(packet(1, 2, i));
      w.host.device.sendPacket(packet(2, 1, i));
      w.run(200);
    }
    expect(w.c.selector.state()).toMatchObject({ path: "relay", pins: 0 });
    expect(w.h.selector.state()).toMatchObject({ path: "relay", pins: 0 });
    expect(w.got.host).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
    expect(w.got.client).toEqual(Array.from({ length: 39 }, (_, i) => i + 2));
  });

  test("black hole (kind: a dead pin kept until a handshake times out): a pinned direct path that stops carrying datagrams both ways is lost at both ends within PIN_LOST_MS and a probe interval or two, reported as lost, and traffic continues over the relay without a new handshake", () => {
    const w = world(6);
    w.client.device.sendPacket(packet(1, 2, 1));
    w.pump();
    w.run(2_000);
    expect(w.c.selector.isDirect()).toBe(true);
    expect(w.h.selector.isDirect()).toBe(true);
    const handshakes = w.client.device.counters.handshakesCompleted;
    w.setDirect(false);
    const changes = w.c.selector.changes;
    // Fake time: the loss is decided by unanswered probes, never by a handshake timing out (15 s).
    w.run(PIN_LOST_MS + 2 * PIN_PROBE_INTERVAL_MS);
    expect(w.c.selector.state()).toMatchObject({ direct: null, lost: "198.51.100.20:51820", unpins: 1 });
    expect(w.h.selector.state()).toMatchObject({ direct: null, lost: "198.51.100.10:40000", unpins: 1 });
    expect(w.c.selector.changes).toBeGreaterThan(changes);
    const before = w.got.host.length;
    for (let i = 0; i < 10; i++) {
      w.client.device.sendPacket(packet(1, 2, 100 + i));
      w.host.device.sendPacket(packet(2, 1, 100 + i));
      w.run(100);
    }
    expect(w.got.host.slice(before)).toEqual(Array.from({ length: 10 }, (_, i) => 100 + i));
    expect(w.got.client.slice(-10)).toEqual(Array.from({ length: 10 }, (_, i) => 100 + i));
    expect(w.c.selector.state()).toMatchObject({ path: "relay", lost: "198.51.100.20:51820" });
    expect(w.client.device.counters.handshakesCompleted).toBe(handshakes);
    // The path comes back: probes are answered again and both ends pin it, the loss forgotten.
    w.setDirect(true);
    w.run(2_500);
    expect(w.c.selector.state()).toMatchObject({ path: "direct", lost: null, pins: 2 });
    expect(w.h.selector.state()).toMatchObject({ path: "direct", pins: 2 });
  });
});
