/** Unit tests of mountRestore.ts: the mount plan from /proc/self/cgroup, the propagation check, and when the restore acts. */
import { expect, test } from "bun:test";
import { cgroupMountPlan, mountStaysLocal, restoreCgroupMounts, type CgroupMountStep } from "./mountRestore.ts";

/** /proc/self/mountinfo inside `ip netns exec`: "/" a slave of the host's, a fresh private sysfs on /sys, no cgroup mount. */
const NETNS_EXEC_MOUNTINFO = `55 1 254:0 / / rw,relatime master:1 - ext4 /dev/vda rw
58 55 0:41 / /sys rw,relatime - sysfs hostns rw
86 55 254:0 /run/netns /run/netns rw,relatime master:2 - ext4 /dev/vda rw`;
/** The host's own namespace under systemd: everything shared, cgroups mounted. */
const HOST_MOUNTINFO = `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:21 / /sys rw,nosuid shared:2 - sysfs sysfs rw
30 23 0:27 / /sys/fs/cgroup rw shared:3 - cgroup2 cgroup2 rw`;

test("plan: unified only → cgroup2 on /sys/fs/cgroup; hybrid → tmpfs, each v1 hierarchy by its controllers, unified at unified/", () => {
  expect(cgroupMountPlan("0::/system.slice/bb-agent.service\n")).toEqual([
    { fstype: "cgroup2", options: "", target: "/sys/fs/cgroup" },
  ]);
  const hybrid = cgroupMountPlan("9:name=systemd:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/\n8:pids:/\n0::/\n");
  expect(hybrid).toEqual<CgroupMountStep[]>([
    { fstype: "tmpfs", options: "mode=755", target: "/sys/fs/cgroup" },
    { fstype: "cgroup", options: "none,name=systemd", target: "/sys/fs/cgroup/systemd" },
    { fstype: "cgroup", options: "memory", target: "/sys/fs/cgroup/memory" },
    { fstype: "cgroup", options: "cpu,cpuacct", target: "/sys/fs/cgroup/cpu,cpuacct" },
    { fstype: "cgroup", options: "pids", target: "/sys/fs/cgroup/pids" },
    { fstype: "cgroup2", options: "", target: "/sys/fs/cgroup/unified" },
  ]);
  expect(cgroupMountPlan("")).toEqual([]);
  // Malformed or hostile text never reaches mount(8) options.
  expect(() => cgroupMountPlan("1:cpu,-o remount:/")).toThrow(/bad controller list/);
  expect(() => cgroupMountPlan("garbage")).toThrow(/unexpected line/);
  // A named hierarchy's name becomes a directory under /sys/fs/cgroup: "." and ".." would mount over it or above it.
  for (const name of ["name=..", "name=.", "..", "."])
    expect(() => cgroupMountPlan(`9:${name}:/\n0::/`)).toThrow(/bad controller list/);
  expect(() => cgroupMountPlan(Array.from({ length: 18 }, (_, i) => `${i + 1}:c${i}:/`).join("\n"))).toThrow(
    /at most 17/,
  );
});

test("propagation: a mount under ip netns exec's private sysfs stays local; under the host's shared /sys it would not", () => {
  expect(mountStaysLocal(NETNS_EXEC_MOUNTINFO, "/sys/fs/cgroup")).toBe(true);
  expect(mountStaysLocal(HOST_MOUNTINFO, "/sys/fs/cgroup")).toBe(false);
  // The slave "/" (master:1, no shared:) propagates nothing outward either.
  expect(mountStaysLocal(NETNS_EXEC_MOUNTINFO, "/opt/x")).toBe(true);
  // A prefix that is not a path prefix does not count (/sysfoo is not under /sys).
  expect(
    mountStaysLocal(
      `22 1 254:0 / / rw shared:1 - ext4 /dev/vda rw\n58 22 0:41 / /sysfoo rw - sysfs s rw`,
      "/sys/fs/cgroup",
    ),
  ).toBe(false);
  expect(mountStaysLocal("", "/sys/fs/cgroup")).toBe(false);
});

