/**
 * Cryptokey routing (whitepaper §2): each peer owns a set of IP prefixes.
 * Outgoing packets go to the peer owning the longest prefix that matches the
 * destination; an incoming packet is delivered only if the longest prefix
 * matching its source belongs to the peer whose session decrypted it.
 *
 * Owns: the prefix table, one per Device (see AllowedIps).
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
  if (!Number.isInteger(bits) || bits < 0 || bits > max)
    throw new Error(`bad prefix length in ${JSON.stringify(cidr)}`);
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

/** IPv4 address bytes at `o` as an unsigned 32-bit number. */
function v4At(b: Uint8Array, o: number): number {
  return ((b[o]! << 24) | (b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!) >>> 0;
}

/** The IPv4 netmask of a prefix length as an unsigned 32-bit number. */
function v4Mask(bits: number): number {
  return bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
}

/** The map key of the first `bits` bits of the 16 bytes at `o` (one char per byte, last byte masked). */
function v6Key(b: Uint8Array, o: number, bits: number): string {
  let s = "";
  const whole = bits >> 3;
  for (let i = 0; i < whole; i++) s += String.fromCharCode(b[o + i]!);
  const rest = bits & 7;
  if (rest) s += String.fromCharCode(b[o + whole]! & ((0xff << (8 - rest)) & 0xff));
  return s;
}

/**
 * Longest-prefix table from IP prefixes to peers of type P: per prefix
 * length, a map from the masked address (a number for IPv4, a string for
 * IPv6) to the peer, searched longest first. Lookups allocate nothing for
 * IPv4 and one short string per prefix length for IPv6.
 */
export class AllowedIps<P> {
  private readonly v4 = new Map<number, Map<number, P>>();
  private readonly v6 = new Map<number, Map<string, P>>();
  private v4Lengths: number[] = [];
  private v6Lengths: number[] = [];

  /** Routes `cidr` to `peer` (a prefix already present moves to `peer`, as in `wg`). Throws on a malformed prefix. */
  insert(cidr: string, peer: P): void {
    const { address, bits } = parsePrefix(cidr);
    if (address.length === 4) {
      let t = this.v4.get(bits);
      if (!t) this.v4.set(bits, (t = new Map()));
      t.set(v4At(address, 0), peer);
    } else {
      let t = this.v6.get(bits);
      if (!t) this.v6.set(bits, (t = new Map()));
      t.set(v6Key(address, 0, bits), peer);
    }
    this.sortLengths();
  }

  private sortLengths(): void {
    this.v4Lengths = [...this.v4.keys()].sort((a, b) => b - a);
    this.v6Lengths = [...this.v6.keys()].sort((a, b) => b - a);
  }

  /** Removes every prefix of `peer`. */
  removePeer(peer: P): void {
    for (const tables of [this.v4, this.v6] as Map<number, Map<unknown, P>>[]) {
      for (const [bits, t] of tables) {
        for (const [k, p] of t) if (p === peer) t.delete(k);
        if (t.size === 0) tables.delete(bits);
      }
    }
    this.sortLengths();
  }

  /** The peer owning the longest prefix containing `address` (4 or 16 bytes), or null. */
  lookup(address: Uint8Array): P | null {
    if (address.length === 4) return this.lookupIn(address, 0, 4);
    if (address.length === 16) return this.lookupIn(address, 0, 6);
    return null;
  }

  /** Like lookup, for the address of family `version` at `offset` inside `bytes` (an IP header). */
  lookupIn(bytes: Uint8Array, offset: number, version: 4 | 6): P | null {
    if (version === 4) {
      const a = v4At(bytes, offset);
      for (const bits of this.v4Lengths) {
        const p = this.v4.get(bits)!.get((a & v4Mask(bits)) >>> 0);
        if (p !== undefined) return p;
      }
      return null;
    }
    for (const bits of this.v6Lengths) {
      const p = this.v6.get(bits)!.get(v6Key(bytes, offset, bits));
      if (p !== undefined) return p;
    }
    return null;
  }

  /** The prefixes routed to `peer`, as text (for stats and tests). */
  prefixesOf(peer: P): string[] {
    const out: string[] = [];
    for (const [bits, t] of this.v4) {
      for (const [k, p] of t)
        if (p === peer)
          out.push(`${formatAddress(Uint8Array.of(k >>> 24, (k >>> 16) & 255, (k >>> 8) & 255, k & 255))}/${bits}`);
    }
    for (const [bits, t] of this.v6) {
      for (const [k, p] of t) {
        if (p !== peer) continue;
        const a = new Uint8Array(16);
        for (let i = 0; i < k.length; i++) a[i] = k.charCodeAt(i);
        out.push(`${formatAddress(a)}/${bits}`);
      }
    }
    return out;
  }
}
