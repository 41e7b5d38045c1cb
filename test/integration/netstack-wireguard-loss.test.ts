/**
 * The whole client path of issue "Tunnel core" on a bad link: our TCP/IP stack
 * (lwIP as WebAssembly) → our WireGuard Device → UDP → Debian's wireguard-go →
 * the kernel's TCP server in another namespace (test/support/wgWorld.ts), with
 * 1% loss, 20 ms delay and 25% reordering of the UDP datagrams both ways:
 * `tc netem` on both ends of the veth when the kernel has it, otherwise (this
 * machine's kernel is built without CONFIG_NET_SCH_NETEM) the same impairment
 * in userspace on the client's datagrams; the test prints which.
 *
 * 256 MiB IN TOTAL, SPLIT ACROSS 100 CONCURRENT CONNECTIONS (2.56 MiB each),
 * not one 256 MiB flow: at 1% loss and a 40 ms round trip one Reno flow is
 * bounded near MSS/RTT × 1.22/√p ≈ 0.4 MiB/s, so a single flow takes many
 * minutes (`bun run bench:tunnel-loss` runs it; the time is in
 * docs/adr/0102-lwip-wasm-and-tun.md). Half the connections use IPv4 and half
 * IPv6; half send to the server (lwIP sends) and half receive from it (the
 * kernel sends); every connection is checked byte-exact with SHA-256 by the
 * client. Time here: 34–63 s (7.6–4.1 MiB/s aggregate on this 2-core
 * machine, the slower with other jobs running). Namespaces bbwm-*.
 * Needs root, ip, wg, wireguard-go; otherwise prints why and skips.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { sh } from "../support/netns.ts";
import { clientStats, runJobs, startWgWorld, wgWorldSkipReason, type WgWorld } from "../support/wgWorld.ts";

const skipReason = wgWorldSkipReason();
if (skipReason) console.log(`SKIP test/integration/netstack-wireguard-loss.test.ts: ${skipReason}`);
let w: WgWorld | undefined;
afterAll(async () => {
  await w?.close();
});

const TOTAL_BYTES = 256 << 20;
const CONNECTIONS = 100;

/** Packets netem dropped on the veth end `dev` in `ns` ("Sent … (dropped N, …)" of `tc -s qdisc`). */
function netemDropped(ns: { exec(cmd: string[]): string[] }, dev: string): number {
  const m = /dropped (\d+)/.exec(sh(ns.exec(["tc", "-s", "qdisc", "show", "dev", dev])).out);
  return m ? Number(m[1]) : 0;
}

describe.skipIf(!!skipReason)(
  "lwIP → our WireGuard → wireguard-go → kernel TCP, 1% loss + 20 ms delay + 25% reordering",
  () => {
    test(`256 MiB in total over ${CONNECTIONS} concurrent connections (IPv4 and IPv6, both directions), each byte-exact`, async () => {
      w = await startWgWorld("bbwm", 83, { impair: { lossPercent: 1, delayMs: 20, reorderPercent: 25, seed: 7 } });
      console.log(`netstack-wireguard-loss: impairment by ${w.impairedBy}`);
      const world = w;
      const jobs = Array.from({ length: CONNECTIONS }, (_, i) => ({
        kind: (i % 4 < 2 ? "sink" : "source") as "sink" | "source",
        host: i % 2 === 0 ? world.server4 : world.server6,
        bytes: Math.floor(TOTAL_BYTES / CONNECTIONS) + (i === 0 ? TOTAL_BYTES % CONNECTIONS : 0),
        seed: 400 + i,
      }));
      expect(jobs.reduce((a, j) => a + j.bytes, 0)).toBe(TOTAL_BYTES);
      const r = await runJobs(world, jobs, 600_000);
      expect(r.results.filter((x) => !x.ok)).toEqual([]);
      expect(r.results).toHaveLength(CONNECTIONS);
      expect(r.results.reduce((a, x) => a + x.bytes, 0)).toBe(TOTAL_BYTES);
      // Every mix was present: both families, both directions.
      const mix = new Set(r.results.map((x) => `${x.kind} ${x.host.includes(":") ? 6 : 4}`));
      expect(mix.size).toBe(4);
      // The link really was bad: packets were dropped (and, in userspace, reordered) both ways.
      if (world.impairedBy === "netem") {
        expect(netemDropped(world.a, "bbwma0")).toBeGreaterThan(0);
        expect(netemDropped(world.b, "bbwmb0")).toBeGreaterThan(0);
      } else {
        const impairment = (await clientStats(world)).impairment as { dropped: number; reordered: number }[];
        expect(impairment).toHaveLength(2);
        for (const way of impairment) {
          expect(way.dropped).toBeGreaterThan(0);
          expect(way.reordered).toBeGreaterThan(0);
        }
      }
      console.log(
        `netstack-wireguard-loss: 256 MiB over ${CONNECTIONS} connections in ${(r.ms / 1000).toFixed(1)} s (${(256 / (r.ms / 1000)).toFixed(2)} MiB/s aggregate), client CPU ${(r.cpuMs / 1000).toFixed(1)} s`,
      );
    }, 660_000);
  },
);