test("restore: mounts the plan only when no hierarchy is visible and the mounts stay local", async () => {
  const run = async (mountinfo: string) => {
    const done: string[] = [];
    const r = await restoreCgroupMounts({
      readMountinfo: () => mountinfo,
      readProcCgroup: () => "4:memory:/a\n0::/",
      mount: async (s) => void done.push(`${s.fstype} ${s.target}`),
    });
    return { r, done };
  };
  const inNetns = await run(NETNS_EXEC_MOUNTINFO);
  expect(inNetns.r).toEqual({
    restored: true,
    mounted: ["/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"],
  });
  expect(inNetns.done).toEqual([
    "tmpfs /sys/fs/cgroup",
    "cgroup /sys/fs/cgroup/memory",
    "cgroup2 /sys/fs/cgroup/unified",
  ]);
  const host = await run(HOST_MOUNTINFO);
  expect(host).toEqual({ r: { restored: false, reason: "cgroup hierarchies are mounted" }, done: [] });
  const sharedNoCgroups = await run(HOST_MOUNTINFO.split("\n").slice(0, 2).join("\n"));
  expect(sharedNoCgroups.r.restored).toBe(false);
  expect(sharedNoCgroups.done).toEqual([]);
  // A refused mount is an error for the caller.
  await expect(
    restoreCgroupMounts({
      readMountinfo: () => NETNS_EXEC_MOUNTINFO,
      readProcCgroup: () => "0::/",
      mount: async () => {
        throw new Error("mount: permission denied");
      },
    }),
  ).rejects.toThrow("permission denied");
});

test("propagation: the mount that holds the path is the one a path walk reaches (overmounts and escaped mount points)", () => {
  // /sys/fs is private but hidden: a shared sysfs was mounted over /sys afterwards (its parent is the /sys below).
  const overmounted = `22 1 254:0 / / rw shared:1 - ext4 /dev/vda rw
23 22 0:21 / /sys rw shared:2 - sysfs sysfs rw
40 23 0:50 / /sys/fs rw - tmpfs t rw
41 23 0:51 / /sys rw shared:5 - sysfs sysfs rw`;
  expect(mountStaysLocal(overmounted, "/sys/fs/cgroup")).toBe(false);
  // A deeper mount whose parent is "/" is hidden by a later mount at /sys on "/": the walk enters /sys first.
  const hiddenDeeper = `22 1 254:0 / / rw master:1 - ext4 /dev/vda rw
30 22 0:40 / /sys/fs rw - tmpfs t rw
31 22 0:41 / /sys rw shared:7 - sysfs s rw`;
  expect(mountStaysLocal(hiddenDeeper, "/sys/fs/cgroup")).toBe(false);
  // And the other way round: a private mount over a shared one holds the path.
  const privateOver = `22 1 254:0 / / rw shared:1 - ext4 /dev/vda rw
23 22 0:21 / /sys rw shared:2 - sysfs sysfs rw
41 23 0:51 / /sys rw - sysfs hostns rw`;
  expect(mountStaysLocal(privateOver, "/sys/fs/cgroup")).toBe(true);
  // Mount points escape space, tab, newline and backslash as octal (\\040 \\011 \\012 \\134).
  const escaped = (point: string) =>
    `22 1 254:0 / / rw shared:1 - ext4 /dev/vda rw\n50 22 0:60 / ${point} rw - tmpfs t rw`;
  expect(mountStaysLocal(escaped("/mnt/a\\040b"), "/mnt/a b/c")).toBe(true);
  expect(mountStaysLocal(escaped("/mnt/a\\011b"), "/mnt/a\tb/c")).toBe(true);
  expect(mountStaysLocal(escaped("/mnt/a\\012b"), "/mnt/a\nb/c")).toBe(true);
  expect(mountStaysLocal(escaped("/mnt/a\\134b"), "/mnt/a\\b/c")).toBe(true);
  // An escaped backslash followed by digits is a backslash and the digits, not a second escape.
  expect(mountStaysLocal(escaped("/mnt/a\\134040"), "/mnt/a\\040/c")).toBe(true);
  expect(mountStaysLocal(escaped("/mnt/a\\134040"), "/mnt/a 040/c")).toBe(false);
});
