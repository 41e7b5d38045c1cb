import { expect, test } from "bun:test";
import type { VmSpec } from "../driver.ts";
import { bootArgs, bootSourceBody, guestMac, preBootRequests, rootDriveBody } from "./config.ts";

const spec: VmSpec = {
  instanceId: "bb-1",
  dir: "/a",
  vcpus: 1,
  memoryMiB: 128,
  kernelPath: "/a/k",
  rootDiskPath: "/a/rootfs.ext4",
  netns: "n",
  tapName: "t",
  kernelArgs: ["beachball.nonce=x"],
  consoleLogPath: "/a/c",
  controlSocketPath: "/a/s",
};

test("boot args force console and panic settings, then the root settings, then the spec's arguments", () => {
  expect(bootArgs(spec)).toBe("console=ttyS0 reboot=k panic=1 pci=off root=/dev/vda rw beachball.nonce=x");
  expect(bootArgs({ ...spec, rootDiskPath: "/a/rootfs.squashfs" })).toBe(
    "console=ttyS0 reboot=k panic=1 pci=off beachball.lower=/dev/vda beachball.upper=/dev/vdb beachball.nonce=x",
  );
});

test("a squashfs root is attached read-only, not as the root device, and needs an initrd", () => {
  const sq = { ...spec, rootDiskPath: "/a/rootfs.squashfs" };
  expect(rootDriveBody(sq)).toEqual({
    drive_id: "rootfs",
    path_on_host: "/rootfs.squashfs",
    is_root_device: false,
    is_read_only: true,
  });
  expect(() => bootSourceBody(sq)).toThrow(expect.objectContaining({ code: "VMM_START_FAILED" }));
  expect(bootSourceBody({ ...sq, initrdPath: "/a/i" })).toMatchObject({ initrd_path: "/initrd" });
});

test("guest MAC is deterministic per instance, locally administered and unicast", () => {
  expect(guestMac("bb-1")).toBe(guestMac("bb-1"));
  expect(guestMac("bb-1")).not.toBe(guestMac("bb-2"));
  expect(guestMac("bb-1")).toMatch(/^06(:[0-9A-F]{2}){5}$/);
});

test("pre-boot requests: root drive before scratch drive, so they are vda and vdb", () => {
  const paths = preBootRequests(spec).map((r) => r.path);
  expect(paths.indexOf("/drives/rootfs")).toBeLessThan(paths.indexOf("/drives/scratch"));
  expect(paths).not.toContain("/actions");
});
