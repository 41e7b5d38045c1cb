/**
 * Handshake-flood benchmark (issue 18 item 6): the CPU a responder spends
 * on a flood of mac1-valid initiations without mac2 (what anyone who knows
 * its public key can send), with the production ceilings
 * (src/wireguard/ratelimit.ts) and, as the baseline measured in the same
 * run, with every ceiling lifted (rates of 10^12/s: the behaviour before
 * the ceilings: every message verified, every one answered).
 *
 * In-process, no sockets: a Device on a fake clock receives the flood at an
 * offered rate (the clock moves 1/rate s per datagram) for --seconds of
 * flood time; the CPU it takes (process.cpuUsage) divided by the flood time
 * is the share of a core that rate costs. Cookie replies go to an in-memory
 * sink, so a real UDP send per reply (a syscall, not counted here) would
 * make the baseline dearer still. Two source patterns: one address on
 * changing ports, and a new (spoofed) address per datagram. Rounds alternate
 * which configuration goes first; each figure is the median over rounds.
 *
 *   bun bench/handshakeFlood.ts [--seconds 2] [--rates 2000,20000] [--rounds 3]
 * Run under `flock /tmp/bb-heavy.lock` on shared machines.
 */
import { parseArgs } from "node:util";
import { selectAead } from "../src/wireguard/aead/select.ts";
import { Device } from "../src/wireguard/device.ts";
import { FakeClock } from "../src/protocol/fakeClock.ts";
import { SeededRandom } from "../src/wireguard/fakes.ts";
import type { MemEndpoint } from "../src/wireguard/fakeNet.ts";
import { DEFAULT_HANDSHAKE_RATE_LIMITS, type HandshakeRateLimits } from "../src/wireguard/ratelimit.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/handshakeFlood.ts", 600);

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "2" },
    rates: { type: "string", default: "2000,20000" },
    rounds: { type: "string", default: "3" },
  },
});
const SECONDS = Number(values.seconds);
const RATES = values.rates.split(",").map(Number);
const ROUNDS = Number(values.rounds);
if (!(SECONDS > 0) || !(ROUNDS >= 1) || RATES.some((r) => !(r > 0)))
  throw new Error("--seconds > 0, --rounds ≥ 1, --rates a list of positive numbers");

const LIFTED = { perSecond: 1e12, burst: 1e12 };
const UNLIMITED: HandshakeRateLimits = {
  handshakesPerSource: LIFTED,
  handshakes: LIFTED,
  cookieRepliesPerSource: LIFTED,
  cookieReplies: LIFTED,
  mac1Checks: LIFTED,
  maxSources: 1e9,
};
const { aead } = await selectAead();
const cpuUs = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** One mac1-valid initiation to `responder` from a configured initiator (mac2 zero). */
function floodInitiation(
  responderKey: Uint8Array,
  rng: SeededRandom,
  clock: FakeClock,
): { bytes: Uint8Array; responderPublic: Uint8Array } {
  let out: Uint8Array | null = null;
  const noop = { sendDatagram: (d: Uint8Array) => (out = Uint8Array.from(d)), deliverPacket: () => {} };
  const responder = new Device<MemEndpoint>({
    privateKey: responderKey,
    clock,
    random: rng,
    aead,
    io: { sendDatagram: () => {}, deliverPacket: () => {} },
  });
  const initiator = new Device<MemEndpoint>({ privateKey: rng.bytes(32), clock, random: rng, aead, io: noop });
  const peer = initiator.addPeer({ publicKey: responder.publicKey, endpoint: { key: "responder" } });
  initiator.initiateHandshake(peer);
  return { bytes: out!, responderPublic: responder.publicKey };
}

interface Result {
  cpuShare: number;
  replies: number;
  messages: number;
}

/** Floods a fresh responder at `rate`/s for SECONDS of flood time; returns the core share and what it answered. */
function flood(limits: HandshakeRateLimits, rate: number, spoofed: boolean): Result {
  const clock = new FakeClock();
  const rng = new SeededRandom(7);
  const key = rng.bytes(32);
  const { bytes } = floodInitiation(key, rng, clock);
  let replies = 0;
  const d = new Device<MemEndpoint>({
    privateKey: key,
    clock,
    random: rng,
    aead,
    rateLimits: limits,
    io: { sendDatagram: () => void replies++, deliverPacket: () => {} },
  });
  const n = Math.round(rate * SECONDS);
  const stepMs = 1_000 / rate;
  const froms: MemEndpoint[] = Array.from({ length: Math.min(n, 65_536) }, (_, i) => ({
    key: spoofed ? `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:51820` : `198.51.100.7:${i}`,
  }));
  const t0 = cpuUs();
  for (let i = 0; i < n; i++) {
    d.receiveDatagram(bytes, froms[i % froms.length]!);
    clock.advance(stepMs);
  }
  const cpu = cpuUs() - t0;
  return { cpuShare: cpu / 1e6 / SECONDS, replies, messages: n };
}

console.log(`handshake flood, ${SECONDS} s of flood time per run, ${ROUNDS} rounds, AEAD ${aead.name}`);
// Warm the JIT on both paths once.
flood(UNLIMITED, 2_000, false);
flood(DEFAULT_HANDSHAKE_RATE_LIMITS, 2_000, true);
for (const rate of RATES) {
  for (const spoofed of [false, true]) {
    const lim: Result[] = [];
    const base: Result[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      if (r % 2 === 0)
        base.push(flood(UNLIMITED, rate, spoofed)), lim.push(flood(DEFAULT_HANDSHAKE_RATE_LIMITS, rate, spoofed));
      else lim.push(flood(DEFAULT_HANDSHAKE_RATE_LIMITS, rate, spoofed)), base.push(flood(UNLIMITED, rate, spoofed));
    }
    const ratios = lim.map((l, i) => l.cpuShare / base[i]!.cpuShare);
    const bl = median(base.map((b) => b.cpuShare));
    const ll = median(lim.map((l) => l.cpuShare));
    const what = spoofed ? "a new address per datagram" : "one address, changing ports";
    console.log(
      `${rate}/s from ${what}: without ceilings ${bl.toFixed(3)} core, ${(base[0]!.replies / SECONDS).toFixed(0)} cookie replies/s; ` +
        `with ceilings ${ll.toFixed(3)} core, ${(lim[0]!.replies / SECONDS).toFixed(0)} cookie replies/s; ratio ${median(ratios).toFixed(2)}×`,
    );
  }
}
