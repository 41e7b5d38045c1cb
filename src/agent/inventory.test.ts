import { describe, expect, test } from "bun:test";
import { foreignResources, vmmInstanceOf } from "./inventory.ts";
import { hostVethName } from "./isolation/placementNet.ts";

describe("startup inventory", () => {
  test("finds the placement name in VMM command lines", () => {
    expect(vmmInstanceOf(["qemu-system-x86_64", "-name", "bb-abc", "-M", "microvm"])).toBe("bb-abc");
    expect(vmmInstanceOf(["ip", "netns", "exec", "bb-abc", "qemu-system-x86_64", "-name", "bb-abc"])).toBe("bb-abc");
    expect(vmmInstanceOf(["/usr/bin/firecracker", "--id=bb-def", "--api-sock", "/run/f.sock"])).toBe("bb-def");
    expect(vmmInstanceOf(["jailer", "--id", "bb-ghi"])).toBe("bb-ghi");
    expect(vmmInstanceOf(["sleep", "-name", "bb-x"])).toBeNull();
    expect(vmmInstanceOf(["qemu-system-x86_64", "-name", "someone-else"])).toBeNull();
  });
  test("only resources no known placement owns are foreign; the probe namespace is not", () => {
    const known = new Set(["bb-aaaaaaaaaaaaaaaa"]);
    const found = foreignResources(known, {
      directories: ["bb-aaaaaaaaaaaaaaaa", "bb-bbbbbbbbbbbbbbbb", "notes.txt"],
      processes: [{ pid: 10, instance: "bb-aaaaaaaaaaaaaaaa" }, { pid: 11, instance: "bb-cccccccccccccccc" }],
      netns: ["bb-aaaaaaaaaaaaaaaa", "bb-probe-123", "bb-dddddddddddddddd", "other"],
      veths: [hostVethName("bb-aaaaaaaaaaaaaaaa"), hostVethName("bb-eeeeeeeeeeeeeeee")],
      cgroups: ["bb-aaaaaaaaaaaaaaaa", "bb-ffffffffffffffff", "bb-ffffffffffffffff"],
    });
    expect(found).toEqual([
      { kind: "directory", name: "bb-bbbbbbbbbbbbbbbb" },
      { kind: "process", name: "bb-cccccccccccccccc (pid 11)" },
      { kind: "netns", name: "bb-dddddddddddddddd" },
      { kind: "veth", name: hostVethName("bb-eeeeeeeeeeeeeeee") },
      { kind: "cgroup", name: "bb-ffffffffffffffff" },
    ]);
  });
});
