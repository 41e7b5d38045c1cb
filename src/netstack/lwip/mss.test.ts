/**
 * The stack's segments follow its link MTU (ADR 0103): two stacks joined back
 * to back at a given MTU move 1 MiB each way over IPv4 and IPv6, and every
 * packet either sends fits the MTU while each SYN advertises the MSS derived
 * from it (src/protocol/tunnelMtu.ts), at the default tunnel MTU and at the
 * 1,420 bytes used before (where IPv4's 1,380 is capped at the 1,360 compiled
 * into lwIP as TCP_MSS, limits.ts TCP_MSS_CEILING_BYTES).
 */
import { describe, expect, test } from "bun:test";
import { IP_HEADER_BYTES, TCP_HEADER_BYTES, tcpMssBytes, TUNNEL_MTU, type IpFamily } from "../../protocol/tunnelMtu.ts";
import { TCP_MSS_CEILING_BYTES } from "../limits.ts";
import { createNetstack, type Netstack, type TcpConnection } from "../index.ts";

/** The MSS option of a TCP SYN (or SYN-ACK), or null when `p` is not one. */
function synMss(p: Uint8Array): number | null {
  const v6 = p[0]! >> 4 === 6;
  const off = v6 ? 40 : (p[0]! & 15) * 4;
  if (!(p[off + 13]! & 0x02)) return null;
  const end = off + (p[off + 12]! >> 4) * 4;
  for (let k = off + 20; k < end; ) {
    const kind = p[k]!;
    if (kind === 0) break;
    if (kind === 1) {
      k++;
      continue;
    }
    if (kind === 2) return (p[k + 2]! << 8) | p[k + 3]!;
    k += p[k + 1]!;
  }
  return null;
}

async function drain(c: TcpConnection): Promise<number> {
  let n = 0;
  for (let d = await c.read(); d; d = await c.read()) n += d.length;
  return n;
}

/** Moves `bytes` each way between two stacks at `mtu` over `family`; returns the largest packet and the SYNs' MSS values. */
async function exchange(
  mtu: number | undefined,
  family: IpFamily,
  bytes: number,
): Promise<{ largest: number; mss: number[]; received: number[] }> {
  const queues: [Uint8Array[], Uint8Array[]] = [[], []];
  const stacks: Netstack[] = [];
  let scheduled = false;
  let largest = 0;
  const mss: number[] = [];
  const deliver = () => {
    scheduled = false;
    for (let i = 0; i < 2; i++) {
      const q = queues[i]!.splice(0);
      if (q.length) stacks[1 - i]!.inputBatch(q);
    }
  };
  const out = (i: number) => (p: Uint8Array) => {
    largest = Math.max(largest, p.length);
    const m = synMss(p);
    if (m !== null) mss.push(m);
    queues[i]!.push(p.slice());
    if (!scheduled) {
      scheduled = true;
      setImmediate(deliver);
    }
  };
  const link = mtu === undefined ? {} : { mtu };
  for (const i of [0, 1])
    stacks.push(
      createNetstack({
        ipv4: { address: `10.1.0.${i + 1}`, prefixLength: 24 },
        ipv6: [`fd00:1::${i + 1}`],
        output: out(i),
        ...link,
      }),
    );
  try {
    const served = new Promise<number>((done) => {
      stacks[1]!.listen(family === 4 ? "0.0.0.0" : "::", 80, (c) => {
        void (async () => {
          const [, n] = await Promise.all([
            c.write(new Uint8Array(bytes).fill(1)).then(() => c.closeWrite()),
            drain(c),
          ]);
          done(n);
        })();
      });
    });
    const c = await stacks[0]!.connect(family === 4 ? "10.1.0.2" : "fd00:1::2", 80);
    const [, got, sent] = await Promise.all([
      c.write(new Uint8Array(bytes).fill(2)).then(() => c.closeWrite()),
      drain(c),
      served,
    ]);
    return { largest, mss, received: [got, sent] };
  } finally {
    for (const s of stacks) s.close();
  }
}

describe("segments follow the link MTU", () => {
  for (const mtu of [undefined, 1420])
    for (const family of [4, 6] as const) {
      const label = mtu === undefined ? `the default MTU (${TUNNEL_MTU})` : `MTU ${mtu}`;
      test(`IPv${family} at ${label}: every packet fits and every SYN advertises MTU − IP − TCP (at most the compiled ceiling)`, async () => {
        const r = await exchange(mtu, family, 1 << 20);
        const m = mtu ?? TUNNEL_MTU;
        expect(r.received).toEqual([1 << 20, 1 << 20]);
        const mss = Math.min(TCP_MSS_CEILING_BYTES, tcpMssBytes(m, family));
        expect(r.mss).toEqual([mss, mss]);
        expect(r.largest).toBe(mss + IP_HEADER_BYTES[family] + TCP_HEADER_BYTES);
        expect(r.largest).toBeLessThanOrEqual(m);
      });
    }
});
