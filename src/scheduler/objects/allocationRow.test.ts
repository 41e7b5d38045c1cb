/**
 * The Allocation's one row codec (allocationRow.ts): decoding is the inverse
 * of encoding for every field, the encoded row fills every column of the
 * drizzle table (so a column added to the table and the record is stored
 * without touching the codec), a damaged row is refused with a message
 * naming what is wrong, and a write updates only the columns that changed.
 */
import { describe, expect, test } from "bun:test";
import { getTableColumns } from "drizzle-orm";
import { DEFAULT_TIMEOUTS } from "../../domain/allocation.ts";
import { newAllocationRecord } from "../../domain/reconcile.ts";
import { DamagedStateError } from "../runtime/faults.ts";
import { allocationTable } from "./allocationSchema.ts";
import { changedColumns, decodeAllocation, encodeAllocation, type StoredAllocation } from "./allocationRow.ts";

const SPEC = { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"0".repeat(64)}` };

function stored(over: Partial<StoredAllocation["rec"]> = {}): StoredAllocation {
  const rec = newAllocationRecord(
    {
      allocationId: "alc_1",
      identity: "controller:t",
      clientRequestId: "r1",
      workloadClass: "small",
      ttlMs: 60_000,
      network: { networkId: "net_1", address: "fd00::5" },
    },
    1_000,
    DEFAULT_TIMEOUTS,
  );
  return { rec: { ...rec, ...over }, spec: SPEC, labels: { team: "a" }, bodyDigest: "d1" };
}

describe("allocation row codec", () => {
  test("decode(encode(s)) is s: a new allocation and one with every optional field set", () => {
    const fresh = stored();
    expect(decodeAllocation(encodeAllocation(fresh))).toEqual(fresh);
    const busy = stored({
      state: "ready",
      hostId: "h1",
      placementId: "plc_1",
      reservationKey: "reserve:alc_1:1:h1",
      observedState: "running",
      reason: "HOST_LOST",
      conditions: ["replacement_blocked"],
      triedHosts: ["h0", "h1"],
      guestReady: true,
      payloadConsumed: true,
      replaceAfterAbsent: true,
      replacementAuthorized: true,
      workloadExitCode: 3,
      terminalAtMs: 9,
      placement: {
        at: "2030-01-01T00:00:00.000Z",
        result: "reserved",
        hostId: "h1",
        hostsConsidered: 2,
        noFit: {},
        unschedulable: {},
      },
      grantGeneration: 1,
      connectionsFencedGeneration: 1,
      pendingReplacement: "HOST_LOST",
    });
    expect(decodeAllocation(encodeAllocation(busy))).toEqual(busy);
  });

  test("the encoded row fills exactly the table's columns", () => {
    expect(Object.keys(encodeAllocation(stored())).sort()).toEqual(
      Object.keys(getTableColumns(allocationTable)).sort(),
    );
  });

  test("a damaged row is refused, naming what is wrong (never a fresh start)", () => {
    const row = encodeAllocation(stored());
    expect(() => decodeAllocation({ ...row, conditionsJson: "{" })).toThrow(DamagedStateError);
    expect(() => decodeAllocation({ ...row, conditionsJson: "{" })).toThrow("conditions is not JSON");
    expect(() => decodeAllocation({ ...row, triedHostsJson: '"h1"' })).toThrow("tried hosts does not match its schema");
    expect(() => decodeAllocation({ ...row, state: "lost" as never })).toThrow('unknown state "lost"');
    expect(() => decodeAllocation({ ...row, observedState: "gone" as never })).toThrow("unknown observed state");
    expect(() => decodeAllocation({ ...row, specJson: "{}" })).toThrow("spec does not match its schema");
  });

  test("a write updates only the columns that changed, never the key", () => {
    const before = encodeAllocation(stored());
    const after = encodeAllocation(stored({ state: "reserving", triedHosts: ["h1"], guestReady: false }));
    expect(changedColumns(before, after)).toEqual({ state: "reserving", triedHostsJson: '["h1"]' });
    expect(changedColumns(before, { ...before, obj: "other" })).toEqual({});
  });
});
