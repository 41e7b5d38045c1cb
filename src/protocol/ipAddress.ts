/**
 * IP address bytes and text for the tunnel's packet-level code (STUN
 * addresses, the host endpoint's inner filter, grant addresses): literal →
 * bytes and bytes → the canonical RFC 5952 text. Pure.
 * Must never: accept a zone index or a prefix length as part of an address.
 */
import { isIPv4, isIPv6 } from "node:net";

/** The 4 bytes of an IPv4 dotted quad. Throws for anything else. */
export function ipv4Bytes(a: string): Uint8Array {
  if (!isIPv4(a)) throw new Error(`not an IPv4 address: ${a}`);
  return Uint8Array.from(a.split(".").map(Number));
}

/** The 16 bytes of an IPv6 literal (no zone). Throws for anything else. */
export function ipv6Bytes(a: string): Uint8Array {
  if (!isIPv6(a) || a.includes("%")) throw new Error(`not an IPv6 address: ${a}`);
  let text = a;
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4) {
    const b = ipv4Bytes(v4[1]!);
    text =
      text.slice(0, -v4[1]!.length) + `${((b[0]! << 8) | b[1]!).toString(16)}:${((b[2]! << 8) | b[3]!).toString(16)}`;
  }
  const [head, tail] = text.includes("::") ? text.split("::") : [text, null];
  const h = head ? head.split(":") : [];
  const t = tail ? tail.split(":") : [];
  const groups = tail === null ? h : [...h, ...Array(8 - h.length - t.length).fill("0"), ...t];
  const out = new Uint8Array(16);
  groups.forEach((g, i) => {
    const n = parseInt(g, 16);
    out[2 * i] = n >> 8;
    out[2 * i + 1] = n & 0xff;
  });
  return out;
}

/** The RFC 5952 text of 16 address bytes (lowercase, longest zero run compressed). */
export function formatIpv6(b: Uint8Array): string {
  const g: number[] = [];
  for (let i = 0; i < 16; i += 2) g.push((b[i]! << 8) | b[i + 1]!);
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) [bestStart, bestLen] = [i, j - i];
    i = j;
  }
  const hex = g.map((x) => x.toString(16));
  if (bestStart < 0) return hex.join(":");
  return `${hex.slice(0, bestStart).join(":")}::${hex.slice(bestStart + bestLen).join(":")}`;
}

/** The canonical text of an IPv6 literal (so two spellings of one address compare equal). Throws for anything else. */
export function canonicalIpv6(a: string): string {
  return formatIpv6(ipv6Bytes(a));
}
