import { describe, expect, test } from "bun:test";
import { AgentError } from "../errors.ts";
import { guestIpv6KernelArgs, isGuestIpv6Address } from "./guestIpv6.ts";

describe("the guest's private IPv6 kernel arguments", () => {
  test("a canonical unique-local or global unicast address becomes the address and router keys", () => {
    expect(guestIpv6KernelArgs("fd12:3456:789a:1::2")).toEqual([
      "beachball.ipv6=fd12:3456:789a:1::2",
      "beachball.ipv6_router=fe80::1",
    ]);
    expect(guestIpv6KernelArgs("2001:db8::5")).toEqual(["beachball.ipv6=2001:db8::5", "beachball.ipv6_router=fe80::1"]);
    expect(guestIpv6KernelArgs("fc00::1:2:3:4:5")).toHaveLength(2);
  });

  test("no address (no private networking, an older scheduler): no arguments", () => {
    expect(guestIpv6KernelArgs(undefined)).toEqual([]);
  });

  test.each([
    ["a prefix length", "fd00::2/128"],
    ["a zone", "fe80::2%eth0"],
    ["another argument smuggled in", "fd00::2 init=/bin/sh"],
    ["a non-canonical spelling", "FD00::2"],
    ["a non-canonical spelling (leading zeros)", "fd00:0000::2"],
    ["link-local", "fe80::2"],
    ["multicast", "ff02::1"],
    ["loopback", "::1"],
    ["unspecified", "::"],
    ["IPv4-mapped", "::ffff:10.0.0.2"],
    ["IPv4", "10.0.0.2"],
    ["empty", ""],
    ["over-long", `fd00:${"0:".repeat(20)}2`],
  ])("%s is refused with NETWORK_SETUP_FAILED", (_why, bad) => {
    expect(isGuestIpv6Address(bad)).toBe(false);
    let caught: unknown;
    try {
      guestIpv6KernelArgs(bad);
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(AgentError);
    expect((caught as AgentError).code).toBe("NETWORK_SETUP_FAILED");
  });

  test("non-strings are not addresses", () => {
    for (const v of [null, 42, {}, ["fd00::2"]]) expect(isGuestIpv6Address(v)).toBe(false);
  });
});
