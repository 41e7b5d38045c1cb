/**
 * Fuzz/property test of the codec and the Device: 6,000 random and mutated
 * datagrams per run from a seeded generator (SeededRandom, xoshiro128**,
 * seed fixed below and printed in every failure; set BB_WG_FUZZ_SEED to try
 * another). Inputs: pure noise of random length, noise behind a valid type
 * header and exact size, transport messages for a live session index with a
 * fresh counter and random ciphertext, and bit flips / byte writes / truncations /
 * extensions / splices of real captured messages (initiation, response,
 * cookie reply, transport, keepalive). Properties:
 * - decodeMessage never throws; handshake messages it accepts re-encode to
 *   the same bytes;
 * - Device.receiveDatagram never throws, never delivers an IP packet, and
 *   counts exactly one drop per input, never as "internal";
 * - a Device under load sends nothing but cookie replies in answer.
 */
import { describe, expect, test } from "bun:test";
import { icmpEcho } from "../../test/support/ipCraft.ts";
import { selectAead } from "./aead/select.ts";
import { decodeMessage, encodeCookieReply, encodeInitiation, encodeResponse, messageType } from "./codec.ts";
import { COOKIE_REPLY_BYTES, INITIATION_BYTES, MESSAGE_COOKIE_REPLY, RESPONSE_BYTES } from "./constants.ts";
import type { DeviceCounters } from "./counters.ts";
import { SeededRandom } from "./fakes.ts";
import { fixedLoad } from "./load.ts";
import { makePair, type TestPair } from "./testPair.ts";

const SEED = Number(process.env.BB_WG_FUZZ_SEED ?? 0xf022);
const INPUTS = 6_000;
const { aead } = await selectAead();

const totalDrops = (c: DeviceCounters) => Object.values(c.drops).reduce((x, y) => x + y, 0);

/** A pair with a session both ways, a completed cookie exchange, and the captured real datagrams. */
function established(seed: number): { p: TestPair; corpus: Uint8Array[] } {
  const p = makePair({ aead, seed, loadA: fixedLoad(false) });
  p.a.sendPacket(icmpEcho("10.0.0.1", "10.0.0.2", 1, 1, new Uint8Array(30)));
  p.net.pump();
  p.b.sendPacket(icmpEcho("10.0.0.2", "10.0.0.1", 1, 1, new Uint8Array(0), true));
  p.net.pump();
  p.run(12_000); // keepalives
  // A cookie reply from a Device under load (its own pair), for mutation only.
  const q = makePair({ aead, seed: seed + 1, loadB: fixedLoad(true) });
  q.a.sendPacket(icmpEcho("10.0.0.1", "10.0.0.2", 1, 1, new Uint8Array(0)));
  q.net.pump();
  const cookie = q.net.log.find((f) => messageType(f.bytes) === MESSAGE_COOKIE_REPLY)!.bytes;
  return { p, corpus: [...p.net.log.map((f) => f.bytes), cookie] };
}

function mutate(rng: SeededRandom, src: Uint8Array, corpus: Uint8Array[]): Uint8Array {
  let x = Uint8Array.from(src);
  const ops = 1 + rng.below(3);
  for (let i = 0; i < ops; i++) {
    switch (rng.below(6)) {
      case 0: {
        const at = rng.below(x.length);
        x[at] = x[at]! ^ (1 << rng.below(8));
        break;
      }
      case 1: {
        const at = rng.below(x.length);
        x[at] = rng.below(256) === x[at] ? x[at]! ^ 0xff : rng.below(256);
        if (x[at] === src[at]) x[at] = x[at]! ^ 1;
        break;
      }
      case 2:
        x = x.subarray(0, rng.below(x.length));
        break;
      case 3:
        x = Uint8Array.from([...x, ...rng.bytes(1 + rng.below(40))]);
        break;
      case 4: {
        const other = corpus[rng.below(corpus.length)]!;
        const cut = rng.below(Math.min(x.length, other.length) + 1);
        x = Uint8Array.from([...x.subarray(0, cut), ...other.subarray(cut)]);
        if (x.length === src.length && x.every((v, j) => v === src[j])) x[x.length - 1] = x[x.length - 1]! ^ 0x80;
        break;
      }
      default: {
        const at = 16 + rng.below(Math.max(1, x.length - 16));
        if (at < x.length) x.set(rng.bytes(Math.min(8, x.length - at)), at);
        if (x.length === src.length && x.every((v, j) => v === src[j]) && x.length > 0)
          x[at % x.length] = x[at % x.length]! ^ 4;
      }
    }
  }
  return x;
}

