import { describe, expect, test } from "bun:test";
import { ipv6Bytes } from "../../protocol/ipAddress.ts";
import { InnerFilter, MAX_FLOWS_PER_GRANT, TCP_FLOW_IDLE_MS, UDP_FLOW_IDLE_MS } from "./innerFilter.ts";

const CLIENT = "fd00:1:2:3::10";
const ALLOC = "fd00:1:2:3::2";
const OTHER = "fd00:1:2:3::99";

/** An IPv6 packet with a TCP (20-byte) or UDP (8-byte) header. */
function pkt(o: {
  src?: string;
  dst?: string;
  next?: number;
  sport?: number;
  dport?: number;
  transportBytes?: number;
  version?: number;
}): Uint8Array {
  const next = o.next ?? 6;
  const tb = o.transportBytes ?? (next === 17 ? 8 : 20);
  const p = new Uint8Array(40 + tb);
  p[0] = (o.version ?? 6) << 4;
  p[4] = tb >> 8;
  p[5] = tb & 0xff;
  p[6] = next;
  p[7] = 64;
  p.set(ipv6Bytes(o.src ?? CLIENT), 8);
  p.set(ipv6Bytes(o.dst ?? ALLOC), 24);
  if (tb >= 4) {
    p[40] = (o.sport ?? 40000) >> 8;
    p[41] = (o.sport ?? 40000) & 0xff;
    p[42] = (o.dport ?? 22) >> 8;
    p[43] = (o.dport ?? 22) & 0xff;
  }
  return p;
}
const reply = (o: { sport?: number; dport?: number; src?: string; dst?: string; next?: number } = {}) =>
  pkt({
    src: o.src ?? ALLOC,
    dst: o.dst ?? CLIENT,
    sport: o.sport ?? 22,
    dport: o.dport ?? 40000,
    ...(o.next ? { next: o.next } : {}),
  });

describe("inner filter", () => {
  test("the exact pair, transport and port pass inbound; the reply of that flow passes outbound", () => {
    const f = new InnerFilter({ clientAddress: CLIENT, allocationAddress: ALLOC, transport: "tcp", ports: [22, 80] });
    expect(f.inbound(pkt({}), 0)).toBe(true);
    expect(f.outbound(reply(), 1)).toBe(true);
    expect(f.inbound(pkt({ dport: 80, sport: 1234 }), 2)).toBe(true);
    expect(f.outbound(reply({ sport: 80, dport: 1234 }), 3)).toBe(true);
    expect(f.counters.inboundAccepted).toBe(2);
    expect(f.counters.outboundAccepted).toBe(2);
    expect(f.flowCount(3)).toBe(2);
  });

  test("every other packet is refused and counted by reason", () => {
    const f = new InnerFilter({ clientAddress: CLIENT, allocationAddress: ALLOC, transport: "tcp", ports: [22] });
    const cases: Array<[Uint8Array, "in" | "out", string]> = [
      [pkt({ dport: 23 }), "in", "port"],
      [pkt({ src: OTHER }), "in", "source"],
      [pkt({ dst: OTHER }), "in", "destination"],
      [pkt({ next: 17 }), "in", "transport"],
      [pkt({ next: 44, transportBytes: 8 }), "in", "next-header"], // a fragment header
      [pkt({ next: 0, transportBytes: 8 }), "in", "next-header"], // hop-by-hop options
      [pkt({ next: 58, transportBytes: 8 }), "in", "next-header"], // ICMPv6
      [pkt({ version: 4 }), "in", "not-ipv6"],
      [pkt({}).subarray(0, 39), "in", "malformed"],
      [pkt({ transportBytes: 4 }), "in", "malformed"], // TCP header cut short
      [pkt({}).subarray(0, 50), "in", "malformed"], // payload length beyond the bytes present
      [reply(), "out", "no-flow"], // the guest may not open a flow to the client
      [reply({ sport: 23 }), "out", "port"],
      [reply({ dst: OTHER }), "out", "destination"],
    ];
    for (const [p, dir, reason] of cases) {
      const before = f.counters.drops[reason as keyof typeof f.counters.drops];
      expect(dir === "in" ? f.inbound(p, 0) : f.outbound(p, 0)).toBe(false);
      expect(f.counters.drops[reason as keyof typeof f.counters.drops], reason).toBe(before + 1);
    }
    expect(f.counters.inboundAccepted + f.counters.outboundAccepted).toBe(0);
    expect(f.inbound(new Uint8Array(0), 0)).toBe(false);
    for (let i = 0; i < 3000; i++) {
      const junk = crypto.getRandomValues(new Uint8Array(i % 100));
      expect(() => (f.inbound(junk, 0), f.outbound(junk, 0))).not.toThrow();
    }
  });

  test("a reply to a port the client did not use, or after the flow's idle timeout, is refused", () => {
    const f = new InnerFilter({ clientAddress: CLIENT, allocationAddress: ALLOC, transport: "udp", ports: [53] });
    expect(f.inbound(pkt({ next: 17, sport: 5000, dport: 53 }), 0)).toBe(true);
    expect(f.outbound(reply({ next: 17, sport: 53, dport: 5001 }), 1)).toBe(false);
    expect(f.outbound(reply({ next: 17, sport: 53, dport: 5000 }), UDP_FLOW_IDLE_MS - 1)).toBe(true);
    // Each packet refreshes the flow; silence past the bound forgets it.
    expect(f.outbound(reply({ next: 17, sport: 53, dport: 5000 }), 2 * UDP_FLOW_IDLE_MS - 1)).toBe(false);
    expect(f.counters.drops["no-flow"]).toBe(2);
    const t = new InnerFilter({ clientAddress: CLIENT, allocationAddress: ALLOC, transport: "tcp", ports: [22] });
    t.inbound(pkt({}), 0);
    expect(t.outbound(reply(), TCP_FLOW_IDLE_MS - 1)).toBe(true);
    expect(t.flowCount(2 * TCP_FLOW_IDLE_MS)).toBe(0);
  });

  test("the flow table is bounded: a new flow past the bound is refused until old ones expire", () => {
    const f = new InnerFilter({ clientAddress: CLIENT, allocationAddress: ALLOC, transport: "udp", ports: [53] });
    for (let i = 0; i < MAX_FLOWS_PER_GRANT; i++)
      expect(f.inbound(pkt({ next: 17, sport: 1024 + i, dport: 53 }), i)).toBe(true);
    expect(f.inbound(pkt({ next: 17, sport: 60000, dport: 53 }), MAX_FLOWS_PER_GRANT)).toBe(false);
    expect(f.counters.drops["flow-table-full"]).toBe(1);
    // An existing flow still passes.
    expect(f.inbound(pkt({ next: 17, sport: 1024, dport: 53 }), MAX_FLOWS_PER_GRANT)).toBe(true);
    expect(f.inbound(pkt({ next: 17, sport: 60000, dport: 53 }), UDP_FLOW_IDLE_MS + 10)).toBe(true);
  });
});
