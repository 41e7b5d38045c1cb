/**
 * How allocations read to a person: the detail block says why a pending
 * allocation waits and shows a VM's exit diagnosis, and nothing a host or
 * guest sent can put a control character on the terminal; the host table
 * names suspended VMs with the disk they hold (issue 21).
 */
import { describe, expect, test } from "bun:test";
import type { AllocationEvent, AllocationView } from "../protocol/api.ts";
import type { HostView } from "../protocol/views.ts";
import { allocationDetail, allocationTable, formatEvent, hostTable, stripControl } from "./format.ts";

const ID = `alloc_${"b".repeat(32)}`;
const v: AllocationView = {
  allocationId: ID,
  clientRequestId: "c",
  workloadClass: "ci-small",
  state: "pending",
  generation: 2,
  hostId: null,
  placementId: null,
  reason: null,
  conditions: ["NO_CAPACITY"],
  resources: { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024 },
  imageDigest: "sha256:00",
  labels: { team: "ci" },
  createdAt: "2026-11-30T00:00:00.000Z",
  updatedAt: "2026-11-30T00:00:00.000Z",
  expiresAt: "2026-11-30T01:00:00.000Z",
  workloadExitCode: null,
  placement: {
    at: "2026-11-30T00:00:05.000Z",
    result: "no_eligible_host",
    hostId: null,
    hostsConsidered: 1,
    noFit: { INSUFFICIENT_MEMORY: 1 },
    unschedulable: {},
  },
};

describe("allocation detail", () => {
  test("a pending allocation says why it waits, with its conditions", () => {
    const d = allocationDetail(v);
    expect(d).toContain(`ID:          ${ID}\nState:       pending\n`);
    expect(d).toContain("Conditions:  NO_CAPACITY\n");
    expect(d).toContain(
      "Why pending: no eligible host among 1: INSUFFICIENT_MEMORY on 1 host (last attempt 2026-11-30T00:00:05.000Z)",
    );
    expect(d).toContain("Resources:   1000m CPU, 256 MiB memory, 1024 MiB disk");
  });

  test("a placed allocation shows its last attempt instead; a VM that ended on its own shows its diagnosis and console tail, control characters removed", () => {
    const placed: AllocationView = {
      ...v,
      state: "failed",
      conditions: [],
      reason: "VM_EXITED",
      hostId: "h-1",
      placement: { ...v.placement!, result: "reserved", hostId: "h-1" },
      placementExit: {
        generation: 2,
        placementId: "p-1",
        reason: "KERNEL_PANIC",
        consoleTail: "Kernel panic - not syncing\x1b[2J\n\x07end trace\n",
        at: "2026-11-30T00:01:00.000Z",
      },
    };
    const d = allocationDetail(placed);
    expect(d).not.toContain("Why pending");
    expect(d).toContain("Last attempt:");
    expect(d).toContain("VM exit:      generation 2 ended on its own: KERNEL_PANIC (2026-11-30T00:01:00.000Z)");
    expect(d).toEndWith("Console tail (last kernel lines):\n  Kernel panic - not syncing[2J\n  end trace");
    expect(d).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/);
  });

  test("the table has a header and shows conditions when there is no reason", () => {
    const lines = allocationTable([v]).split("\n");
    expect(lines[0]).toMatch(/^ID\s+STATE\s+CLASS\s+HOST\s+GEN\s+EXIT\s+REASON\s+CREATED$/);
    expect(lines[1]).toMatch(
      new RegExp(`^${ID}  pending  ci-small  -\\s+2\\s+-\\s+NO_CAPACITY\\s+2026-11-30T00:00:00.000Z$`),
    );
  });

  test("events: state change, reason, workload exit code, VM exit reason", () => {
    const e: AllocationEvent = {
      seq: 9,
      eventId: "e",
      type: "placement.error",
      at: "T",
      allocationId: ID,
      generation: 2,
      placementId: "p",
      hostId: "h",
      fromState: "ready",
      toState: "failed",
      reason: "VM_EXITED",
      clientId: "c",
      correlationId: "c",
      data: { exitReason: "GUEST_OOM\x1b]0;x\x07" },
    };
    expect(formatEvent(e)).toBe("T  #9 placement.error ready → failed [VM_EXITED] vmExit=GUEST_OOM]0;x");
    expect(
      formatEvent({
        ...e,
        type: "workload.exited",
        fromState: null,
        toState: null,
        reason: null,
        data: { exitCode: 3 },
      }),
    ).toBe("T  #9 workload.exited exitCode=3");
    expect(stripControl("a\tb\nc\x9bd")).toBe("a\tb\ncd");
  });
});

describe("host table", () => {
  const res = { cpuMillis: 2000, memoryMiB: 4096, ephemeralDiskMiB: 65536, slots: 4 };
  const host = (suspended: HostView["suspended"]): HostView => ({
    hostId: "h1",
    adminState: "active",
    health: "healthy",
    registered: res,
    allocatable: res,
    free: res,
    placements: [],
    heartbeatAt: null,
    vmmDriver: "qemu-microvm",
    unschedulable: [],
    credentialVersion: 1,
    suspended,
  });
  test("SUSPENDED shows the count, the disk they hold and the longest suspension; a dash when none", () => {
    const t = hostTable([
      host({ placements: 2, diskMiB: 4608, oldestReportAt: "2026-12-01T00:00:00.000Z", maxAgeSeconds: 86_400 }),
      host({ placements: 0, diskMiB: 0, oldestReportAt: null, maxAgeSeconds: 1_800 }),
    ]);
    expect(t).toContain("SUSPENDED");
    expect(t).toContain("2 (4608 MiB, max 24h)");
    expect(t.split("\n")[2]).not.toContain("MiB, max");
  });
});
