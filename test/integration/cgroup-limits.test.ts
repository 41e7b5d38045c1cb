/**
 * Placement cgroups on this host's real hierarchies (v2, v1 or hybrid, as
 * detected): limits written and read back, a process moved in with
 * RLIMIT_FSIZE applied, removal refused while it lives and done once it is
 * gone. Needs root; otherwise prints why and skips. Leaves nothing behind.
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { detectControllers } from "../../src/agent/isolation/cgroups/hierarchy.ts";
import { placementLimits } from "../../src/agent/isolation/cgroups/limits.ts";
import {
  addToPlacementCgroup,
  applyFileSizeLimit,
  cgroupPids,
  createPlacementCgroup,
  removePlacementCgroup,
  type PlacementCgroup,
} from "../../src/agent/isolation/cgroups/placementCgroup.ts";
import { DEFAULT_CGROUP_POLICY } from "../../src/agent/isolation/cgroups/policy.ts";

const skipReason =
  process.getuid?.() !== 0
    ? "needs root (cgroup writes)"
    : !Bun.which("prlimit")
      ? "prlimit is not installed (util-linux)"
      : null;
if (skipReason) console.log(`SKIP test/integration/cgroup-limits.test.ts: ${skipReason}`);

const name = `bb-cgtest${process.pid}`;
let cg: PlacementCgroup | undefined;
let proc: ReturnType<typeof Bun.spawn> | undefined;

afterAll(async () => {
  proc?.kill("SIGKILL");
  await proc?.exited;
  if (cg) removePlacementCgroup(cg);
});

const read = (dir: string, f: string) => readFileSync(join(dir, f), "utf8").trim();

test.skipIf(!!skipReason)(
  "limits applied per controller version, process confined, cgroup removed after it exits",
  async () => {
    const placed = detectControllers();
    console.log(`cgroup-limits: ${placed.map((p) => `${p.controller} v${p.mount.version}`).join(", ")}`);
    const limits = placementLimits({ cpuMillis: 1500, memoryMiB: 128, ephemeralDiskMiB: 64 }, DEFAULT_CGROUP_POLICY);
    cg = createPlacementCgroup(name, limits, DEFAULT_CGROUP_POLICY, placed);
    const mem = String(limits.memoryBytes);
    for (const d of cg.dirs) {
      expect(d.dir.endsWith(`/${name}`)).toBe(true);
      for (const c of d.controllers) {
        if (d.version === 2) {
          if (c === "cpu") expect(read(d.dir, "cpu.max")).toBe("150000 100000");
          if (c === "memory") expect(read(d.dir, "memory.max")).toBe(mem);
          if (c === "memory" && existsSync(join(d.dir, "memory.swap.max")))
            expect(read(d.dir, "memory.swap.max")).toBe("0");
        } else {
          if (c === "cpu")
            expect([read(d.dir, "cpu.cfs_quota_us"), read(d.dir, "cpu.cfs_period_us")]).toEqual(["150000", "100000"]);
          if (c === "memory") expect(read(d.dir, "memory.limit_in_bytes")).toBe(mem);
          if (c === "memory" && existsSync(join(d.dir, "memory.memsw.limit_in_bytes")))
            expect(read(d.dir, "memory.memsw.limit_in_bytes")).toBe(mem);
        }
        if (c === "pids") expect(read(d.dir, "pids.max")).toBe("256");
      }
    }
    expect(createPlacementCgroup(name, limits, DEFAULT_CGROUP_POLICY, placed)).toEqual(cg); // idempotent re-create

    proc = Bun.spawn(["sleep", "60"], { stdout: "ignore", stderr: "ignore" });
    addToPlacementCgroup(cg, proc.pid);
    await applyFileSizeLimit(proc.pid, limits.fileSizeBytes);
    for (const d of cg.dirs) expect(cgroupPids(d.dir)).toEqual([proc.pid]);
    expect(readFileSync(`/proc/${proc.pid}/limits`, "utf8")).toMatch(/Max file size\s+67108864\s+67108864/);

    const t = performance.now();
    expect(removePlacementCgroup(cg).length).toBe(cg.dirs.length); // refused while the process lives
    console.log(`cgroup-limits: refusal took ${Math.round(performance.now() - t)} ms`);
    for (const d of cg.dirs) expect(existsSync(d.dir)).toBe(true);
    proc.kill("SIGKILL");
    await proc.exited;
    proc = undefined;
    expect(removePlacementCgroup(cg)).toEqual([]);
    for (const d of cg.dirs) expect(existsSync(d.dir)).toBe(false);
    expect(removePlacementCgroup(cg)).toEqual([]); // idempotent
    cg = undefined;
  },
  30_000,
);
