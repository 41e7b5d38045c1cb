/**
 * Cryptokey routing (whitepaper §2): each peer owns a set of IP prefixes.
 * Outgoing packets go to the peer owning the longest prefix that matches the
 * destination; an incoming packet is delivered only if the longest prefix
 * matching its source belongs to the peer whose session decrypted it.
 *
 * Owns: the prefix table, one per Device: for each address family, a map per
 * prefix length from the masked address to the peer, searched longest first.
 * Must never: match across address families, or accept a malformed prefix.
 */
import { isIPv4, isIPv6 } from "node:net";

/** Parses "10.0.0.0/24" or "fd00::/64" into address bytes and prefix length; throws with the reason (local configuration). */
export function parsePrefix(cidr: string): { address: Uint8Array; bits: number } {
  const slash = cidr.indexOf("/");
  const addr = slash < 0 ? cidr : cidr.slice(0, slash);
  const address = parseAddress(addr);
  if (!address) throw new Error(`not an IP address: ${JSON.stringify(addr)}`);
  const max = address.length * 8;
  const bits = slash < 0 ? max : Number(cidr.slice(slash + 1));
  if (!Number.isInteger(bits) || bits < 0 || bits > max) throw new Error(`bad prefix length in ${JSON.stringify(cidr)}`);
  return { address: mask(address, bits), bits };
}

/** Address bytes of an IPv4 (4 bytes) or IPv6 (16 bytes) text address, or null. */
export function parseAddress(s: string): Uint8Array | null {
  if (isIPv4(s)) return Uint8Array.from(s.split(".").map(Number));
  if (!isIPv6(s)) return null;
  let text = s;
  const out = new Uint8Array(16);
  const v4 = text.match(/(\d+\.\d+\.\d+\.\d+)$/);
  if (v4) {
    const b = v4[1]!.split(".").map(Number);
    const hi = ((b[0]! << 8) | b[1]!).toString(16);
    const lo = ((b[2]! << 8) | b[3]!).toString(16);
    text = text.slice(0, -v4[1]!.length) + `${hi}:${lo}`;
  }
  const [head, tail] = text.includes("::") ? text.split("::") : [text, null];
  const h = head ? head.split(":") : [];
  const t = tail ? tail.split(":") : [];
  const groups = tail === null ? h : [...h, ...Array(8 - h.length - t.length).fill("0"), ...t];
  if (groups.length !== 8) return null;
  groups.forEach((g, i) => {
    const v = parseInt(g, 16);
    out[2 * i] = v >> 8;
    out[2 * i + 1] = v & 0xff;
  });
  return out;
}

/** Text form of 4- or 16-byte address bytes (IPv6 in RFC 5952 form: longest zero run of ≥ 2 groups as "::"). */
export function formatAddress(a: Uint8Array): string {
  if (a.length === 4) return a.join(".");
  const g: number[] = [];
  for (let i = 0; i < 16; i += 2) g.push((a[i]! << 8) | a[i + 1]!);
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j === i ? i + 1 : j;
  }
  const hex = (xs: number[]) => xs.map((x) => x.toString(16)).join(":");
  return best < 0 ? hex(g) : `${hex(g.slice(0, best))}::${hex(g.slice(best + bestLen))}`;
}

function mask(a: Uint8Array, bits: number): Uint8Array {
  const out = Uint8Array.from(a);
  for (let i = 0; i < out.length; i++) {
    const keep = Math.max(0, Math.min(8, bits - 8 * i));
    out[i] = out[i]! & ((0xff << (8 - keep)) & 0xff);
  }
  return out;
}

function key(a: Uint8Array, bits: number): string {
  let s = "";
  const m = mask(a, bits);
  for (let i = 0; i < Math.ceil(bits / 8); i++) s += String.fromCharCode(m[i]!);
  return s;
}

/** Longest-prefix table from IP prefixes to peers of type P. */
export class AllowedIps<P> {
  /** Per family, prefix length → (masked address → peer); lengths kept sorted longest first. */
  private readonly tables = { 4: new Map<number, Map<string, P>>(), 6: new Map<number, Map<string, P>>() };
  private readonly lengths: { 4: number[]; 6: number[] } = { 4: [], 6: [] };

  /** Routes `cidr` to `peer` (a prefix already present moves to `peer`, as in `wg`). Throws on a malformed prefix. */
  insert(cidr: string, peer: P): void {
    const { address, bits } = parsePrefix(cidr);
    const fam = address.length === 4 ? 4 : 6;
    let t = this.tables[fam].get(bits);
    if (!t) {
      t = new Map();
      this.tables[fam].set(bits, t);
      this.lengths[fam] = [...this.tables[fam].keys()].sort((a, b) => b - a);
    }
    t.set(key(address, bits), peer);
  }

  /** Removes every prefix of `peer`. */
  removePeer(peer: P): void {
    for (const fam of [4, 6] as const) {
      for (const [bits, t] of this.tables[fam]) {
        for (const [k, p] of t) if (p === peer) t.delete(k);
        if (t.size === 0) this.tables[fam].delete(bits);
      }
      this.lengths[fam] = [...this.tables[fam].keys()].sort((a, b) => b - a);
    }
  }

  /** The peer owning the longest prefix containing `address` (4 or 16 bytes), or null. */
  lookup(address: Uint8Array): P | null {
    const fam = address.length === 4 ? 4 : address.length === 16 ? 6 : 0;
    if (fam === 0) return null;
    for (const bits of this.lengths[fam]) {
      const p = this.tables[fam].get(bits)!.get(key(address, bits));
      if (p !== undefined) return p;
    }
    return null;
  }

  /** The prefixes routed to `peer`, as text (for stats and tests). */
  prefixesOf(peer: P): string[] {
    const out: string[] = [];
    for (const fam of [4, 6] as const) {
      for (const [bits, t] of this.tables[fam]) {
        for (const [k, p] of t) {
          if (p !== peer) continue;
          const a = new Uint8Array(fam === 4 ? 4 : 16);
          for (let i = 0; i < k.length; i++) a[i] = k.charCodeAt(i);
          out.push(`${formatAddress(a)}/${bits}`);
        }
      }
    }
    return out;
  }
}
