/**
 * GuestSession.keepClock: the agent's wall clock goes to a ready guest as `clock` at once and every
 * GUEST_CLOCK_SYNC_INTERVAL_MS (a guest clock starved of CPU falls behind, and the control service
 * checks grant freshness on it), each message within its schema, and stops when the session closes.
 */
import { describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { GUEST_CLOCK_SYNC_INTERVAL_MS, HostToGuest } from "../protocol/guest.ts";
import { FakeTimeline } from "./fakePorts.ts";
import { GuestSession } from "./guestSession.ts";
import type { GuestChannel } from "./vmm/driver.ts";

/** A channel that records what the host sends (a named test double of the guest's port). */
function recordingChannel(): { channel: GuestChannel; sent: Record<string, unknown>[] } {
  const sent: Record<string, unknown>[] = [];
  const channel: GuestChannel = {
    send: (line) => sent.push(JSON.parse(line) as Record<string, unknown>),
    onData: () => {},
    onClose: () => {},
    close: () => {},
  };
  return { channel, sent };
}

describe("GuestSession.keepClock", () => {
  test("sends the wall clock now and every interval, within the schema, until closed", async () => {
    const t = new FakeTimeline(1_800_000_000_000);
    const { channel, sent } = recordingChannel();
    const s = new GuestSession(channel, { allocationId: "a", placementId: "p", generation: 1, nonce: "n" }, t.timers());
    s.keepClock(t.clock);
    await t.advance(GUEST_CLOCK_SYNC_INTERVAL_MS * 3);
    expect(sent.map((m) => m["wallClockMs"])).toEqual(
      [0, 1, 2, 3].map((i) => 1_800_000_000_000 + i * GUEST_CLOCK_SYNC_INTERVAL_MS),
    );
    for (const m of sent) expect(Value.Check(HostToGuest, m)).toBe(true);
    s.close();
    const before = t.pendingCount;
    await t.advance(GUEST_CLOCK_SYNC_INTERVAL_MS * 3);
    expect(sent).toHaveLength(4);
    expect(before).toBe(0);
  });

  test("a second call replaces the first (one message per interval)", async () => {
    const t = new FakeTimeline(1_800_000_000_000);
    const { channel, sent } = recordingChannel();
    const s = new GuestSession(channel, { allocationId: "a", placementId: "p", generation: 1, nonce: "n" }, t.timers());
    s.keepClock(t.clock);
    s.keepClock(t.clock);
    await t.advance(GUEST_CLOCK_SYNC_INTERVAL_MS);
    expect(sent).toHaveLength(3);
    s.close();
  });
});
