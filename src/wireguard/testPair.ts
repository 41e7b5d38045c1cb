/**
 * Test support: two Devices ("a" at 10.0.0.1/fd00::1, "b" at 10.0.0.2/fd00::2)
 * peered over a MemoryNet on one FakeClock, with an event-driven run() that
 * jumps the clock from deadline to deadline, ticking and pumping.
 *
 * Owns: nothing in production. Must never: be used outside tests.
 */
import type { Aead } from "./aead/aead.ts";
import { Device, type Peer } from "./device.ts";
import { FakeClock } from "../protocol/fakeClock.ts";
import { SeededRandom } from "./fakes.ts";
import { MemoryNet, type MemEndpoint } from "./fakeNet.ts";
import type { WgLimits } from "./limits.ts";
import type { LoadPolicy } from "./load.ts";
import type { Clock } from "../protocol/clock.ts";

/** Options of makePair. */
export interface PairOptions {
  aead: Aead;
  seed?: number;
  limits?: WgLimits;
  loadA?: LoadPolicy;
  loadB?: LoadPolicy;
  presharedKey?: Uint8Array;
  /** The clock both Devices share (default a fresh FakeClock); run() moves it with advance(). */
  clock?: PairClock;
}

/** A clock a pair can run on: a Clock that the test moves forward. */
export type PairClock = Clock & { advance(ms: number): void };

/** Two peered Devices and what drives them. */
export interface TestPair {
  clock: PairClock;
  rng: SeededRandom;
  net: MemoryNet;
  a: Device<MemEndpoint>;
  b: Device<MemEndpoint>;
  /** a's Peer object for b, and b's for a. */
  pa: Peer<MemEndpoint>;
  pb: Peer<MemEndpoint>;
  keyA: Uint8Array;
  keyB: Uint8Array;
  /** Replaces b with a fresh Device using the same key (a restart); returns it and its peer for a. */
  restartB(): void;
  /** Moves the clock `ms` forward, from deadline to deadline, ticking both Devices and pumping the network. */
  run(ms: number): void;
}

/** Builds the pair. */
export function makePair(o: PairOptions): TestPair {
  const clock: PairClock = o.clock ?? new FakeClock();
  const rng = new SeededRandom(o.seed ?? 42);
  const net = new MemoryNet();
  const keyA = rng.bytes(32);
  const keyB = rng.bytes(32);
  const common = { clock, random: rng, aead: o.aead, ...(o.limits ? { limits: o.limits } : {}) };
  const a = new Device<MemEndpoint>({
    ...common,
    privateKey: keyA,
    io: net.io("a"),
    ...(o.loadA ? { load: o.loadA } : {}),
  });
  const mkB = () =>
    new Device<MemEndpoint>({ ...common, privateKey: keyB, io: net.io("b"), ...(o.loadB ? { load: o.loadB } : {}) });
  let b = mkB();
  net.attach("a", a);
  net.attach("b", b);
  const psk = o.presharedKey ? { presharedKey: o.presharedKey } : {};
  const pa = a.addPeer({
    publicKey: b.publicKey,
    endpoint: net.endpoint("b"),
    allowedIps: ["10.0.0.2/32", "fd00::2/128"],
    ...psk,
  });
  const peerB = (d: Device<MemEndpoint>) =>
    d.addPeer({
      publicKey: a.publicKey,
      endpoint: net.endpoint("a"),
      allowedIps: ["10.0.0.1/32", "fd00::1/128"],
      ...psk,
    });
  const pair: TestPair = {
    clock,
    rng,
    net,
    a,
    b,
    pa,
    pb: peerB(b),
    keyA,
    keyB,
    restartB() {
      b = mkB();
      pair.b = b;
      pair.pb = peerB(b);
      net.attach("b", b);
    },
    run(ms: number) {
      const end = clock.monoMs() + ms;
      net.pump();
      for (let guard = 0; guard < 100_000; guard++) {
        const next = [pair.a.nextDeadlineMs(), pair.b.nextDeadlineMs()].filter(
          (d): d is number => d !== null && d <= end,
        );
        if (next.length === 0) break;
        const at = Math.min(...next);
        if (at > clock.monoMs()) clock.advance(at - clock.monoMs());
        pair.a.tick();
        pair.b.tick();
        net.pump();
      }
      if (end > clock.monoMs()) clock.advance(end - clock.monoMs());
      pair.a.tick();
      pair.b.tick();
      net.pump();
    },
  };
  return pair;
}
