/** Unit tests of the pure snapshot builders: compat descriptor, device list, differences. */
import { expect, test } from "bun:test";
import { compatDifferences } from "../snapshotCommon.ts";
import { deviceList, snapshotCompat, snapshotMemoryBytes } from "./snapshot.ts";

const host = { cpuModel: "Test CPU", arch: "x64" };

test("the device list follows the root format: ext4 root read-write, squashfs root read-only", () => {
  expect(deviceList({ rootDiskPath: "/a/rootfs.ext4" })).toBe(
    "block:rootfs=/rootfs.ext4:rw,block:scratch=/scratch.ext4:rw,net:eth0,vsock:3=/v.sock",
  );
  expect(deviceList({ rootDiskPath: "/a/img.squashfs" })).toBe(
    "block:rootfs=/rootfs.squashfs:ro,block:scratch=/scratch.ext4:rw,net:eth0,vsock:3=/v.sock",
  );
});

test("compatDifferences names every differing or one-sided key, sorted, and skips the ignored ones", () => {
  const a = snapshotCompat({ vcpus: 2, memoryMiB: 256, rootDiskPath: "/r.ext4" }, "1.17.0", host);
  expect(compatDifferences(a, { ...a })).toEqual([]);
  const b = snapshotCompat({ vcpus: 1, memoryMiB: 512, rootDiskPath: "/r.squashfs" }, "1.16.0", host);
  expect(compatDifferences(a, b)).toEqual(["devices", "firecracker_version", "mem_size_mib", "vcpu_count"]);
  expect(compatDifferences(a, b, ["firecracker_version"])).toEqual(["devices", "mem_size_mib", "vcpu_count"]);
  const { arch: _, ...noArch } = a;
  expect(compatDifferences(a, noArch)).toEqual(["arch"]);
});

test("the memory file of a Full snapshot is the guest's RAM, bytes", () => {
  expect(snapshotMemoryBytes({ memoryMiB: 256 })).toBe(256 * 1024 * 1024);
});
