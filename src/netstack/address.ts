/**
 * IP address literals to bytes and back (RFC 4291 §2.2 text forms, RFC 5952
 * output), for the stack's boundary. Pure functions; never resolve names.
 */
import { isIPv4, isIPv6 } from "node:net";
import { formatIpv6 } from "../protocol/ipAddress.ts";
import { NetstackError } from "./errors.ts";

/** An address as bytes: 4 for IPv4, 16 for IPv6. */
export interface IpBytes {
  v6: boolean;
  bytes: Uint8Array;
}

/** Parses an IPv4 or IPv6 literal. Throws NetstackError "invalid-argument" for anything else. */
export function parseIp(text: string): IpBytes {
  if (isIPv4(text)) return { v6: false, bytes: Uint8Array.from(text.split(".").map(Number)) };
  if (isIPv6(text)) return { v6: true, bytes: parseIpv6(text) };
  throw new NetstackError("invalid-argument", `not an IP address literal: ${JSON.stringify(text)}`);
}

function parseIpv6(text: string): Uint8Array {
  let s = text;
  const out = new Uint8Array(16);
  // An embedded IPv4 tail (::ffff:1.2.3.4) becomes two groups.
  const v4 = s.match(/(\d+\.\d+\.\d+\.\d+)$/);
  if (v4) {
    const b = v4[1]!.split(".").map(Number);
    s = s.slice(0, -v4[1]!.length) + ((b[0]! << 8) | b[1]!).toString(16) + ":" + ((b[2]! << 8) | b[3]!).toString(16);
  }
  const [head, tail] = s.includes("::") ? s.split("::") : [s, undefined];
  const hs = head ? head.split(":") : [];
  const ts = tail ? tail.split(":") : [];
  const groups = tail === undefined ? hs : [...hs, ...new Array(8 - hs.length - ts.length).fill("0"), ...ts];
  groups.forEach((g, i) => {
    const v = parseInt(g, 16);
    out[2 * i] = v >> 8;
    out[2 * i + 1] = v & 0xff;
  });
  return out;
}

/** Formats 4 or 16 address bytes (RFC 5952 for IPv6, through the protocol layer's one formatter). */
export function formatIp(bytes: Uint8Array): string {
  return bytes.length === 4 ? [...bytes].join(".") : formatIpv6(bytes);
}

/** The IPv4 netmask for a prefix length 0..32, as 4 bytes. Throws "invalid-argument" otherwise. */
export function ipv4Mask(prefixLength: number): Uint8Array {
  if (!Number.isInteger(prefixLength) || prefixLength < 0 || prefixLength > 32)
    throw new NetstackError("invalid-argument", `IPv4 prefix length ${prefixLength} is outside 0..32`);
  const m = prefixLength === 0 ? 0 : (0xffffffff << (32 - prefixLength)) >>> 0;
  return Uint8Array.from([m >>> 24, (m >>> 16) & 0xff, (m >>> 8) & 0xff, m & 0xff]);
}
