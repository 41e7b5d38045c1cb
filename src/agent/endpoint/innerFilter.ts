/**
 * The inner filter of one applied grant (spec "Data path": "The filter
 * allows only the exact source and destination address pair, the grant's
 * protocol, and its destination ports, and it admits return traffic only
 * for recorded flows"). Applied by the host endpoint to every decrypted
 * packet before it enters the placement namespace, and to every packet
 * leaving the namespace before it is sealed for the client.
 *
 * Owns: the per-grant flow table (bounded, idle expiry on the caller's
 * clock) and drop counters by a closed set of reasons. Pure: no I/O; time is
 * passed in.
 * Must never: admit IPv4, an IPv6 packet with extension headers (fragments
 * could hide ports), a packet whose transport header is cut short, or
 * return traffic for a flow the client did not open; throw on any input.
 */
import type { GrantTransport } from "../../protocol/connection.ts";
import { ipv6Bytes } from "../../protocol/ipAddress.ts";

/** Most flows one grant may record; a new flow past it is refused until one expires. */
export const MAX_FLOWS_PER_GRANT = 4096;
/** A TCP flow with no packet for this long is forgotten, ms. */
export const TCP_FLOW_IDLE_MS = 15 * 60_000;
/** A UDP flow with no packet for this long is forgotten, ms. */
export const UDP_FLOW_IDLE_MS = 2 * 60_000;

/** Why a packet was refused. Stable names: the endpoint reports them. */
export const FILTER_DROP_REASONS = [
  /** Shorter than an IPv6 header, a length field beyond the bytes present, or a transport header cut short. */
  "malformed",
  /** Not IPv6 (the Network is IPv6 only). */
  "not-ipv6",
  /** An IPv6 extension header (fragment, routing, hop-by-hop…) or a next header other than TCP/UDP. */
  "next-header",
  /** Source address is not the grant's (client inbound, allocation outbound). */
  "source",
  /** Destination address is not the grant's. */
  "destination",
  /** Transport is not the grant's. */
  "transport",
  /** Destination port (inbound) or source port (outbound) is not one of the grant's. */
  "port",
  /** Outbound packet of no recorded (or an expired) flow. */
  "no-flow",
  /** Inbound packet would open a flow past MAX_FLOWS_PER_GRANT. */
  "flow-table-full",
] as const;
/** One filter drop reason. */
export type FilterDropReason = (typeof FILTER_DROP_REASONS)[number];

/** Counters of one filter. */
export interface FilterCounters {
  inboundAccepted: number;
  outboundAccepted: number;
  drops: Record<FilterDropReason, number>;
}

/** What a grant allows, as the filter needs it. */
export interface FilterRule {
  clientAddress: string;
  allocationAddress: string;
  transport: GrantTransport;
  ports: readonly number[];
}

const PROTO = { tcp: 6, udp: 17 } as const;

/** A new counters object, every reason at 0. */
export function newFilterCounters(): FilterCounters {
  return {
    inboundAccepted: 0,
    outboundAccepted: 0,
    drops: Object.fromEntries(FILTER_DROP_REASONS.map((r) => [r, 0])) as Record<FilterDropReason, number>,
  };
}

/** The filter of one grant. */
export class InnerFilter {
  readonly counters: FilterCounters = newFilterCounters();
  private readonly client: Uint8Array;
  private readonly allocation: Uint8Array;
  private readonly proto: number;
  private readonly ports: ReadonlySet<number>;
  private readonly idleMs: number;
  /** Flow key (client port × 65536 + allocation port) → last packet ms; Map order is recency order. */
  private readonly flows = new Map<number, number>();

  /** Throws an Error for addresses that are not IPv6 (a verified grant never has such). */
  constructor(rule: FilterRule) {
    this.client = ipv6Bytes(rule.clientAddress);
    this.allocation = ipv6Bytes(rule.allocationAddress);
    this.proto = PROTO[rule.transport];
    this.ports = new Set(rule.ports);
    this.idleMs = rule.transport === "tcp" ? TCP_FLOW_IDLE_MS : UDP_FLOW_IDLE_MS;
  }

  /** Recorded flows not yet expired at `nowMs`. */
  flowCount(nowMs: number): number {
    this.expire(nowMs);
    return this.flows.size;
  }

  /** A packet from the client (decrypted), bound for the placement: true to pass it. Records its flow. */
  inbound(p: Uint8Array, nowMs: number): boolean {
    const h = this.header(p, this.client, this.allocation);
    if (typeof h === "string") return this.drop(h);
    if (!this.ports.has(h.dport)) return this.drop("port");
    const key = h.sport * 65536 + h.dport;
    this.expire(nowMs);
    if (!this.flows.has(key) && this.flows.size >= MAX_FLOWS_PER_GRANT) return this.drop("flow-table-full");
    this.flows.delete(key);
    this.flows.set(key, nowMs);
    this.counters.inboundAccepted++;
    return true;
  }

  /** A packet from the placement, bound for the client: true only for a recorded flow, in reverse. */
  outbound(p: Uint8Array, nowMs: number): boolean {
    const h = this.header(p, this.allocation, this.client);
    if (typeof h === "string") return this.drop(h);
    if (!this.ports.has(h.sport)) return this.drop("port");
    const key = h.dport * 65536 + h.sport;
    this.expire(nowMs);
    if (!this.flows.has(key)) return this.drop("no-flow");
    this.flows.delete(key);
    this.flows.set(key, nowMs);
    this.counters.outboundAccepted++;
    return true;
  }

  private drop(reason: FilterDropReason): false {
    this.counters.drops[reason]++;
    return false;
  }

  private expire(nowMs: number): void {
    for (const [key, at] of this.flows) {
      if (nowMs - at < this.idleMs) break;
      this.flows.delete(key);
    }
  }

  /** Checks version, lengths, next header, addresses and transport; returns the ports or a drop reason. */
  private header(p: Uint8Array, src: Uint8Array, dst: Uint8Array): { sport: number; dport: number } | FilterDropReason {
    if (p.length < 1) return "malformed";
    if (p[0]! >> 4 !== 6) return "not-ipv6";
    if (p.length < 40) return "malformed";
    const payload = (p[4]! << 8) | p[5]!;
    if (40 + payload > p.length) return "malformed";
    const next = p[6]!;
    if (next !== 6 && next !== 17) return "next-header";
    for (let i = 0; i < 16; i++) if (p[8 + i] !== src[i]) return "source";
    for (let i = 0; i < 16; i++) if (p[24 + i] !== dst[i]) return "destination";
    if (next !== this.proto) return "transport";
    if (payload < (next === 6 ? 20 : 8)) return "malformed";
    return { sport: (p[40]! << 8) | p[41]!, dport: (p[42]! << 8) | p[43]! };
  }
}
