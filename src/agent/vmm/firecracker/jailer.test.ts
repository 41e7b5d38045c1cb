import { expect, test } from "bun:test";
import { allocateJailId, assertJailerId, cgroupLimits, jailerArgv, jailLayout } from "./jailer.ts";

test("instance IDs follow jailer.md: alphanumerics and hyphens, 1..64 characters", () => {
  expect(() => assertJailerId("bb-0123456789abcdef01234567")).not.toThrow();
  expect(() => assertJailerId("a".repeat(64))).not.toThrow();
  for (const bad of ["", "a".repeat(65), "bb_1", "../x", "bb 1", "bb/1"])
    expect(() => assertJailerId(bad), bad).toThrow(expect.objectContaining({ code: "VMM_START_FAILED" }));
});

test("allocateJailId picks the lowest free ID and fails when the range is exhausted", () => {
  const range = { first: 1000, count: 3 };
  expect(allocateJailId(new Set(), range)).toBe(1000);
  expect(allocateJailId(new Set([1000, 1002]), range)).toBe(1001);
  expect(allocateJailId(new Set([999, 1003]), range)).toBe(1000);
  expect(() => allocateJailId(new Set([1000, 1001, 1002]), range)).toThrow(/exhausted/);
  expect(() => allocateJailId(new Set(), { first: 0, count: 3 })).toThrow(/invalid/);
});

test("jailLayout places the jail under <base>/<exec_file_name>/<id>/root", () => {
  const l = jailLayout("/srv/jailer", "/usr/bin/firecracker-v1.9", "bb-1");
  expect(l).toEqual({
    jailDir: "/srv/jailer/firecracker-v1.9/bb-1",
    root: "/srv/jailer/firecracker-v1.9/bb-1/root",
    apiSocket: "/srv/jailer/firecracker-v1.9/bb-1/root/run/firecracker.socket",
    pidFile: "/srv/jailer/firecracker-v1.9/bb-1/root/firecracker-v1.9.pid",
    vsockUds: "/srv/jailer/firecracker-v1.9/bb-1/root/v.sock",
  });
  expect(() => jailLayout("/srv/jailer", "/usr/bin/firecracker", "../../etc")).toThrow();
});

test("cgroup limits: vcpus CPUs per 100 ms period, guest RAM plus overhead in bytes", () => {
  expect(cgroupLimits(3, 512, 32, 10)).toEqual({
    cpuMax: "300000 100000",
    memoryMaxBytes: 544 * 1024 * 1024,
    pidsMax: 10,
  });
});

test("jailerArgv rejects a netns name that is not a plain name", () => {
  const a = {
    jailerBinary: "j",
    firecrackerBinary: "f",
    instanceId: "bb-1",
    uid: 1,
    gid: 1,
    chrootBase: "/c",
    limits: cgroupLimits(1, 128),
    parentCgroup: "p",
    fsizeBytes: 1,
  };
  expect(jailerArgv({ ...a, netns: "bb-1" })).toContain("/var/run/netns/bb-1");
  expect(() => jailerArgv({ ...a, netns: "../x" })).toThrow(/netns/);
  expect(jailerArgv({ ...a, netns: "n" })).not.toContain("--daemonize");
});
