/**
 * The wire codec (whitepaper §5.4.2–§5.4.7): sizes, round trips of each
 * message type, and refusals (wrong length, unknown type, non-zero reserved
 * bytes, oversize, 64-bit counters beyond 2^53).
 */
import { describe, expect, test } from "bun:test";
import {
  decodeMessage,
  encodeCookieReply,
  encodeInitiation,
  encodeResponse,
  encodeTransport,
  messageType,
  type CookieReply,
  type Initiation,
  type Response,
  type Transport,
} from "./codec.ts";
import {
  COOKIE_REPLY_BYTES,
  INITIATION_BYTES,
  MAX_DATAGRAM_BYTES,
  RESPONSE_BYTES,
  TRANSPORT_HEADER_BYTES,
} from "./constants.ts";
import { SeededRandom } from "./fakes.ts";

const rng = new SeededRandom(0xc0dec);
const b = (n: number) => rng.bytes(n);

describe("codec", () => {
  test("initiation: 148 bytes, round trip", () => {
    const m = {
      sender: 0xdeadbeef,
      ephemeral: b(32),
      encryptedStatic: b(48),
      encryptedTimestamp: b(28),
      mac1: b(16),
      mac2: b(16),
    };
    const bytes = encodeInitiation(m);
    expect(bytes.length).toBe(INITIATION_BYTES);
    expect([...bytes.subarray(0, 4)]).toEqual([1, 0, 0, 0]);
    const d = decodeMessage(bytes);
    expect(d.ok).toBe(true);
    const got = (d as { message: Initiation }).message;
    expect(got.type).toBe(1);
    expect({ ...got, type: undefined }).toEqual({ ...m, type: undefined });
    expect(encodeInitiation(got)).toEqual(bytes);
  });

  test("response: 92 bytes, round trip", () => {
    const m = { sender: 1, receiver: 0xffffffff, ephemeral: b(32), encryptedNothing: b(16), mac1: b(16), mac2: b(16) };
    const bytes = encodeResponse(m);
    expect(bytes.length).toBe(RESPONSE_BYTES);
    const got = (decodeMessage(bytes) as { message: Response }).message;
    expect(got.receiver).toBe(0xffffffff);
    expect(encodeResponse(got)).toEqual(bytes);
  });

  test("cookie reply: 64 bytes, round trip", () => {
    const m = { receiver: 77, nonce: b(24), encryptedCookie: b(32) };
    const bytes = encodeCookieReply(m);
    expect(bytes.length).toBe(COOKIE_REPLY_BYTES);
    const got = (decodeMessage(bytes) as { message: CookieReply }).message;
    expect(encodeCookieReply(got)).toEqual(bytes);
  });

  test("transport: 16-byte header, counter as u64 LE, round trip", () => {
    for (const counter of [0, 1, 2 ** 32 - 1, 2 ** 32, 2 ** 53 - 1]) {
      const enc = b(16 + rng.below(100));
      const bytes = encodeTransport(0x01020304, counter, enc);
      expect(bytes.length).toBe(TRANSPORT_HEADER_BYTES + enc.length);
      const got = (decodeMessage(bytes) as { message: Transport }).message;
      expect(got.counter).toBe(counter);
      expect(got.counterTooLarge).toBe(false);
      expect(got.receiver).toBe(0x01020304);
      expect(encodeTransport(got.receiver, got.counter, got.encrypted)).toEqual(bytes);
    }
    const big = encodeTransport(1, 0, b(16));
    big[14] = 0x20; // counter = 2^53 + …
    expect((decodeMessage(big) as { message: Transport }).message.counterTooLarge).toBe(true);
  });

  test("refusals: short, long, wrong size per type, unknown type, non-zero reserved", () => {
    expect(decodeMessage(new Uint8Array(3))).toEqual({ ok: false, error: "too-short" });
    expect(decodeMessage(new Uint8Array(MAX_DATAGRAM_BYTES + 1))).toEqual({ ok: false, error: "too-long" });
    for (const [type, size] of [
      [1, 148],
      [2, 92],
      [3, 64],
    ] as const) {
      for (const n of [size - 1, size + 1, 4]) {
        const x = new Uint8Array(n);
        x[0] = type;
        expect(decodeMessage(x)).toEqual({ ok: false, error: "bad-length" });
      }
    }
    const t = new Uint8Array(31);
    t[0] = 4;
    expect(decodeMessage(t)).toEqual({ ok: false, error: "bad-length" });
    const init = encodeInitiation({
      sender: 1,
      ephemeral: b(32),
      encryptedStatic: b(48),
      encryptedTimestamp: b(28),
      mac1: b(16),
      mac2: b(16),
    });
    init[2] = 1;
    expect(decodeMessage(init)).toEqual({ ok: false, error: "unknown-type" });
    expect(messageType(init)).toBe(0x10001);
    const zero = new Uint8Array(148);
    expect(decodeMessage(zero)).toEqual({ ok: false, error: "unknown-type" });
  });

  test("encoders refuse wrongly sized fields (a local bug, never peer input)", () => {
    expect(() => encodeCookieReply({ receiver: 1, nonce: b(12), encryptedCookie: b(32) })).toThrow(/nonce must be 24/);
  });
});
