import { describe, expect, test } from "bun:test";
import { isOverlappingSession, mergeFacts, NO_FACTS, sessionOpening } from "./hostSession.ts";
import { HEALTHY_HEARTBEAT_AGE_MS } from "./health.ts";
import { OVERLAP_SUSPECT_MS } from "./hostConditions.ts";

describe("agent sessions and epochs", () => {
  test("an empty epoch on a poll opens a session; the current epoch continues it; any other is stale", () => {
    expect(sessionOpening("", "poll", "e1")).toBe("new");
    expect(sessionOpening("", "poll", "")).toBe("new");
    expect(sessionOpening("e1", "poll", "e1")).toBe("current");
    expect(sessionOpening("e1", "messages", "e1")).toBe("current");
    expect(sessionOpening("e0", "poll", "e1")).toBe("stale");
    expect(sessionOpening("", "messages", "e1")).toBe("stale");
  });

  test("a new session overlaps only a healthy session of another boot", () => {
    const now = 1_000_000;
    const last = { bootId: "b1", heartbeatAtMs: now - 1_000 };
    expect(isOverlappingSession(last, true, "b2", now)).toBe(true);
    expect(isOverlappingSession(last, false, "b2", now)).toBe(false);
    expect(isOverlappingSession(last, true, "b1", now)).toBe(false);
    expect(isOverlappingSession({ bootId: "", heartbeatAtMs: now - 1_000 }, true, "b2", now)).toBe(false);
    expect(isOverlappingSession({ bootId: "b1", heartbeatAtMs: null }, true, "b2", now)).toBe(false);
    expect(isOverlappingSession({ bootId: "b1", heartbeatAtMs: now - HEALTHY_HEARTBEAT_AGE_MS }, true, "b2", now)).toBe(
      false,
    );
  });
});

describe("merging the facts an agent reports", () => {
  const now = Date.parse("2026-01-01T00:00:10.000Z");

  test("the skew comes from sentAt; an unparseable sentAt keeps the last skew", () => {
    expect(mergeFacts(NO_FACTS, { sentAt: "2026-01-01T00:00:03.000Z" }, now, false).clockSkewMs).toBe(7_000);
    expect(mergeFacts({ ...NO_FACTS, clockSkewMs: 42 }, { sentAt: "soon" }, now, false).clockSkewMs).toBe(42);
  });

  test("each health field a report carries replaces the stored one; absent fields are kept", () => {
    const prev = { ...NO_FACTS, volumesNearlyFull: true, cachedImages: ["sha256:a"], vmmStartFailing: true };
    const kept = mergeFacts(prev, { sentAt: "x" }, now, false);
    expect(kept).toEqual({ ...prev, clockSkewMs: 0 });
    const health = {
      isolationHealthy: true,
      quarantineCount: 0,
      vmmDriver: "qemu",
      inventory: { cpuMillis: 4000, memoryMiB: 8192 },
      volumesNearlyFull: false,
      vmmStartFailing: false,
      cachedImages: [],
    };
    const next = mergeFacts(prev, { sentAt: "x", health }, now, false);
    expect(next.inventory).toEqual({ cpuMillis: 4000, memoryMiB: 8192 });
    expect(next.volumesNearlyFull).toBe(false);
    expect(next.vmmStartFailing).toBe(false);
    expect(next.cachedImages).toEqual([]);
  });

  test("facts stored before vmmStartFailing and cachedImages existed read as false and empty", () => {
    const old = { clockSkewMs: 0, inventory: null, volumesNearlyFull: false, overlapUntilMs: 0 };
    const next = mergeFacts(old, { sentAt: "x" }, now, false);
    expect(next.vmmStartFailing).toBe(false);
    expect(next.cachedImages).toEqual([]);
  });

  test("an overlapping session keeps the host suspect for OVERLAP_SUSPECT_MS from now", () => {
    expect(mergeFacts(NO_FACTS, { sentAt: "x" }, now, true).overlapUntilMs).toBe(now + OVERLAP_SUSPECT_MS);
    expect(mergeFacts({ ...NO_FACTS, overlapUntilMs: 5 }, { sentAt: "x" }, now, false).overlapUntilMs).toBe(5);
  });
});
