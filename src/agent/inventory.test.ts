import { describe, expect, test } from "bun:test";
import { foreignResources, vmmInstanceOf } from "./inventory.ts";
import { hostVethName } from "./isolation/placementNet.ts";
import { hostTag, placementDirName } from "./resourceNames.ts";

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
    const found = foreignResources(known, hostTag("h"), {
      directories: ["bb-aaaaaaaaaaaaaaaa", "bb-bbbbbbbbbbbbbbbb", "notes.txt"],
      processes: [
        { pid: 10, instance: "bb-aaaaaaaaaaaaaaaa" },
        { pid: 11, instance: "bb-cccccccccccccccc" },
      ],
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

  test("another host's resources on the same machine are marked otherHost, never counted as this host's; legacy names stay this host's", () => {
    const mine = placementDirName("host-b", "a1", "p1", 1);
    const theirs = placementDirName("host-a", "a2", "p2", 1);
    const myOrphan = placementDirName("host-b", "a3", "p3", 1);
    const legacy = "bb-0123456789abcdef01234567";
    const found = foreignResources(new Set([mine]), hostTag("host-b"), {
      directories: [mine],
      processes: [
        { pid: 20, instance: theirs },
        { pid: 21, instance: mine },
      ],
      netns: [theirs, mine, myOrphan, legacy],
      veths: [hostVethName(theirs), hostVethName(mine), hostVethName(legacy)],
      cgroups: [theirs, mine],
    });
    const tagA = hostTag("host-a");
    expect(found).toEqual([
      { kind: "process", name: `${theirs} (pid 20)`, otherHost: tagA },
      { kind: "netns", name: theirs, otherHost: tagA },
      { kind: "netns", name: myOrphan },
      { kind: "netns", name: legacy },
      { kind: "veth", name: hostVethName(theirs), otherHost: tagA },
      { kind: "veth", name: hostVethName(legacy) },
      { kind: "cgroup", name: theirs, otherHost: tagA },
    ]);
  });
  test("names carry the host tag and fit the kernel's limits; a legacy placement keeps its old veth name", () => {
    const n = placementDirName("host-a", "a", "p", 1);
    expect(n).toMatch(new RegExp(`^bb-${hostTag("host-a")}-[0-9a-f]{24}$`));
    expect(hostVethName(n).length).toBeLessThanOrEqual(15);
    expect(hostVethName(n).startsWith(`bbh${hostTag("host-a")}`)).toBe(true);
    expect(hostVethName("bb-0123456789abcdef01234567")).toBe("bbv0123456789ab");
  });
});
