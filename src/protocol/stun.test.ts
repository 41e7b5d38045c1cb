import { describe, expect, test } from "bun:test";
import { canonicalIpv6, formatIpv6, ipv6Bytes } from "./ipAddress.ts";
import {
  decodeStun,
  encodeBindingRequest,
  encodeBindingSuccess,
  isStunMessage,
  STUN_BINDING_REQUEST,
  STUN_BINDING_SUCCESS,
} from "./stun.ts";

const tx = Uint8Array.from({ length: 12 }, (_, i) => i + 1);

describe("STUN (RFC 5389)", () => {
  test("a Binding request is 20 bytes: type 0x0001, length 0, the magic cookie and the transaction ID", () => {
    const r = encodeBindingRequest(tx);
    expect(Buffer.from(r).toString("hex")).toBe("000100002112a442" + Buffer.from(tx).toString("hex"));
    expect(decodeStun(r)).toEqual({ type: STUN_BINDING_REQUEST, transactionId: tx, mapped: null });
  });

  test("XOR-MAPPED-ADDRESS round-trips for IPv4 and IPv6", () => {
    for (const mapped of [
      { address: "198.51.100.7", port: 51820 },
      { address: "2001:db8::1:2", port: 1 },
    ]) {
      const m = decodeStun(encodeBindingSuccess(tx, mapped));
      expect(m).toEqual({ type: STUN_BINDING_SUCCESS, transactionId: tx, mapped });
    }
  });

  test("RFC 5769 §2.2 sample response (IPv4 192.0.2.1:32853 with SOFTWARE, MESSAGE-INTEGRITY, FINGERPRINT) decodes", () => {
    const hex =
      "0101003c2112a442b7e7a701bc34d686fa87dfae8022000b7465737420766563746f7220002000080001a147e112a643" +
      "000800142b91f599fd9e90c38c7489f92af9ba53f06be7d780280004c07d4c96";
    const m = decodeStun(new Uint8Array(Buffer.from(hex, "hex")));
    expect(m?.mapped).toEqual({ address: "192.0.2.1", port: 32853 });
  });

  test("WireGuard messages, truncations, wrong cookies, lengths and unknown required attributes are not STUN", () => {
    const wgInit = new Uint8Array(148);
    wgInit[0] = 1;
    const wgTransport = new Uint8Array(32);
    wgTransport[0] = 4;
    const ok = encodeBindingSuccess(tx, { address: "198.51.100.7", port: 9 });
    expect(isStunMessage(wgInit)).toBe(false);
    expect(isStunMessage(wgTransport)).toBe(false);
    expect(decodeStun(ok.subarray(0, ok.length - 4))).toBeNull();
    const badCookie = ok.slice();
    badCookie[4] = 0;
    expect(decodeStun(badCookie)).toBeNull();
    const unknown = new Uint8Array([
      ...ok.subarray(0, 2),
      0,
      ok[3]! + 8,
      ...ok.subarray(4),
      0x00,
      0x7f,
      0x00,
      0x04,
      1,
      2,
      3,
      4,
    ]);
    expect(isStunMessage(unknown)).toBe(true);
    expect(decodeStun(unknown)).toBeNull();
    const overrun = ok.slice();
    overrun[23] = 200;
    expect(decodeStun(overrun)).toBeNull();
    for (let i = 0; i < 2000; i++) {
      const junk = crypto.getRandomValues(new Uint8Array(20 + ((i * 4) % 80)));
      expect(() => decodeStun(junk)).not.toThrow();
    }
  });
});

test("IPv6 text and bytes are canonical (RFC 5952)", () => {
  expect(formatIpv6(ipv6Bytes("FD00:0:0:0::1"))).toBe("fd00::1");
  expect(canonicalIpv6("2001:db8:0:0:1:0:0:1")).toBe("2001:db8::1:0:0:1");
  expect(canonicalIpv6("::ffff:192.0.2.1")).toBe("::ffff:c000:201");
  expect(canonicalIpv6("::")).toBe("::");
  expect(canonicalIpv6("1:2:3:4:5:6:7:8")).toBe("1:2:3:4:5:6:7:8");
  expect(() => ipv6Bytes("fe80::1%eth0")).toThrow();
  expect(() => ipv6Bytes("10.0.0.1")).toThrow();
});
