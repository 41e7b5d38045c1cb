import { expect, test } from "bun:test";
import { parseTscKhzFromKernelLog } from "./qemuHost.ts";
import { ownRamAgain, qemuArgs } from "./qemu.ts";
import { linkSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { VmSpec } from "./driver.ts";

const spec: VmSpec = {
  instanceId: "bb-0123456789ab",
  dir: "/a",
  vcpus: 2,
  memoryMiB: 256,
  kernelPath: "/a/vmlinux",
  initrdPath: "/a/initrd.cpio",
  rootDiskPath: "/a/root.ext4",
  netns: "bb-0123456789ab",
  tapName: "bbtap0",
  kernelArgs: ["beachball.generation=3"],
  consoleLogPath: "/a/console.log",
  controlSocketPath: "/a/ctl.sock",
};

test("qemuArgs follows the measured TCG recipe and carries the instance ID", () => {
  const a = qemuArgs(spec, "tcg", 2445406);
  const after = (flag: string) => a[a.indexOf(flag) + 1];
  expect(after("-name")).toBe("bb-0123456789ab");
  expect(after("-cpu")).toBe("max");
  expect(after("-accel")).toBe("tcg,tb-size=64"); // bounded translation cache: QEMU stays inside the placement's memory.max
  expect(qemuArgs(spec, "kvm", 1)[qemuArgs(spec, "kvm", 1).indexOf("-accel") + 1]).toBe("kvm");
  expect(a).toContain("-no-reboot");
  expect(after("-append")).toBe(
    "console=ttyS0 reboot=t panic=1 pci=off quiet tsc_early_khz=2445406 root=/dev/vda rw beachball.generation=3",
  );
  expect(a).toContain("socket,id=c0,path=/a/ctl.sock,server=on,wait=off");
  expect(a).toContain("virtserialport,chardev=c0,name=ctl");
  expect(after("-qmp")).toBe("unix:qmp.sock,server=on,wait=off"); // relative to QEMU's cwd, the placement directory
  expect(a).toContain("tap,id=n0,ifname=bbtap0,script=no,downscript=no");
  expect(after("-initrd")).toBe("/a/initrd.cpio");
  expect(after("-cpu")).toBe("max");
  expect(qemuArgs(spec, "kvm", 1)[qemuArgs(spec, "kvm", 1).indexOf("-cpu") + 1]).toBe("host");
});

test("a squashfs root is read-only vda with the scratch disk as vdb, booted through the initrd", () => {
  const a = qemuArgs({ ...spec, rootDiskPath: "/a/rootfs.squashfs" }, "tcg", 1000);
  expect(a).toContain("id=root,file=/a/rootfs.squashfs,format=raw,if=none,readonly=on");
  expect(a).toContain("id=scratch,file=/a/scratch.ext4,format=raw,if=none");
  expect(a.indexOf("id=root,file=/a/rootfs.squashfs,format=raw,if=none,readonly=on")).toBeLessThan(
    a.indexOf("id=scratch,file=/a/scratch.ext4,format=raw,if=none"),
  );
  const cmdline = a[a.indexOf("-append") + 1]!;
  expect(cmdline).toContain("beachball.lower=/dev/vda beachball.upper=/dev/vdb");
  expect(cmdline).not.toContain("root=/dev/vda");
});

test("parseTscKhzFromKernelLog prefers the refined calibration", () => {
  expect(parseTscKhzFromKernelLog("tsc: Detected 2445.406 MHz processor")).toBe(2445406);
  expect(
    parseTscKhzFromKernelLog(
      "tsc: Detected 2000.000 MHz processor\ntsc: Refined TSC clocksource calibration: 2001.5 MHz",
    ),
  ).toBe(2001500);
  expect(parseTscKhzFromKernelLog("nothing")).toBeUndefined();
});

test("a resume maps the frozen RAM itself when nothing else holds it, and a copy while a fork's link does (its frozen memory never changes)", async () => {
  const work = mkdtempSync(join(tmpdir(), "bb-qemu-ram-"));
  try {
    const dir = join(work, "placement");
    mkdirSync(join(dir, "snapshot-g1"), { recursive: true });
    const frozen = join(dir, "snapshot-g1", "guest.ram");
    writeFileSync(frozen, "frozen memory");
    // Alone: the live RAM file is the frozen file itself (no copy).
    const live = await ownRamAgain(frozen, { dir });
    expect(live).toBe(join(dir, "guest.ram"));
    expect(statSync(live).ino).toBe(statSync(frozen).ino);
    // A fork's link holds it: the live file is a copy, so the VM's writes never reach the fork's frozen memory.
    rmSync(live);
    linkSync(frozen, join(work, "fork-link"));
    const copy = await ownRamAgain(frozen, { dir });
    expect(statSync(copy).ino).not.toBe(statSync(frozen).ino);
    writeFileSync(copy, "the resumed VM wrote here");
    expect(readFileSync(join(work, "fork-link"), "utf8")).toBe("frozen memory");
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});
