import { describe, expect, test } from "bun:test";
import { unschedulableReasons, type HostFacts } from "./hostConditions.ts";

const now = 1_000_000;
const ok: HostFacts = {
  adminState: "active",
  heartbeatAtMs: now - 1000,
  isolationHealthy: true,
  clockSkewMs: 100,
  inventory: { cpuMillis: 4000, memoryMiB: 8192 },
  registered: { cpuMillis: 4000, memoryMiB: 8000 },
  volumesNearlyFull: false,
  overlapUntilMs: 0,
};

describe("host schedulability", () => {
  test("a healthy active host is schedulable", () => expect(unschedulableReasons(ok, now)).toEqual([]));
  test("each condition is reported with its code", () => {
    expect(unschedulableReasons({ ...ok, adminState: "draining" }, now)).toEqual(["HOST_NOT_ACTIVE"]);
    expect(unschedulableReasons({ ...ok, heartbeatAtMs: now - 40_000 }, now)).toEqual(["HOST_NOT_HEALTHY"]);
    expect(unschedulableReasons({ ...ok, overlapUntilMs: now + 1 }, now)).toEqual(["OVERLAPPING_AGENT_SESSION"]);
    expect(unschedulableReasons({ ...ok, inventory: { cpuMillis: 2000, memoryMiB: 8192 } }, now)).toEqual([
      "INVENTORY_MISMATCH",
    ]);
    expect(unschedulableReasons({ ...ok, clockSkewMs: 5001 }, now)).toEqual(["CLOCK_SKEW"]);
    expect(unschedulableReasons({ ...ok, clockSkewMs: 5000 }, now)).toEqual([]);
    expect(unschedulableReasons({ ...ok, isolationHealthy: false }, now)).toEqual(["ISOLATION_UNHEALTHY"]);
    expect(unschedulableReasons({ ...ok, volumesNearlyFull: true }, now)).toEqual(["VOLUMES_NEARLY_FULL"]);
    expect(unschedulableReasons({ ...ok, vmmStartFailing: true }, now)).toEqual(["VMM_START_FAILING"]);
  });
});
