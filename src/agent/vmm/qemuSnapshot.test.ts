/** The pure parts of QEMU suspend and restore (qemuSnapshot.ts); the QMP side runs on a real guest in test/integration/vm.test.ts. */
import { expect, test } from "bun:test";
import type { VmSpec } from "./driver.ts";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { QemuMicrovmDriver, qemuArgs } from "./qemu.ts";
import { guestRamPath, plainPath, qemuSnapshotCompat, ramBackendArgs } from "./qemuSnapshot.ts";
import { compatDifferences } from "./snapshotCommon.ts";

const spec: VmSpec = {
  instanceId: "bb-0123456789ab",
  dir: "/a",
  vcpus: 1,
  memoryMiB: 256,
  kernelPath: "/a/vmlinux",
  rootDiskPath: "/a/root.ext4",
  netns: "bb-0123456789ab",
  tapName: "bbtap0",
  kernelArgs: [],
  consoleLogPath: "/a/console.log",
  controlSocketPath: "/a/ctl.sock",
};

test("a suspendable VM keeps its RAM in a shared file in its directory; others have plain RAM", () => {
  expect(qemuArgs(spec, "tcg", 1)).not.toContain("-object");
  const a = qemuArgs({ ...spec, suspendable: true }, "tcg", 1);
  expect(a.slice(a.indexOf("-object"), a.indexOf("-object") + 4)).toEqual([
    "-object",
    "memory-backend-file,id=ram,size=256M,mem-path=/a/guest.ram,share=on",
    "-machine",
    "memory-backend=ram",
  ]);
  expect(guestRamPath(spec)).toBe("/a/guest.ram");
  expect(ramBackendArgs(spec, "/s/guest.ram", false)[1]).toContain("mem-path=/s/guest.ram,share=off"); // a restore: copy-on-write
});

test("only plain absolute paths reach a migration URI (QEMU hands exec: to a shell)", () => {
  expect(plainPath("/var/lib/bb/snap-1/device.state")).toBe("/var/lib/bb/snap-1/device.state");
  for (const bad of ["relative/x", "/a b", "/a;rm -rf /", "/a/$(x)", "/a/../b", "/a'b", "/a\nb"])
    expect(() => plainPath(bad), bad).toThrow(/not plain enough/);
});

test("the compatibility descriptor names what a migration stream is tied to", () => {
  const a = qemuSnapshotCompat(spec, "7.2.22", "tcg");
  expect(a).toEqual({
    qemu_version: "7.2.22",
    machine: "microvm",
    accel: "tcg",
    cpu: "max",
    vcpus: 1,
    memory_mib: 256,
    devices: "virtio-serial,virtio-net,blk-root",
  });
  const b = qemuSnapshotCompat({ ...spec, memoryMiB: 512, rootDiskPath: "/a/root.squashfs" }, "8.0.0", "kvm");
  expect(compatDifferences(a, b)).toEqual(["accel", "cpu", "devices", "memory_mib", "qemu_version"]);
});

test("a restore refuses a snapshot without its files, or whose RAM is not the VM's size, before QEMU starts", async () => {
  const dir = mkdtempSync(join(tmpdir(), "bb-qemusnap-"));
  try {
    const driver = new QemuMicrovmDriver({ qemuBinary: "/nonexistent/qemu" }); // never spawned: the refusal comes first
    const snap = { dir, driver: "qemu-microvm", compat: qemuSnapshotCompat(spec, "7.2.22", "tcg"), bytes: 0 };
    await expect(driver.restore(spec, snap)).rejects.toMatchObject({ code: "SNAPSHOT_INCOMPATIBLE" });
    writeFileSync(join(dir, "device.state"), "x");
    writeFileSync(join(dir, "guest.ram"), Buffer.alloc(1024));
    await expect(driver.restore(spec, snap)).rejects.toMatchObject({ code: "SNAPSHOT_INCOMPATIBLE" });
    await expect(driver.restore(spec, { ...snap, driver: "firecracker" })).rejects.toMatchObject({
      code: "SNAPSHOT_INCOMPATIBLE",
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
