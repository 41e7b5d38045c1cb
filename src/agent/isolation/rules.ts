/**
 * nftables rule text for a placement (spec "Guest network isolation"). Pure:
 * builds the text that `nft -f -` loads; it never runs anything.
 *
 * Two tables, both named `bb_<digest>` after the placement directory
 * `bb-<digest>` so the restart inventory maps a table to its placement:
 * - `inet bb_<digest>` inside the placement namespace: default deny; DNS only
 *   to the configured resolvers; connection-tracked IPv4 egress to public
 *   addresses; named drop counters per denied range class; IPv6 only from the
 *   guest's exact address (none assigned: all IPv6 dropped); inbound to the
 *   guest only established/related; SNAT of 10.0.0.2 to the slot address;
 *   an empty chain `bb_conn`, jumped to from the guest's IPv6 chain, the
 *   input chain and the forward chain just before their final drop, which
 *   the host endpoint fills with the exact flows of the grants it applied
 *   (src/agent/endpoint/connectionRules.ts) and nothing else.
 * - `ip bb_<digest>` in the uplink namespace (only with an uplink): masquerade
 *   of the slot address out of the named uplink device, and a guard that lets
 *   the placement's veth forward only to that device.
 * Must never: put an unvalidated string into rule text.
 */
import { isIPv6 } from "node:net";
import { formatCidr, netError, parseCidr, parseIpv4 } from "./addressPool.ts";

