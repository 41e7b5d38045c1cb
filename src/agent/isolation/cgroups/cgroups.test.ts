/** Unit tests of cgroup value math, hierarchy detection parsing and path derivation. */
import { expect, test } from "bun:test";
import { placementLimits, v1Writes, v2Writes } from "./limits.ts";
import { parseCgroupMounts, parseProcCgroup, placeControllers } from "./hierarchy.ts";
import { cgroupPolicyFrom, DEFAULT_CGROUP_POLICY } from "./policy.ts";
import { placementCgroupOf } from "./placementCgroup.ts";

const MIB = 1024 * 1024;

test("limits: cpu quota from cpuMillis, memory = RAM + overhead, fsize = ephemeral disk", () => {
  const l = placementLimits({ cpuMillis: 1500, memoryMiB: 256, ephemeralDiskMiB: 2048 }, DEFAULT_CGROUP_POLICY);
  expect(l).toEqual({
    cpuQuotaUs: 150_000,
    cpuPeriodUs: 100_000,
    memoryBytes: (256 + 192) * MIB,
    pidsMax: 256,
    fileSizeBytes: 2048 * MIB,
  });
  expect(placementLimits({ cpuMillis: 1, memoryMiB: 16, ephemeralDiskMiB: 1 }, DEFAULT_CGROUP_POLICY).cpuQuotaUs).toBe(
    1000,
  ); // kernel minimum
  expect(v2Writes("cpu", l, true)).toEqual([["cpu.max", "150000 100000"]]);
  expect(v2Writes("memory", l, true)).toEqual([
    ["memory.max", String(448 * MIB)],
    ["memory.swap.max", "0"],
  ]);
  expect(v2Writes("memory", l, false)).toEqual([["memory.max", String(448 * MIB)]]);
  expect(v1Writes("cpu", l, true)).toEqual([
    ["cpu.cfs_period_us", "100000"],
    ["cpu.cfs_quota_us", "150000"],
  ]);
  expect(v1Writes("memory", l, true)).toEqual([
    ["memory.limit_in_bytes", String(448 * MIB)],
    ["memory.memsw.limit_in_bytes", String(448 * MIB)],
  ]);
  expect(v1Writes("pids", l, true)).toEqual([["pids.max", "256"]]);
});

const HYBRID_MOUNTINFO = `30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:28 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
33 30 0:29 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
34 30 0:30 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
35 30 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw`;

test("hybrid host: each controller found on its own hierarchy; v2 wins when it offers the controller", () => {
  const mounts = parseCgroupMounts(HYBRID_MOUNTINFO);
  expect(mounts.map((m) => `${m.version}:${m.mountPoint}:${m.controllers.join(",")}`)).toEqual([
    "1:/sys/fs/cgroup/cpu:cpu",
    "1:/sys/fs/cgroup/memory:memory",
    "1:/sys/fs/cgroup/pids:pids",
    "1:/sys/fs/cgroup/systemd:",
    "2:/sys/fs/cgroup/unified:",
  ]);
  const proc = parseProcCgroup("4:memory:/process_api/abc\n1:cpu:/\n8:pids:/\n0::/");
  const placed = placeControllers(mounts, proc);
  expect(placed.map((p) => `${p.controller} v${p.mount.version} ${p.ownPath}`)).toEqual([
    "cpu v1 /",
    "memory v1 /process_api/abc",
    "pids v1 /",
  ]);
  const cg = placementCgroupOf("bb-0011", DEFAULT_CGROUP_POLICY, placed);
  expect(cg.dirs.map((d) => d.dir)).toEqual([
    "/sys/fs/cgroup/cpu/beachball/bb-0011",
    "/sys/fs/cgroup/memory/process_api/abc/beachball/bb-0011",
    "/sys/fs/cgroup/pids/beachball/bb-0011",
  ]);

  const v2 = parseCgroupMounts("35 30 0:31 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw");
  v2[0]!.controllers = ["cpu", "memory", "pids"];
  const placedV2 = placeControllers(v2, parseProcCgroup("0::/system.slice/beachball.service"));
  const cg2 = placementCgroupOf("bb-0011", cgroupPolicyFrom({ cgroupParent: "/beachball.slice" }), placedV2);
  expect(cg2.dirs).toEqual([
    {
      version: 2,
      mountPoint: "/sys/fs/cgroup",
      dir: "/sys/fs/cgroup/beachball.slice/bb-0011",
      controllers: ["cpu", "memory", "pids"],
    },
  ]);
});

test("policy validation", () => {
  expect(() => cgroupPolicyFrom({ cgroupParent: "/a/../b" })).toThrow();
  expect(() => cgroupPolicyFrom({ cgroupParent: "relative" })).toThrow();
  expect(() => cgroupPolicyFrom({ vmmPidsMax: 2 })).toThrow();
  expect(() => placementCgroupOf("../etc", DEFAULT_CGROUP_POLICY, [])).toThrow();
});

test("parseCgroupMounts unescapes the mount point and the root (octal escapes of mountinfo)", () => {
  const m = parseCgroupMounts(
    "30 23 0:27 /my\\040slice/a\\134b /sys/fs/cgroup/x\\011y rw shared:3 - cgroup2 cgroup2 rw\n",
  );
  expect(m).toEqual([{ version: 2, mountPoint: "/sys/fs/cgroup/x\ty", root: "/my slice/a\\b", controllers: [] }]);
});
