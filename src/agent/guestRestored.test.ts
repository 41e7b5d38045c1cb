/**
 * restoredMessage (guestRestored.ts): the message for a restored placement
 * matches its schema, carries the placement's identity with a fresh nonce
 * from the random port, fresh entropy that never comes from that port, the
 * clock port's wall time and the network of the new placement; bad inputs
 * are AgentErrors with stable codes and never echo the nonce.
 */
import { describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { FakeClock } from "../protocol/fakeClock.ts";
import { HostToGuest } from "../protocol/guest.ts";
import { MAX_RESTORE_ENTROPY_BYTES, MIN_RESTORE_ENTROPY_BYTES, RestoredMessage } from "../protocol/guestRestored.ts";
import { AgentError } from "./errors.ts";
import { RESTORE_ENTROPY_BYTES, restoredMessage } from "./guestRestored.ts";
import type { AgentRandom } from "./ports.ts";

/** A random port that repeats one byte (a named test double: deterministic on purpose). */
const fixedRandom = (b: number): AgentRandom => ({ bytes: (n) => new Uint8Array(n).fill(b) });
const placement = { allocationId: `alloc_${"a".repeat(32)}`, placementId: "plc_1", generation: 7, spec: {} };
const clock = new FakeClock({ wallMs: 1_800_000_000_000.75 });

describe("restoredMessage", () => {
  test("the placement's identity, a nonce from the random port, the clock's wall time; schema-valid", () => {
    const { message, identity } = restoredMessage(placement, { random: fixedRandom(0xab), clock });
    expect(identity).toEqual({
      allocationId: placement.allocationId,
      placementId: "plc_1",
      generation: 7,
      nonce: "ab".repeat(32),
    });
    expect(message).toMatchObject({ type: "restored", ...identity, wallClockMs: 1_800_000_000_000 });
    expect(message.payloadAllowed).toBeUndefined();
    expect(message.network).toBeUndefined();
    expect(Value.Check(RestoredMessage, message)).toBe(true);
    expect(Value.Check(HostToGuest, message)).toBe(true);
  });

  test("entropy: RESTORE_ENTROPY_BYTES fresh bytes each time, never the random port's", () => {
    expect(RESTORE_ENTROPY_BYTES).toBeGreaterThanOrEqual(MIN_RESTORE_ENTROPY_BYTES);
    expect(RESTORE_ENTROPY_BYTES).toBeLessThanOrEqual(MAX_RESTORE_ENTROPY_BYTES);
    const a = restoredMessage(placement, { random: fixedRandom(1), clock }).message.entropyBase64;
    const b = restoredMessage(placement, { random: fixedRandom(1), clock }).message.entropyBase64;
    expect(Buffer.from(a, "base64")).toHaveLength(RESTORE_ENTROPY_BYTES);
    expect(a).not.toBe(b);
    expect(Buffer.from(a, "base64").every((x) => x === 1)).toBe(false);
  });

  test("the fork flag and the new placement's network", () => {
    const { message } = restoredMessage(
      { ...placement, spec: { ipv6Address: "fd00::3" } },
      { random: fixedRandom(2), clock },
      { payloadAllowed: true, ipv4: { cidr: "10.0.0.2/30", gateway: "10.0.0.1" } },
    );
    expect(message.payloadAllowed).toBe(true);
    expect(message.network).toEqual({ ipv4Cidr: "10.0.0.2/30", ipv4Gateway: "10.0.0.1", ipv6Address: "fd00::3" });
    expect(Value.Check(RestoredMessage, message)).toBe(true);
  });

  test("bad inputs: NETWORK_SETUP_FAILED for an address a cold boot refuses too, INTERNAL naming the field otherwise", () => {
    const codeOf = (f: () => unknown): string => {
      try {
        f();
      } catch (e) {
        expect(e).toBeInstanceOf(AgentError);
        expect(String((e as Error).message)).not.toContain("ab".repeat(32));
        return `${(e as AgentError).code} ${(e as Error).message}`;
      }
      return "OK";
    };
    const ports = { random: fixedRandom(0xab), clock };
    expect(codeOf(() => restoredMessage({ ...placement, spec: { ipv6Address: "fe80::1" } }, ports))).toMatch(
      /^NETWORK_SETUP_FAILED /,
    );
    expect(codeOf(() => restoredMessage({ ...placement, placementId: "has space" }, ports))).toMatch(
      /^INTERNAL restored\/placementId: /,
    );
    expect(codeOf(() => restoredMessage({ ...placement, allocationId: "a".repeat(161) }, ports))).toMatch(
      /^INTERNAL restored\/allocationId: /,
    );
    expect(
      codeOf(() => restoredMessage(placement, ports, { ipv4: { cidr: "10.0.0.02/30", gateway: "10.0.0.1" } })),
    ).toMatch(/^INTERNAL restored\/network\/ipv4Cidr: /);
    expect(codeOf(() => restoredMessage(placement, { ...ports, clock: new FakeClock({ wallMs: 0 }) }))).toMatch(
      /^INTERNAL restored\/wallClockMs: /,
    );
  });
});
