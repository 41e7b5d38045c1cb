import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GUEST_IPV6_KEYS } from "../protocol/guest.ts";
import { INITRAMFS_INIT } from "./devInitScripts.ts";
import { GUEST_IPV6_CASES, GUEST_IPV6_SYSCTL_DIR, guestIpv6Setup, guestIpv6Sysctls } from "./guestIpv6Init.ts";
import { squashfsInit } from "./oci/ociInitrd.ts";
import { ROOT_READ_AHEAD_KIB } from "./guestNetInit.ts";
import { NET_SETUP } from "./referenceBuild.ts";

const work = mkdtempSync(join(tmpdir(), "bb-guestipv6-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/**
 * Runs the fragments as the images do (the cmdline loop, the sysctls, then
 * the address) with `cmdline` in place of /proc/cmdline, a directory in
 * place of eth0's sysctls, and an `ip` that records its arguments.
 */
function run(name: string, cmdline: string): { ipCalls: string[]; sysctls: Record<string, string>; out: string } {
  const dir = join(work, name);
  const sys = join(dir, "sys");
  mkdirSync(sys, { recursive: true });
  for (const k of ["accept_ra", "autoconf", "accept_dad"]) writeFileSync(join(sys, k), "1\n");
  writeFileSync(join(dir, "cmdline"), `${cmdline}\n`);
  const ip = join(dir, "ip");
  writeFileSync(ip, `#!/bin/sh\necho "$*" >> ${join(dir, "calls")}\n`);
  chmodSync(ip, 0o755);
  const script =
    `ipv6=\nipv6_router=\nfor arg in $(cat ${join(dir, "cmdline")}); do\n  case "$arg" in\n${GUEST_IPV6_CASES}\n  esac\ndone\n${guestIpv6Sysctls("t")}\n${guestIpv6Setup(ip, "t")}\n`.replaceAll(
      GUEST_IPV6_SYSCTL_DIR,
      sys,
    );
  const r = Bun.spawnSync(["sh", "-c", script], { stdout: "pipe", stderr: "pipe" });
  const calls = (() => {
    try {
      return readFileSync(join(dir, "calls"), "utf8").trim().split("\n").filter(Boolean);
    } catch {
      return [];
    }
  })();
  const sysctls = Object.fromEntries(
    ["accept_ra", "autoconf", "accept_dad"].map((k) => [k, readFileSync(join(sys, k), "utf8").trim()]),
  );
  return { ipCalls: calls, sysctls, out: `${r.stdout}${r.stderr}` };
}

describe("the guest's IPv6 setup fragments", () => {
  test("with the keys: RA, autoconf and DAD off on eth0, <address>/128 on eth0, default via the router", () => {
    const r = run(
      "with",
      `console=ttyS0 beachball.ipv4=10.0.0.2/30 ${GUEST_IPV6_KEYS.address}=fd00:bb:1:2::7 ${GUEST_IPV6_KEYS.router}=fe80::1 quiet`,
    );
    expect(r.sysctls).toEqual({ accept_ra: "0", autoconf: "0", accept_dad: "0" });
    expect(r.ipCalls).toEqual([
      "link set eth0 up",
      "-6 addr add fd00:bb:1:2::7/128 dev eth0",
      "-6 route add default via fe80::1 dev eth0",
    ]);
    expect(r.out).toBe("");
  });

  test("without the keys: nothing is touched", () => {
    const r = run("without", "console=ttyS0 beachball.ipv4=10.0.0.2/30");
    expect(r.sysctls).toEqual({ accept_ra: "1", autoconf: "1", accept_dad: "1" });
    expect(r.ipCalls).toEqual([]);
  });

  test("an address without a router: the address only", () => {
    const r = run("norouter", `${GUEST_IPV6_KEYS.address}=fd00::9`);
    expect(r.ipCalls).toEqual(["link set eth0 up", "-6 addr add fd00::9/128 dev eth0"]);
  });

  test("every image's init script still parses (sh -n)", () => {
    for (const [name, script] of [
      ["dev initramfs", INITRAMFS_INIT(["virtio"])],
      ["OCI initramfs", squashfsInit(["virtio"])],
      ["reference net setup", NET_SETUP],
    ] as const) {
      // dash, and busybox's ash (the initramfs shell) where installed (scripts/setup.sh installs busybox-static).
      for (const shell of Bun.which("busybox") ? [["sh"], ["busybox", "sh"]] : [["sh"]]) {
        const r = Bun.spawnSync([...shell, "-n"], { stdin: new TextEncoder().encode(script), stderr: "pipe" });
        expect(`${name} (${shell.join(" ")}): exit ${r.exitCode} ${r.stderr}`).toBe(
          `${name} (${shell.join(" ")}): exit 0 `,
        );
      }
    }
  });

  test("every image's network setup embeds the fragments, the sysctls before eth0 comes up", () => {
    for (const [name, script, ip] of [["reference net setup", NET_SETUP, "ip"]] as const) {
      expect(script, name).toContain(GUEST_IPV6_CASES);
      const sysctls = script.indexOf(GUEST_IPV6_SYSCTL_DIR);
      expect(sysctls, name).toBeGreaterThan(0);
      expect(sysctls, name).toBeLessThan(script.indexOf(`${ip} link set eth0 up`));
      expect(script, name).toContain(`${ip} -6 addr add "$ipv6/128" dev eth0`);
    }
    // The dev image's and the converted images' initramfs leave the network to the Go guest (guest/internal/netconf).
    expect(INITRAMFS_INIT(["virtio"])).not.toContain("ipv6");
    expect(squashfsInit(["virtio"])).not.toContain("ipv6");
    expect(squashfsInit(["virtio"])).toContain("--configure-network");
    // The root disk's read-ahead is raised before the root is mounted (the guest pages in after).
    for (const [script, mount] of [
      [INITRAMFS_INIT(["virtio"]), "mount -t ext4"],
      [squashfsInit(["virtio"]), "mount -t squashfs"],
    ] as const) {
      const ra = script.indexOf(`echo ${ROOT_READ_AHEAD_KIB} > /sys/block/`);
      expect(ra).toBeGreaterThan(0);
      expect(ra).toBeLessThan(script.indexOf(mount));
    }
  });
});
