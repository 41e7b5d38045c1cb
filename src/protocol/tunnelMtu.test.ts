/**
 * The tunnel MTU and what derives from it (ADR 0103): the MSS per family, the
 * outer datagram of a full-size packet, the relay frame bound, the
 * BB_DEBUG_TUNNEL_MTU knob, and that every copy of the number in the tree
 * (native/tun's default, the netstack's MSS, lwIP's compiled ceiling) agrees.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { DEFAULT_TUN_MTU, MIN_TUN_MTU } from "../../native/tun/tun.ts";
import { TCP_MSS_BYTES, TCP_MSS_CEILING_BYTES, TUNNEL_MTU as NETSTACK_MTU } from "../netstack/limits.ts";
import { MAX_RELAY_FRAME_BYTES, TUNNEL_MTU as CONNECTION_MTU } from "./connection.ts";
import { debugTunnelMtu, MAX_DEBUG_TUNNEL_MTU } from "./debugKnobs.ts";
import {
  MIN_TUNNEL_MTU,
  outerDatagramBytes,
  tcpMssBytes,
  TUNNEL_MTU,
  TUNNEL_TCP_MSS_BYTES,
  WIREGUARD_OVERHEAD_BYTES,
} from "./tunnelMtu.ts";

describe("tunnel MTU", () => {
  test("the tunnel MTU is the IPv6 minimum, 1,280 bytes, and every module uses that one value", () => {
    expect(TUNNEL_MTU).toBe(1280);
    expect(CONNECTION_MTU).toBe(TUNNEL_MTU);
    expect(NETSTACK_MTU).toBe(TUNNEL_MTU);
    expect(DEFAULT_TUN_MTU).toBe(TUNNEL_MTU);
    expect(MIN_TUN_MTU).toBe(MIN_TUNNEL_MTU);
  });

  test("the MSS is MTU − IP header − TCP header per family", () => {
    expect(tcpMssBytes(1280, 6)).toBe(1220);
    expect(tcpMssBytes(1280, 4)).toBe(1240);
    expect(tcpMssBytes(1420, 6)).toBe(1360);
    expect(TUNNEL_TCP_MSS_BYTES).toBe(1220);
    expect(TCP_MSS_BYTES).toBe(TUNNEL_TCP_MSS_BYTES);
  });

  test("a full-size packet's datagram fits a 1,400-byte path over either underlay (1,420's did not)", () => {
    expect(outerDatagramBytes(TUNNEL_MTU, 4)).toBe(1340);
    expect(outerDatagramBytes(TUNNEL_MTU, 6)).toBe(1360);
    expect(outerDatagramBytes(TUNNEL_MTU, 6)).toBeLessThanOrEqual(1400);
    expect(outerDatagramBytes(1420, 4)).toBe(1480);
  });

  test("a full-size packet's WireGuard message fits one relay frame, up to the largest MTU the knob allows", () => {
    expect(TUNNEL_MTU + WIREGUARD_OVERHEAD_BYTES).toBeLessThanOrEqual(MAX_RELAY_FRAME_BYTES);
    expect(MAX_DEBUG_TUNNEL_MTU + WIREGUARD_OVERHEAD_BYTES).toBe(MAX_RELAY_FRAME_BYTES);
  });

  test("an MTU below the IPv6 minimum or not an integer is a RangeError", () => {
    for (const bad of [1279, 0, -1, 1280.5, 65536, NaN]) {
      expect(() => tcpMssBytes(bad, 6)).toThrow(RangeError);
      expect(() => outerDatagramBytes(bad, 4)).toThrow(RangeError);
    }
  });

  test("lwIP's compiled TCP_MSS is the ceiling limits.ts names, and at least the tunnel's MSS (so the runtime MTU decides)", () => {
    const opts = readFileSync(resolve(import.meta.dir, "../../native/lwip/port/lwipopts.h"), "utf8");
    const compiled = Number(/^#define TCP_MSS\s+(\d+)/m.exec(opts)?.[1]);
    expect(compiled).toBe(TCP_MSS_CEILING_BYTES);
    expect(compiled).toBeGreaterThanOrEqual(tcpMssBytes(TUNNEL_MTU, 4));
  });
});

describe("BB_DEBUG_TUNNEL_MTU", () => {
  test("unset or empty gives the tunnel MTU; a value in range is used", () => {
    expect(debugTunnelMtu({})).toBe(TUNNEL_MTU);
    expect(debugTunnelMtu({ BB_DEBUG_TUNNEL_MTU: "" })).toBe(TUNNEL_MTU);
    expect(debugTunnelMtu({ BB_DEBUG_TUNNEL_MTU: "1420" })).toBe(1420);
    expect(debugTunnelMtu({ BB_DEBUG_TUNNEL_MTU: String(MAX_DEBUG_TUNNEL_MTU) })).toBe(MAX_DEBUG_TUNNEL_MTU);
  });

  test("out of range or not a decimal integer is a RangeError naming the knob", () => {
    for (const bad of ["1279", String(MAX_DEBUG_TUNNEL_MTU + 1), "1e3", "0x500", " 1400", "1400.0", "abc", "-1300"]) {
      expect(() => debugTunnelMtu({ BB_DEBUG_TUNNEL_MTU: bad })).toThrow(/BB_DEBUG_TUNNEL_MTU/);
    }
  });
});