function generate(rng: SeededRandom, corpus: Uint8Array[]): Uint8Array {
  const k = rng.below(10);
  if (k < 2) return rng.bytes(rng.below(k === 0 ? 40 : 2_000));
  if (k < 4) {
    const type = 1 + rng.below(4);
    const size =
      type === 1
        ? INITIATION_BYTES
        : type === 2
          ? RESPONSE_BYTES
          : type === 3
            ? COOKIE_REPLY_BYTES
            : 32 + rng.below(1_500);
    const x = rng.bytes(size);
    x.set([type, 0, 0, 0]);
    return x;
  }
  if (k === 4) {
    // A live receiver index with a fresh counter: only the AEAD tag stands between it and delivery.
    const live = corpus.filter((c) => messageType(c) === 4);
    const x = Uint8Array.from([
      ...live[rng.below(live.length)]!.subarray(0, 8),
      ...rng.bytes(8 + 16 + rng.below(1_400)),
    ]);
    x.fill(0, 13, 16); // counter below 2^40: inside the range a session accepts
    return x;
  }
  const src = corpus[rng.below(corpus.length)]!;
  let x = mutate(rng, src, corpus);
  // A mutation may by chance give back the original: flip one more bit then.
  if (x.length === src.length && x.every((v, j) => v === src[j]))
    x = Uint8Array.from(x, (v, j) => (j === 0 ? v ^ 0x10 : v));
  return x;
}

describe(`fuzz (seed ${SEED}, ${INPUTS} inputs)`, () => {
  test("the codec never throws; accepted handshake messages re-encode to the same bytes", () => {
    const rng = new SeededRandom(SEED);
    const { corpus } = established(SEED);
    for (let i = 0; i < INPUTS; i++) {
      const x = generate(rng, corpus);
      const d = decodeMessage(x);
      if (!d.ok) continue;
      const m = d.message;
      const again =
        m.type === 1
          ? encodeInitiation(m)
          : m.type === 2
            ? encodeResponse(m)
            : m.type === 3
              ? encodeCookieReply(m)
              : null;
      if (again) expect(Buffer.from(again).equals(Buffer.from(x)), `seed ${SEED} input ${i}`).toBe(true);
    }
  });

  for (const loaded of [false, true]) {
    test(`Device${loaded ? " under load" : ""}: never throws, never delivers, one drop per input, nothing internal`, () => {
      const rng = new SeededRandom(SEED + (loaded ? 1 : 0));
      const { p, corpus } = established(SEED);
      // Under load: a fresh pair with the same keys (same seed) whose b demands cookies.
      const target = loaded ? makePair({ aead, seed: SEED, loadB: fixedLoad(true) }) : p;
      const device = target.b;
      const deliveredBefore = target.net.delivered.get("b")!.length;
      target.net.queue.length = 0;
      const logBefore = target.net.log.length;
      for (let i = 0; i < (loaded ? INPUTS / 3 : INPUTS); i++) {
        const x = generate(rng, corpus);
        const drops = totalDrops(device.counters);
        expect(() => device.receiveDatagram(x, target.net.endpoint("a")), `seed ${SEED} input ${i}`).not.toThrow();
        expect(
          totalDrops(device.counters),
          `seed ${SEED} input ${i} (type ${messageType(x)}, ${x.length} bytes) was not dropped`,
        ).toBe(drops + 1);
      }
      console.log(
        `fuzz drops${loaded ? " (under load)" : ""}:`,
        JSON.stringify(Object.fromEntries(Object.entries(device.counters.drops).filter(([, n]) => n > 0))),
      );
      expect(device.counters.drops.internal).toBe(0);
      expect(target.net.delivered.get("b")!.length).toBe(deliveredBefore);
      const sent = target.net.log.slice(logBefore).map((f) => messageType(f.bytes));
      expect(
        sent.every((t) => t === MESSAGE_COOKIE_REPLY),
        `sent ${sent.join(",")}`,
      ).toBe(true);
      if (loaded) expect(sent.length).toBeGreaterThan(0);
    });
  }
});