/** Built-in denied IPv4 range classes; each has a named counter of the same name. Order = match order. */
export const DENIED_RANGE_CLASSES: ReadonlyArray<{ name: string; ranges: readonly string[] }> = [
  { name: "metadata", ranges: ["169.254.169.254/32"] },
  { name: "link_local", ranges: ["169.254.0.0/16"] },
  { name: "rfc1918", ranges: ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"] },
  { name: "cgnat", ranges: ["100.64.0.0/10"] },
  { name: "multicast", ranges: ["224.0.0.0/4"] },
  // "this network", loopback, and 240/4 (reserved, includes limited broadcast 255.255.255.255).
  { name: "reserved", ranges: ["0.0.0.0/8", "127.0.0.0/8", "240.0.0.0/4"] },
];

/** Every named counter of a placement table (range classes plus verdict counters). */
export const PLACEMENT_COUNTERS = [
  ...DENIED_RANGE_CLASSES.map((c) => c.name),
  "operator",
  "host",
  "dns_allowed",
  "dns_denied",
  "egress_allowed",
  "spoofed",
  "invalid",
  "router_denied",
  "ipv6_denied",
  "inbound_denied",
] as const;

/** The placement table's chain the host endpoint owns (see the module doc). */
export const CONNECTION_CHAIN = "bb_conn";

/** nftables table name of placement directory `bb-<digest>`: `bb_<digest>`. Throws NETWORK_SETUP_FAILED for another shape. */
export function nftTableName(dirName: string): string {
  if (!/^bb-[A-Za-z0-9_-]{1,60}$/.test(dirName)) throw netError(`invalid placement name ${JSON.stringify(dirName)}`);
  return `bb_${dirName.slice(3).replaceAll("-", "_")}`;
}

/** Inputs of placementRuleset. Addresses are validated and canonicalised here. */
export interface PlacementRulesInput {
  /** Table name (nftTableName). */
  table: string;
  /** TAP device inside the namespace (the guest's link). */
  tap: string;
  /** Guest IPv4 address (the only source accepted from the TAP). */
  guestIpv4: string;
  /** Router address on the TAP (the guest may not open connections to it). */
  routerIpv4: string;
  /** The namespace side of the uplink veth and the SNAT address; absent = no uplink. */
  uplink?: { device: string; snatAddress: string };
  /** DNS resolvers the guest may query (IPv4). */
  resolvers: readonly string[];
  /** Operator-configured denied IPv4 ranges (CIDR). */
  operatorRanges: readonly string[];
  /** Host-visible ranges the guest must never reach: the egress pool and the uplink namespace's own addresses. */
  hostRanges: readonly string[];
  /** The guest's assigned IPv6 address; absent = drop all IPv6 from the guest. */
  guestIpv6?: string;
}

function dev(name: string): string {
  if (!/^[A-Za-z0-9_.-]{1,15}$/.test(name)) throw netError(`invalid interface name ${JSON.stringify(name)}`);
  return `"${name}"`;
}

function tableIdent(name: string): string {
  if (!/^bb_[A-Za-z0-9_]{1,60}$/.test(name)) throw netError(`invalid table name ${JSON.stringify(name)}`);
  return name;
}

function addr4(a: string): string {
  parseIpv4(a);
  return a;
}

function set4(name: string, ranges: readonly string[]): string {
  const elems = [...new Set(ranges.map((r) => formatCidr(parseCidr(r))))];
  const body = elems.length ? ` elements = { ${elems.join(", ")} }` : "";
  return `  set ${name} { type ipv4_addr; flags interval; auto-merge;${body} }`;
}

/** The placement namespace's table (see module doc). Throws NETWORK_SETUP_FAILED on an invalid input. */
export function placementRuleset(i: PlacementRulesInput): string {
  const t = tableIdent(i.table);
  const tap = dev(i.tap);
  const guest = addr4(i.guestIpv4);
  if (i.guestIpv6 !== undefined && !isIPv6(i.guestIpv6))
    throw netError(`invalid guest IPv6 ${JSON.stringify(i.guestIpv6)}`);
  const classes = [
    ...DENIED_RANGE_CLASSES,
    { name: "operator", ranges: i.operatorRanges },
    { name: "host", ranges: i.hostRanges },
  ];
  const lines = [
    `table inet ${t}`,
    `delete table inet ${t}`,
    `table inet ${t} {`,
    ...PLACEMENT_COUNTERS.map((c) => `  counter ${c} { }`),
    set4(
      "bb_resolvers",
      i.resolvers.map((r) => `${addr4(r)}/32`),
    ),
    ...classes.map((c) => set4(`bb_${c.name}`, c.ranges)),
    `  chain ${CONNECTION_CHAIN} {`,
    `  }`,
    // Every packet from the guest is classified before routing, so multicast and broadcast are counted too.
    `  chain bb_from_guest {`,
    `    meta nfproto ipv6 jump bb_from_guest6`,
    `    ip saddr != ${guest} counter name spoofed drop`,
    `    ct state established,related accept`,
    `    ct state invalid counter name invalid drop`,
    `    ip daddr ${addr4(i.routerIpv4)} counter name router_denied drop`,
    `    ip daddr @bb_resolvers meta l4proto { tcp, udp } th dport 53 counter name dns_allowed accept`,
    `    meta l4proto { tcp, udp } th dport 53 counter name dns_denied drop`,
    ...classes.map((c) => `    ip daddr @bb_${c.name} counter name ${c.name} drop`),
    `    ct state new counter name egress_allowed accept`,
    `    counter name invalid drop`,
    `  }`,
    `  chain bb_from_guest6 {`,
    ...(i.guestIpv6
      ? [
          `    ip6 saddr ${i.guestIpv6} accept`,
          `    ip6 saddr fe80::/10 icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } accept`,
        ]
      : []),
    `    jump ${CONNECTION_CHAIN}`,
    `    counter name ipv6_denied drop`,
    `  }`,
    `  chain bb_prerouting {`,
    `    type filter hook prerouting priority filter; policy accept;`,
    `    iifname ${tap} jump bb_from_guest`,
    `  }`,
    `  chain bb_input {`,
    `    type filter hook input priority filter; policy drop;`,
    `    iif lo accept`,
    `    ct state established,related accept`,
    `    jump ${CONNECTION_CHAIN}`,
    `  }`,
    `  chain bb_forward {`,
    `    type filter hook forward priority filter; policy drop;`,
    ...(i.uplink ? [`    iifname ${tap} oifname ${dev(i.uplink.device)} accept`] : []),
    `    oifname ${tap} ct state established,related accept`,
    `    jump ${CONNECTION_CHAIN}`,
    `    counter name inbound_denied drop`,
    `  }`,
  ];
  if (i.uplink) {
    lines.push(
      `  chain bb_postrouting {`,
      `    type nat hook postrouting priority srcnat; policy accept;`,
      `    oifname ${dev(i.uplink.device)} ip saddr ${guest} snat ip to ${addr4(i.uplink.snatAddress)}`,
      `  }`,
    );
  }
  lines.push(`}`);
  return lines.join("\n") + "\n";
}

/** Inputs of uplinkRuleset. */
export interface UplinkRulesInput {
  table: string;
  /** Host side of the placement's veth in the uplink namespace. */
  hostVeth: string;
  /** The operator-named uplink device. */
  device: string;
  /** The placement's slot address (SNAT source inside the placement namespace). */
  placementAddress: string;
}

/** The uplink namespace's per-placement table (see module doc). Throws NETWORK_SETUP_FAILED on an invalid input. */
export function uplinkRuleset(i: UplinkRulesInput): string {
  const t = tableIdent(i.table);
  const veth = dev(i.hostVeth);
  const up = dev(i.device);
  const src = addr4(i.placementAddress);
  return (
    [
      `table ip ${t}`,
      `delete table ip ${t}`,
      `table ip ${t} {`,
      `  chain bb_forward {`,
      `    type filter hook forward priority filter; policy accept;`,
      `    iifname ${veth} ip saddr != ${src} drop`,
      `    iifname ${veth} oifname != ${up} drop`,
      `  }`,
      `  chain bb_postrouting {`,
      `    type nat hook postrouting priority srcnat; policy accept;`,
      `    oifname ${up} ip saddr ${src} masquerade`,
      `  }`,
      `}`,
    ].join("\n") + "\n"
  );
}
