/** Unit tests of the nftables rule text (rules.ts) and the network policy (policy.ts). */
import { expect, test } from "bun:test";
import { nftTableName, placementRuleset, uplinkRuleset, type PlacementRulesInput } from "./rules.ts";
import { netPolicyFrom } from "./policy.ts";
import { guestKernelArgs, hostVethName } from "./placementNet.ts";
import { guestIpv6KernelArgs } from "./guestIpv6.ts";

const base: PlacementRulesInput = {
  table: "bb_0123456789ab",
  tap: "bbtap0",
  guestIpv4: "10.0.0.2",
  routerIpv4: "10.0.0.1",
  uplink: { device: "bbup0", snatAddress: "100.127.0.1" },
  resolvers: ["198.51.100.53"],
  operatorRanges: ["203.0.113.0/24"],
  hostRanges: ["100.127.0.0/16", "192.0.2.1/32"],
};

test("names derive from the placement directory", () => {
  expect(nftTableName("bb-0123456789abcdef01234567")).toBe("bb_0123456789abcdef01234567");
  expect(hostVethName("bb-0123456789abcdef01234567")).toBe("bbv0123456789ab");
  expect(hostVethName("bb-0123456789abcdef01234567").length).toBeLessThanOrEqual(15);
  expect(() => nftTableName("foreign")).toThrow();
});

test("placement table: default deny, DNS only to resolvers before range drops, counters per class, SNAT", () => {
  const t = placementRuleset(base);
  expect(t.startsWith("table inet bb_0123456789ab\ndelete table inet bb_0123456789ab\n")).toBe(true); // idempotent reload
  for (const c of [
    "metadata",
    "link_local",
    "rfc1918",
    "cgnat",
    "multicast",
    "reserved",
    "operator",
    "host",
    "dns_denied",
    "egress_allowed",
  ]) {
    expect(t).toContain(`counter ${c} { }`);
  }
  const lines = t.split("\n");
  const at = (s: string) => lines.findIndex((l) => l.includes(s));
  expect(at("@bb_resolvers meta l4proto { tcp, udp } th dport 53")).toBeLessThan(
    at("th dport 53 counter name dns_denied drop"),
  );
  expect(at("dns_denied drop")).toBeLessThan(at("@bb_rfc1918"));
  expect(at("@bb_metadata")).toBeLessThan(at("@bb_link_local"));
  expect(at("@bb_host counter name host drop")).toBeLessThan(at("counter name egress_allowed accept"));
  expect(t).toContain("elements = { 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 }");
  expect(t).toContain("elements = { 203.0.113.0/24 }");
  expect(t).toContain("type filter hook forward priority filter; policy drop;");
  expect(t).toContain(`oifname "bbtap0" ct state established,related accept`);
  expect(t).toContain(`oifname "bbup0" ip saddr 10.0.0.2 snat ip to 100.127.0.1`);
  expect(t).toContain("chain bb_from_guest6 {\n    jump bb_conn\n    counter name ipv6_denied drop\n  }"); // no IPv6 assigned: all dropped but what the host endpoint allows
  // The host endpoint's chain is empty until a grant is applied, and is consulted only just before each final drop.
  expect(t).toContain("chain bb_conn {\n  }");
  expect(at("jump bb_conn")).toBeGreaterThan(at("chain bb_from_guest6"));
  expect(t.match(/jump bb_conn/g)).toHaveLength(3);
});

test("placement table without uplink has no NAT and no forward accept; IPv6 allowed only from the exact address", () => {
  const { uplink: _u, ...noUp } = base;
  const t = placementRuleset({ ...noUp, guestIpv6: "fd00:1::2" });
  expect(t).not.toContain("snat");
  expect(t).not.toContain(`iifname "bbtap0" oifname`);
  expect(t).toContain("ip6 saddr fd00:1::2 accept");
});

test("rule text rejects injection attempts", () => {
  expect(() => placementRuleset({ ...base, tap: 'x"; flush ruleset' })).toThrow();
  expect(() => placementRuleset({ ...base, resolvers: ["1.2.3.4; drop"] })).toThrow();
  expect(() => placementRuleset({ ...base, operatorRanges: ["10.0.0.0/8 }"] })).toThrow();
  expect(() => placementRuleset({ ...base, guestIpv6: "fd00::1 accept" })).toThrow();
  expect(() =>
    uplinkRuleset({ table: "bb_x", hostVeth: "bbvx", device: "eth0 }", placementAddress: "100.127.0.1" }),
  ).toThrow();
});

test("uplink table masquerades only the slot address out of the named device", () => {
  const t = uplinkRuleset({ table: "bb_x", hostVeth: "bbvx", device: "eth0", placementAddress: "100.127.0.1" });
  expect(t).toContain(`oifname "eth0" ip saddr 100.127.0.1 masquerade`);
  expect(t).toContain(`iifname "bbvx" oifname != "eth0" drop`);
  expect(t).toContain(`iifname "bbvx" ip saddr != 100.127.0.1 drop`);
});

test("policy validation and guest kernel args", () => {
  expect(netPolicyFrom({})).toEqual({ dnsResolvers: [], deniedRanges: [], egressPoolCidr: "100.127.0.0/16" });
  expect(() => netPolicyFrom({ uplink: { device: "eth0", netns: "bb-mine" } })).toThrow(/bb- prefix/);
  expect(() => netPolicyFrom({ deniedRanges: ["10.1.0.0/8"] })).toThrow();
  // Resolvers are kept in canonical text: the Go guest refuses a leading zero.
  expect(netPolicyFrom({ dnsResolvers: ["010.000.0.1"] }).dnsResolvers).toEqual(["10.0.0.1"]);
  expect(guestKernelArgs({ dnsResolvers: [] })).toEqual(["beachball.ipv4=10.0.0.2/30", "beachball.gateway=10.0.0.1"]);
  expect(guestKernelArgs({ dnsResolvers: ["198.51.100.53", "198.51.100.54"] })).toContain(
    "beachball.dns=198.51.100.53,198.51.100.54",
  );
});

test("every network key the agent writes is one the Go guest reads (guest/internal/netconf)", async () => {
  const go = await Bun.file(new URL("../../../guest/internal/netconf/netconf.go", import.meta.url)).text();
  const goKeys = new Set([...go.matchAll(/Key\w+\s*=\s*"([a-z0-9._]+)"/g)].map((m) => m[1]));
  const written = [
    ...guestKernelArgs({ dnsResolvers: ["198.51.100.53"] }),
    ...guestIpv6KernelArgs("fd00:bb:1:2::7"),
  ].map((a) => a.split("=")[0]);
  expect(written.length).toBe(5);
  for (const k of written) expect(goKeys.has(k), k).toBe(true);
});
