/**
 * Wrong fix hints under an address-family restriction (issue 18 item 14):
 * with socket(AF_NETLINK) failing with EAFNOSUPPORT (the agent unit's
 * RestrictAddressFamilies= without AF_NETLINK; reproduced with a seccomp
 * filter, test/support/noNetlink.py), the doctor's namespace probe and
 * uplink check name the address-family restriction as the cause, not
 * CAP_SYS_ADMIN or a missing device, and interface enumeration (the host
 * endpoint's and the proxy's candidates) reports the cause and goes on
 * without interfaces instead of failing with "getifaddrs returned an error".
 * Needs root and x86_64; skips with a printed reason otherwise.
 */
import { expect, test } from "bun:test";
import { arch } from "node:os";
import { join } from "node:path";
import { fixHintFor, isAddressFamilyRestricted, NETLINK_RESTRICTED_HINT } from "../../src/domain/osErrorHint.ts";
import { interfaceAddresses } from "../../src/wireguard/index.ts";

const skip =
  process.getuid?.() !== 0
    ? "needs root"
    : arch() !== "x64"
      ? "the seccomp helper is x86_64 only"
      : !Bun.which("python3", { PATH: "/usr/bin" })
        ? "no /usr/bin/python3"
        : null;
if (skip) console.log(`SKIP test/integration/netlink-restricted.test.ts (real restriction): ${skip}`);

test.skipIf(!!skip)(
  "wrong fix hints: under a real AF_NETLINK restriction the doctor names the address-family restriction, and interface enumeration reports it and goes on",
  async () => {
    const p = Bun.spawn(
      [
        "/usr/bin/python3",
        join(import.meta.dir, "../support/noNetlink.py"),
        process.execPath,
        join(import.meta.dir, "../support/netlinkProbe.ts"),
      ],
      { stdout: "pipe", stderr: "pipe" },
    );
    const [out, err] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text()]);
    expect(await p.exited, err).toBe(0);
    const r = JSON.parse(out.trim().split("\n").pop()!) as {
      checks: { id: string; status: string; detail: string; fix?: string }[];
      interfaces: string[];
      errors: string[];
    };
    const probe = r.checks.find((c) => c.id === "netns-probe")!;
    expect(probe.status).toBe("fail");
    expect(probe.detail).toContain("Address family not supported");
    expect(probe.fix).toBe(NETLINK_RESTRICTED_HINT);
    expect(probe.fix).not.toContain("CAP_SYS_ADMIN");
    const uplink = r.checks.find((c) => c.id === "uplink")!;
    expect(uplink.status).toBe("fail");
    expect(uplink.detail).not.toContain("not found");
    expect(uplink.fix).toBe(NETLINK_RESTRICTED_HINT);
    expect(r.interfaces).toEqual([]);
    expect(r.errors).toHaveLength(1);
    expect(r.errors[0]).toContain("RestrictAddressFamilies");
    expect(r.errors[0]).toContain("EAFNOSUPPORT");
  },
  60_000,
);

test("wrong fix hints: EAFNOSUPPORT in any form (errno, code, stderr text) gets the address-family hint; other errors keep theirs", () => {
  const getifaddrs = Object.assign(new Error("A system error occurred: getifaddrs returned an error"), {
    code: "ERR_SYSTEM_ERROR",
    syscall: "getifaddrs",
    errno: 97,
  });
  expect(isAddressFamilyRestricted(getifaddrs)).toBe(true);
  expect(isAddressFamilyRestricted("Cannot open netlink socket: Address family not supported by protocol")).toBe(true);
  expect(fixHintFor("RTNETLINK answers: Operation not permitted", "grant CAP_NET_ADMIN")).toBe("grant CAP_NET_ADMIN");
  expect(fixHintFor(Object.assign(new Error("x"), { errno: -97 }), "other")).toBe(NETLINK_RESTRICTED_HINT);
  const seen: string[] = [];
  expect(
    interfaceAddresses(
      () => {
        throw getifaddrs;
      },
      (m) => seen.push(m),
    ),
  ).toEqual({});
  expect(seen[0]).toContain(NETLINK_RESTRICTED_HINT);
  expect(
    interfaceAddresses(
      () => ({ lo: [] }),
      (m) => seen.push(m),
    ),
  ).toEqual({ lo: [] });
  expect(seen).toHaveLength(1);
});
