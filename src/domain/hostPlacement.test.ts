import { describe, expect, test } from "bun:test";
import { heldAfter } from "./capacity.ts";
import {
  desiredAfterRefusal,
  endsPendingCommands,
  isCurrentRunning,
  isWantedPlacement,
  leaseExpiryFrom,
  leasesToRenew,
  placementStateAfter,
  releasesCapacity,
  resumeNeeds,
  startsRunning,
  updateRejection,
  type PlacementFacts,
} from "./hostPlacement.ts";

const p = (over: Partial<PlacementFacts> = {}): PlacementFacts => ({
  generation: 1,
  state: "preparing",
  desired: "present",
  leaseExpiresAtMs: 1_000,
  ...over,
});

describe("the host's placement state machine", () => {
  test("each reported state maps to one host state", () => {
    expect(placementStateAfter("reserved", "accepted")).toBe("preparing");
    expect(placementStateAfter("reserved", "preparing")).toBe("preparing");
    expect(placementStateAfter("preparing", "prepared")).toBe("preparing");
    expect(placementStateAfter("preparing", "starting")).toBe("running");
    expect(placementStateAfter("preparing", "running")).toBe("running");
    expect(placementStateAfter("running", "stopping")).toBe("stopping");
    expect(placementStateAfter("running", "error")).toBe("cleanup_pending");
    expect(placementStateAfter("stopping", "absent")).toBe("absent");
  });

  test("only a prepared placement still wanted present is asked to run", () => {
    expect(startsRunning("prepared", "present")).toBe(true);
    expect(startsRunning("prepared", "running")).toBe(false);
    expect(startsRunning("prepared", "absent")).toBe(false);
    expect(startsRunning("preparing", "present")).toBe(false);
  });

  test("only absence ends pending commands and releases capacity", () => {
    expect(endsPendingCommands("absent")).toBe(true);
    expect(endsPendingCommands("stopping")).toBe(false);
    expect(releasesCapacity("absent")).toBe(true);
    expect(releasesCapacity("cleanup_pending")).toBe(false);
  });
});

describe("which placement updates are refused", () => {
  test("unknown placement, other generation, non-increasing sequence, already absent: in that order", () => {
    expect(updateRejection(undefined, { generation: 1, seq: 1 }, 0)).toBe("UNKNOWN_PLACEMENT");
    expect(updateRejection(p(), { generation: 2, seq: 1 }, 0)).toBe("STALE_GENERATION");
    expect(updateRejection(p({ state: "absent" }), { generation: 2, seq: 1 }, 0)).toBe("STALE_GENERATION");
    expect(updateRejection(p(), { generation: 1, seq: 3 }, 3)).toBe("SEQUENCE_NOT_INCREASING");
    expect(updateRejection(p({ state: "absent" }), { generation: 1, seq: 3 }, 3)).toBe("SEQUENCE_NOT_INCREASING");
    expect(updateRejection(p({ state: "absent" }), { generation: 1, seq: 4 }, 3)).toBe("INVALID_STATE");
    expect(updateRejection(p(), { generation: 1, seq: 4 }, 3)).toBeNull();
  });
});

describe("execution leases", () => {
  test("a heartbeat grants now + the lease", () => {
    expect(leaseExpiryFrom(10_000, 60_000)).toBe(70_000);
  });

  test("renewal skips placements the scheduler wants gone and leases already there", () => {
    const keep = p({ leaseExpiresAtMs: 5 });
    const going = p({ desired: "absent", leaseExpiresAtMs: 5 });
    const current = p({ leaseExpiresAtMs: 70_000 });
    expect(leasesToRenew([keep, going, current], 70_000)).toEqual([keep]);
  });
});

describe("which placement a grant or delivery may reach", () => {
  test("wanted: this generation, not absent, not going, host not fenced", () => {
    expect(isWantedPlacement(p(), 1, "active")).toBe(true);
    expect(isWantedPlacement(p(), 2, "active")).toBe(false);
    expect(isWantedPlacement(p({ desired: "absent" }), 1, "active")).toBe(false);
    expect(isWantedPlacement(p({ state: "absent" }), 1, "active")).toBe(false);
    expect(isWantedPlacement(p(), 1, "disabled")).toBe(false);
    expect(isWantedPlacement(undefined, 1, "active")).toBe(false);
  });

  test("current running: running and meant to run, at this generation", () => {
    expect(isCurrentRunning(p({ state: "running", desired: "running" }), 1)).toBe(true);
    expect(isCurrentRunning(p({ state: "running", desired: "absent" }), 1)).toBe(false);
    expect(isCurrentRunning(p({ state: "preparing", desired: "running" }), 1)).toBe(false);
    expect(isCurrentRunning(p({ state: "running", desired: "running" }), 2)).toBe(false);
  });
});

describe("pause, suspend and resume on the Host (issue 21)", () => {
  test("a paused or suspended report applies only while the Host wants it; a run report moves them only toward running", () => {
    expect(placementStateAfter("running", "paused", "paused")).toBe("paused");
    expect(placementStateAfter("running", "paused", "running")).toBe("running");
    expect(placementStateAfter("paused", "suspended", "suspended")).toBe("suspended");
    expect(placementStateAfter("paused", "running", "paused")).toBe("paused");
    expect(placementStateAfter("suspended", "starting", "suspended")).toBe("suspended");
    expect(placementStateAfter("resuming", "running", "running")).toBe("running");
    expect(placementStateAfter("resuming", "paused", "running")).toBe("resuming");
  });
  test("a refusal wants the placement as it stayed; anything else is no refusal", () => {
    expect(desiredAfterRefusal("paused", "running", "VMM_UNSUPPORTED")).toBe("running");
    expect(desiredAfterRefusal("suspended", "paused", "VMM_UNSUPPORTED")).toBe("paused");
    expect(desiredAfterRefusal("paused", "running", undefined)).toBeNull();
    expect(desiredAfterRefusal("running", "running", "X")).toBeNull();
  });
  test("a resume needs what was given back; absence under the generation before a resume still applies", () => {
    const full = { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1280, slots: 1 };
    expect(resumeNeeds(full, heldAfter("suspended", full))).toEqual({
      cpuMillis: 1000,
      memoryMiB: 256,
      ephemeralDiskMiB: 0,
      slots: 0,
    });
    const p = { generation: 2, state: "suspended" as const, desired: "running" as const, leaseExpiresAtMs: 0 };
    expect(updateRejection(p, { generation: 1, seq: 1, state: "absent" }, 0)).toBeNull();
    expect(updateRejection(p, { generation: 1, seq: 1, state: "running" }, 0)).toBe("STALE_GENERATION");
  });
});
