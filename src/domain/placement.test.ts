import { describe, expect, test } from "bun:test";
import {
  explainNoCandidate,
  filterReason,
  rankCandidates,
  supersedes,
  type Advertisement,
  type PlacementRequest,
} from "./placement.ts";

const now = 1_000_000;
const ad = (hostId: string, o: Partial<Advertisement> = {}): Advertisement => ({
  hostId,
  revision: 1,
  adminState: "active",
  heartbeatAtMs: now - 1000,
  region: "local",
  architecture: "x86_64",
  labels: {},
  agentProtocolVersion: "1.0",
  isolationHealthy: true,
  unschedulable: [],
  free: { cpuMillis: 4000, memoryMiB: 4096, ephemeralDiskMiB: 10_000, slots: 4 },
  cachedImages: [],
  ...o,
});
const req: PlacementRequest = {
  allocationId: "alloc_1",
  resources: { cpuMillis: 1000, memoryMiB: 512, ephemeralDiskMiB: 1024, slots: 1 },
  imageDigest: "sha256:x",
  architecture: "x86_64",
  regions: null,
  requiredLabels: {},
  agentProtocolVersion: "1.0",
  exclude: new Set(),
};

describe("placement filter", () => {
  test("every filter rejects with its reason", () => {
    expect(filterReason(ad("h"), req, now)).toBeNull();
    expect(filterReason(ad("h", { adminState: "draining" }), req, now)).toBe("HOST_NOT_ACTIVE");
    expect(filterReason(ad("h", { heartbeatAtMs: now - 31_000 }), req, now)).toBe("HOST_NOT_HEALTHY");
    expect(filterReason(ad("h", { architecture: "aarch64" }), req, now)).toBe("ARCHITECTURE_MISMATCH");
    expect(filterReason(ad("h"), { ...req, regions: ["eu"] }, now)).toBe("REGION_NOT_ALLOWED");
    expect(filterReason(ad("h"), { ...req, requiredLabels: { gpu: "yes" } }, now)).toBe("LABEL_MISSING");
    expect(filterReason(ad("h", { agentProtocolVersion: "2.0" }), req, now)).toBe("PROTOCOL_INCOMPATIBLE");
    expect(filterReason(ad("h", { isolationHealthy: false }), req, now)).toBe("ISOLATION_UNHEALTHY");
    expect(filterReason(ad("h", { unschedulable: ["CLOCK_SKEW"] }), req, now)).toBe("CLOCK_SKEW");
    expect(
      filterReason(
        ad("h", { free: { cpuMillis: 500, memoryMiB: 4096, ephemeralDiskMiB: 10_000, slots: 4 } }),
        req,
        now,
      ),
    ).toBe("INSUFFICIENT_CPU");
    expect(filterReason(ad("h"), { ...req, exclude: new Set(["h"]) }, now)).toBe("ALREADY_TRIED");
    // A fork runs only where its parent's snapshot is (issue 21).
    expect(filterReason(ad("h"), { ...req, onlyHost: "other" }, now)).toBe("HOST_NOT_ALLOWED");
    expect(filterReason(ad("h"), { ...req, onlyHost: "h" }, now)).toBeNull();
  });
});

describe("placement scoring", () => {
  test("cached image first, then freshest heartbeat, then tightest memory and CPU", () => {
    const ranked = rankCandidates(
      [
        ad("roomy", { heartbeatAtMs: now - 100 }),
        ad("cached", { cachedImages: ["sha256:x"], heartbeatAtMs: now - 5000 }),
        ad("tight", {
          heartbeatAtMs: now - 100,
          free: { cpuMillis: 1000, memoryMiB: 600, ephemeralDiskMiB: 2000, slots: 1 },
        }),
        ad("stale", { heartbeatAtMs: now - 9000 }),
      ],
      req,
      now,
    ).map((a) => a.hostId);
    expect(ranked).toEqual(["cached", "tight", "roomy", "stale"]);
  });
  test("ties break by a stable hash of allocation and host", () => {
    const a = rankCandidates([ad("a"), ad("b"), ad("c")], req, now).map((x) => x.hostId);
    const b = rankCandidates([ad("c"), ad("b"), ad("a")], req, now).map((x) => x.hostId);
    expect(a).toEqual(b);
  });
  test("an older advertisement never replaces a newer one", () => {
    expect(supersedes(ad("h", { revision: 5 }), ad("h", { revision: 4 }))).toBe(false);
    expect(supersedes(ad("h", { revision: 5 }), ad("h", { revision: 6 }))).toBe(true);
    expect(supersedes(undefined, ad("h"))).toBe(true);
  });
});

describe("why no host took a request", () => {
  test("counts each host's first failing check, split into misfits and host conditions", () => {
    const full = { cpuMillis: 500, memoryMiB: 4096, ephemeralDiskMiB: 10_000, slots: 4 };
    const why = explainNoCandidate(
      [
        ad("a", { free: full }),
        ad("b", { free: full }),
        ad("c", { unschedulable: ["CLOCK_SKEW"] }),
        ad("d", { adminState: "draining" }),
      ],
      req,
      now,
    );
    expect(why).toEqual({
      hostsConsidered: 4,
      noFit: { INSUFFICIENT_CPU: 2 },
      unschedulable: { CLOCK_SKEW: 1, HOST_NOT_ACTIVE: 1 },
    });
  });
});
