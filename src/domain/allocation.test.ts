import { describe, expect, test } from "bun:test";
import { ALLOCATION_STATES } from "../protocol/api.ts";
import {
  canTransition,
  DEFAULT_TIMEOUTS,
  mayReplaceAutomatically,
  noCapacityBackoffMs,
  TERMINAL_STATES,
} from "./allocation.ts";
import { healthFromHeartbeat } from "./health.ts";
import { allocationIdFor, canonicalJson, commandIdFor, reservationKey } from "./identifiers.ts";

describe("allocation state machine", () => {
  test("terminal states have no way out", () => {
    for (const t of TERMINAL_STATES) for (const s of ALLOCATION_STATES) expect(canTransition(t, s)).toBe(false);
  });
  test("ready cannot jump to released without releasing", () => {
    expect(canTransition("ready", "released")).toBe(false);
    expect(canTransition("ready", "releasing")).toBe(true);
    expect(canTransition("releasing", "released")).toBe(true);
  });
  test("automatic replacement only before readiness and payload", () => {
    expect(mayReplaceAutomatically({ guestReady: false, payloadConsumed: false, attempts: 1 }, DEFAULT_TIMEOUTS)).toBe(
      true,
    );
    expect(mayReplaceAutomatically({ guestReady: true, payloadConsumed: false, attempts: 1 }, DEFAULT_TIMEOUTS)).toBe(
      false,
    );
    expect(mayReplaceAutomatically({ guestReady: false, payloadConsumed: true, attempts: 1 }, DEFAULT_TIMEOUTS)).toBe(
      false,
    );
    expect(
      mayReplaceAutomatically(
        { guestReady: false, payloadConsumed: false, attempts: DEFAULT_TIMEOUTS.maxAttempts },
        DEFAULT_TIMEOUTS,
      ),
    ).toBe(false);
  });
  test("backoff grows and is capped", () => {
    expect(noCapacityBackoffMs(1)).toBeLessThan(noCapacityBackoffMs(3));
    expect(noCapacityBackoffMs(100)).toBe(30_000);
  });
});

describe("health and identifiers", () => {
  test("heartbeat age bands", () => {
    expect(healthFromHeartbeat(null, 0)).toBe("unknown");
    expect(healthFromHeartbeat(0, 29_999)).toBe("healthy");
    expect(healthFromHeartbeat(0, 30_000)).toBe("suspect");
    expect(healthFromHeartbeat(0, 90_000)).toBe("suspect");
    expect(healthFromHeartbeat(0, 90_001)).toBe("lost");
  });
  test("allocation IDs are per identity and request ID", () => {
    expect(allocationIdFor("a", "x")).toBe(allocationIdFor("a", "x"));
    expect(allocationIdFor("a", "x")).not.toBe(allocationIdFor("b", "x"));
    expect(allocationIdFor("a", "x")).toMatch(/^alloc_[0-9a-f]{32}$/);
  });
  test("deterministic command IDs and reservation keys", () => {
    expect(commandIdFor("plc_1", "ensure_present", 2)).toBe("plc_1:present:2");
    expect(reservationKey("alloc_1", 3, "h1")).toBe("reserve:alloc_1:3:h1");
  });
  test("canonical JSON ignores key order", () => {
    expect(canonicalJson({ b: 1, a: [1, { d: 2, c: 3 }] })).toBe(canonicalJson({ a: [1, { c: 3, d: 2 }], b: 1 }));
  });
});
