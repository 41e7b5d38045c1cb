import { describe, expect, test } from "bun:test";
import { MAX_RELAY_FRAME_BYTES } from "./connection.ts";
import {
  closeReasonCode,
  decodeCloseBody,
  encodeCloseBody,
  encodeStreamFrame,
  MAX_RELAY_TOKEN_BYTES,
  relayCloseCode,
  StreamFrameDecoder,
  StreamFrameKind,
} from "./relay.ts";

describe("relay wire", () => {
  test("close codes are 4000 + the code's HTTP status; a reason is a stable code or not", () => {
    expect(relayCloseCode("RELAY_PAIR_TAKEN")).toBe(4409);
    expect(relayCloseCode("RELAY_TOKEN_INVALID")).toBe(4401);
    expect(relayCloseCode("RELAY_BUSY")).toBe(4503);
    expect(closeReasonCode("RELAY_IDLE_TIMEOUT")).toBe("RELAY_IDLE_TIMEOUT");
    expect(closeReasonCode("toString")).toBeNull();
    expect(closeReasonCode("")).toBeNull();
  });

  test("stream frames round-trip whatever the chunking, byte by byte included", () => {
    const frames = [
      encodeStreamFrame(StreamFrameKind.text, new TextEncoder().encode('{"a":1}')),
      encodeStreamFrame(StreamFrameKind.datagram, new Uint8Array(MAX_RELAY_FRAME_BYTES).fill(7)),
      encodeStreamFrame(StreamFrameKind.ping, Uint8Array.of(1)),
      encodeStreamFrame(StreamFrameKind.close, encodeCloseBody(4409, "RELAY_PAIR_TAKEN")),
    ];
    const all = new Uint8Array(frames.reduce((n, f) => n + f.length, 0));
    let at = 0;
    for (const f of frames) all.set(f, (at += f.length) - f.length);
    for (const step of [1, 3, 1000, all.length]) {
      const d = new StreamFrameDecoder();
      const out: { kind: number; body: Uint8Array }[] = [];
      for (let i = 0; i < all.length; i += step)
        for (const f of d.push(all.slice(i, i + step))) out.push({ kind: f.kind, body: f.body.slice() });
      expect(out.map((f) => f.kind)).toEqual([1, 0, 3, 2]);
      expect(out[1]!.body.length).toBe(MAX_RELAY_FRAME_BYTES);
      expect(decodeCloseBody(out[3]!.body)).toEqual({ code: 4409, reason: "RELAY_PAIR_TAKEN" });
    }
  });

  test("a frame with length 0, an unknown kind, or a body over its kind's bound fails the decoder for good", () => {
    const over = new Uint8Array(3 + MAX_RELAY_FRAME_BYTES + 1);
    over[0] = (MAX_RELAY_FRAME_BYTES + 2) >> 8;
    over[1] = (MAX_RELAY_FRAME_BYTES + 2) & 0xff;
    for (const bad of [Uint8Array.of(0, 0, 0), Uint8Array.of(0, 2, 9, 1), over]) {
      const d = new StreamFrameDecoder();
      expect(d.push(bad)).toEqual([]);
      expect(d.failed).toBe(true);
      expect(d.push(encodeStreamFrame(StreamFrameKind.ping, Uint8Array.of(1)))).toEqual([]);
    }
    expect(() => encodeStreamFrame(StreamFrameKind.datagram, new Uint8Array(MAX_RELAY_FRAME_BYTES + 1))).toThrow(
      RangeError,
    );
    expect(() => encodeStreamFrame(StreamFrameKind.text, new Uint8Array(MAX_RELAY_TOKEN_BYTES + 1))).toThrow(
      RangeError,
    );
  });
});
