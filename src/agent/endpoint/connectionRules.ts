/**
 * nftables text for the placement table's `bb_conn` chain (src/agent/isolation/rules.ts,
 * CONNECTION_CHAIN): the exact flows of the grants applied to one placement
 * (spec "Guest network isolation": IPv6 "only from its exact assigned address
 * and only through the host's WireGuard endpoint interface"). Pure: builds
 * text for `nft -f -`; the whole chain is replaced in one transaction.
 *
 * Per grant: new connections from the client's /128 to the allocation's /128
 * on the grant's transport and ports, in from `bbconn0` and out to the
 * guest's TAP; the guest's established/related replies on that exact pair
 * back to `bbconn0` (the only route to the client's /128). With any grant: neighbour discovery on the TAP (hop
 * limit 255, on-link only) so the namespace and the guest can resolve each
 * other; and first, every TCP SYN either way between `bbconn0` and the TAP
 * has its MSS option clamped to the tunnel's (MTU − 40 − 20, src/protocol/tunnelMtu.ts),
 * so neither the guest nor a client whose stack assumes a larger MTU sends
 * segments the tunnel cannot carry (ADR 0103). With none: the chain is empty
 * and the placement's default deny is untouched.
 * Must never: put an unvalidated string into rule text, or allow a flow
 * wider than a grant.
 */
import { isIPv6 } from "node:net";
import { canonicalIpv6 } from "../../protocol/ipAddress.ts";
import { TUNNEL_TCP_MSS_BYTES } from "../../protocol/tunnelMtu.ts";
import type { GrantTransport } from "../../protocol/connection.ts";
import { netError } from "../isolation/addressPool.ts";
import { CONNECTION_CHAIN } from "../isolation/rules.ts";

/** The interface name of the endpoint's TUN inside every placement namespace. */
export const CONNECTION_TUN_NAME = "bbconn0";

/** One grant's flow as the chain allows it. */
export interface ConnectionFlow {
  clientAddress: string;
  allocationAddress: string;
  transport: GrantTransport;
  ports: readonly number[];
}

function ident(name: string, re: RegExp, what: string): string {
  if (!re.test(name)) throw netError(`invalid ${what} ${JSON.stringify(name)}`);
  return name;
}

function addr6(a: string): string {
  if (!isIPv6(a) || a.includes("%")) throw netError(`invalid IPv6 address ${JSON.stringify(a)}`);
  return canonicalIpv6(a);
}

/**
 * The transaction that replaces `bb_conn` in table `inet <table>` with the
 * rules for `flows` (see the module doc). `tap` is the guest's link inside
 * the namespace; `mssBytes` the MSS that SYNs are clamped to (default the
 * tunnel's, 1,220). Throws NETWORK_SETUP_FAILED on an invalid input.
 */
export function connectionChainText(
  table: string,
  tap: string,
  flows: readonly ConnectionFlow[],
  mssBytes: number = TUNNEL_TCP_MSS_BYTES,
): string {
  const t = ident(table, /^bb_[A-Za-z0-9_]{1,60}$/, "table name");
  const tapName = `"${ident(tap, /^[A-Za-z0-9_.-]{1,15}$/, "interface name")}"`;
  const tun = `"${CONNECTION_TUN_NAME}"`;
  const head = `add rule inet ${t} ${CONNECTION_CHAIN}`;
  const lines = [`flush chain inet ${t} ${CONNECTION_CHAIN}`];
  if (!Number.isInteger(mssBytes) || mssBytes < 536 || mssBytes > 65495)
    throw netError(`invalid MSS ${JSON.stringify(mssBytes)}`);
  if (flows.length) {
    // Not a verdict: the SYN goes on to the flow rules below with its MSS lowered (never raised).
    lines.push(
      `${head} iifname { ${tun}, ${tapName} } tcp flags & syn == syn tcp option maxseg size > ${mssBytes} tcp option maxseg size set ${mssBytes}`,
    );
    lines.push(
      `${head} iifname ${tapName} icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } ip6 hoplimit 255 accept`,
    );
  }
  for (const f of flows) {
    const c = addr6(f.clientAddress);
    const a = addr6(f.allocationAddress);
    if (f.transport !== "tcp" && f.transport !== "udp")
      throw netError(`invalid transport ${JSON.stringify(f.transport)}`);
    if (!f.ports.length || f.ports.some((p) => !Number.isInteger(p) || p < 1 || p > 65535))
      throw netError(`invalid ports ${JSON.stringify(f.ports)}`);
    const ports = [...new Set(f.ports)].sort((x, y) => x - y).join(", ");
    lines.push(
      `${head} iifname ${tun} oifname ${tapName} ip6 saddr ${c} ip6 daddr ${a} ${f.transport} dport { ${ports} } ct state new accept`,
    );
    // The guest's reply, matched the same way in prerouting (no output interface yet) and in forward: the
    // client's /128 is routed only to bbconn0, so the destination fixes the way out (nft 1.0.6 refuses oifname "").
    lines.push(`${head} iifname ${tapName} ip6 saddr ${a} ip6 daddr ${c} ct state established,related accept`);
  }
  return lines.join("\n") + "\n";
}
