/**
 * How the host endpoint reaches a placement (docs/adr/0157-host-endpoint-routing.md):
 * one TUN per placement that has grants, opened by the agent through
 * native/tun, moved into the placement's namespace and renamed `bbconn0`.
 * Inside the namespace: `bbconn0` up with the tunnel MTU (TUNNEL_MTU, or
 * BB_DEBUG_TUNNEL_MTU) and TCP SYNs clamped to its MSS; IPv6 forwarding
 * on (in that namespace only); `fe80::1/64` on the guest's TAP as the
 * guest's IPv6 router; `<allocation>/128 dev <tap>` and `<client>/128 dev
 * bbconn0` per grant; and the placement table's `bb_conn` chain with exactly
 * those flows (connectionRules.ts). Nothing changes in the agent's own
 * namespace: no route, no sysctl, no interface left there.
 *
 * Owns: the TUN fd (the interface and its routes vanish with it, wherever
 * it lives), the routes and chain it added. Must never: touch a namespace
 * other than the placement's, or leave the chain allowing a flow after
 * close().
 */
import { isIPv6 } from "node:net";
import { openTun, type TunDevice } from "../../../native/tun/tun.ts";
import { debugTunnelMtu } from "../../protocol/debugKnobs.ts";
import { tcpMssBytes } from "../../protocol/tunnelMtu.ts";
import { GUEST_IPV6_ROUTER } from "../../protocol/guest.ts";
import { canonicalIpv6 } from "../../protocol/ipAddress.ts";
import { netError } from "../isolation/addressPool.ts";
import { ip, ipChecked, nftLoad, runCmd } from "../isolation/exec.ts";
import { CONNECTION_TUN_NAME, connectionChainText, type ConnectionFlow } from "./connectionRules.ts";
import type { PlacementTarget } from "./grantCheck.ts";

/** The guest's IPv6 router address on its TAP (the guest routes `default via fe80::1`; defined with the guest's kernel arguments). */
export { GUEST_IPV6_ROUTER };

/** Counters of one link. */
export interface PlacementLinkStats {
  packetsIn: number;
  packetsOut: number;
  writesDropped: number;
}

/** The endpoint's link into one placement. */
export interface PlacementLink {
  /** Writes one IP packet into the namespace. Never throws; false when dropped. */
  write(packet: Uint8Array): boolean;
  /** Makes routes and the `bb_conn` chain allow exactly `flows`. Throws NETWORK_SETUP_FAILED. */
  configure(flows: readonly ConnectionFlow[]): Promise<void>;
  /** Removes the flows and the TUN. Never throws. */
  close(): Promise<void>;
  stats(): PlacementLinkStats;
}

/** Opens links; the kernel one below, a fake in unit tests. */
export interface PlacementLinkPort {
  /** Opens the link of `target`; `onPackets` gets packets leaving the namespace (views valid during the call). Throws NETWORK_SETUP_FAILED. */
  open(target: PlacementTarget, onPackets: (packets: Uint8Array[]) => void): Promise<PlacementLink>;
}

let serial = 0;

/** A temporary interface name in the agent's namespace, unique in this process (≤ 15 characters). */
function temporaryName(): string {
  serial = (serial + 1) % 36 ** 4;
  return `bbc${process.pid.toString(36).slice(-6)}${serial.toString(36)}`.slice(0, 15);
}

async function checked(argv: string[]): Promise<void> {
  const r = await runCmd(argv);
  if (r.code !== 0) throw netError(`${argv.join(" ")} failed (exit ${r.code}): ${r.err}`);
}

class KernelPlacementLink implements PlacementLink {
  private routes = new Set<string>();
  private readonly counters: PlacementLinkStats = { packetsIn: 0, packetsOut: 0, writesDropped: 0 };
  private closed = false;

  constructor(
    private readonly target: PlacementTarget,
    private readonly tun: TunDevice,
  ) {}

  write(packet: Uint8Array): boolean {
    if (this.closed || !this.tun.write(packet)) {
      this.counters.writesDropped++;
      return false;
    }
    this.counters.packetsIn++;
    return true;
  }

  noteOut(n: number): void {
    this.counters.packetsOut += n;
  }

  async configure(flows: readonly ConnectionFlow[]): Promise<void> {
    const ns = this.target.netns;
    const want = new Map<string, string[]>();
    for (const f of flows) {
      if (!isIPv6(f.allocationAddress) || !isIPv6(f.clientAddress)) throw netError("grant addresses must be IPv6");
      const a = canonicalIpv6(f.allocationAddress);
      const c = canonicalIpv6(f.clientAddress);
      want.set(`${a}/128 dev ${this.target.tap}`, ["-6", "route", "replace", `${a}/128`, "dev", this.target.tap]);
      want.set(`${c}/128 dev ${CONNECTION_TUN_NAME}`, [
        "-6",
        "route",
        "replace",
        `${c}/128`,
        "dev",
        CONNECTION_TUN_NAME,
      ]);
    }
    for (const [key, args] of want) if (!this.routes.has(key)) await ipChecked(ns, args);
    for (const key of this.routes) {
      if (want.has(key)) continue;
      const [prefix, , dev] = key.split(" ");
      await ip(ns, ["-6", "route", "del", prefix!, "dev", dev!]);
    }
    this.routes = new Set(want.keys());
    await nftLoad(ns, connectionChainText(this.target.table, this.target.tap, flows, tcpMssBytes(this.tun.mtu, 6)));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.configure([]).catch(() => {});
    await this.tun.close().catch(() => {});
  }

  stats(): PlacementLinkStats {
    return { ...this.counters };
  }
}

/**
 * The kernel implementation (see the module doc). Needs CAP_NET_ADMIN, ip(8)
 * and nft(8); the namespace must exist with its TAP and the placement table.
 */
export const kernelPlacementLinks: PlacementLinkPort = {
  async open(target, onPackets) {
    const ns = target.netns;
    if (!/^[A-Za-z0-9_.-]{1,64}$/.test(ns)) throw netError(`invalid namespace name ${JSON.stringify(ns)}`);
    const tmp = temporaryName();
    let tun: TunDevice;
    try {
      tun = openTun({ name: tmp, mtu: debugTunnelMtu(process.env) });
    } catch (e) {
      throw netError(`cannot open a TUN device for ${ns}: ${(e as Error).message}`);
    }
    try {
      await ipChecked(undefined, ["link", "set", "dev", tmp, "netns", ns]);
      await ipChecked(ns, ["link", "set", "dev", tmp, "name", CONNECTION_TUN_NAME]);
      await ipChecked(ns, ["link", "set", "dev", CONNECTION_TUN_NAME, "up"]);
      await checked(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
      await ipChecked(ns, ["-6", "addr", "replace", `${GUEST_IPV6_ROUTER}/64`, "dev", target.tap, "nodad"]);
    } catch (e) {
      await tun.close().catch(() => {});
      throw e;
    }
    const link = new KernelPlacementLink(target, tun);
    tun.start((packets) => {
      link.noteOut(packets.length);
      onPackets(packets);
    });
    return link;
  },
};
