/**
 * The whole client path of issue "Tunnel core": our TCP/IP stack (lwIP as
 * WebAssembly) → our WireGuard Device → UDP → Debian's wireguard-go (set up by
 * `wg`) in another namespace → the kernel's TCP server there
 * (test/support/wgWorld.ts draws the topology). Checks:
 * - 256 MiB up over IPv4 and 64 MiB down over IPv6, byte-exact (SHA-256);
 * - 100 concurrent connections (half IPv4, half IPv6) echoing 64 KiB each;
 * - with 1% loss, 20 ms delay and 25% reordering of the UDP datagrams both
 *   ways (seeded, in userspace: this kernel has no sch_netem), 1 MiB each way
 *   stays byte-exact.
 * Time here: ≈ 25–35 s (the 256 MiB at ≈ 13–16 MiB/s). Namespaces bbwl-*, bbwm-*.
 * Needs root, ip, wg, wireguard-go; otherwise prints why and skips.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { clientStats, runJobs, startWgWorld, wgWorldSkipReason, type WgWorld } from "../support/wgWorld.ts";

const skipReason = wgWorldSkipReason();
if (skipReason) console.log(`SKIP test/integration/netstack-wireguard.test.ts: ${skipReason}`);
const worlds: WgWorld[] = [];
afterAll(async () => {
  for (const w of worlds) await w.close();
});

describe.skipIf(!!skipReason)("lwIP → our WireGuard → wireguard-go → kernel TCP", () => {
  let w: WgWorld;

  test("256 MiB up (IPv4) and 64 MiB down (IPv6) are byte-exact", async () => {
    w = await startWgWorld("bbwl", 82);
    worlds.push(w);
    const up = await runJobs(w, [{ kind: "sink", host: w.server4, bytes: 256 << 20, seed: 101 }], 240_000);
    expect(up.results).toEqual([expect.objectContaining({ ok: true, bytes: 256 << 20 })]);
    const down = await runJobs(w, [{ kind: "source", host: w.server6, bytes: 64 << 20, seed: 102 }], 120_000);
    expect(down.results).toEqual([expect.objectContaining({ ok: true, bytes: 64 << 20 })]);
    console.log(`netstack-wireguard: 256 MiB up in ${(up.ms / 1000).toFixed(1)} s, 64 MiB down in ${(down.ms / 1000).toFixed(1)} s`);
  }, 400_000);

  test("100 concurrent connections, half IPv4 and half IPv6, each echo 64 KiB byte-exact", async () => {
    const jobs = Array.from({ length: 100 }, (_, i) => ({ kind: "echo" as const, host: i % 2 ? w.server6 : w.server4, bytes: 64 * 1024, seed: 200 + i }));
    const r = await runJobs(w, jobs, 120_000);
    expect(r.results.filter((x) => !x.ok)).toEqual([]);
    expect(r.results).toHaveLength(100);
  }, 150_000);

  test("with 1% loss, 20 ms delay and 25% reordering on the UDP path, 1 MiB each way stays byte-exact", async () => {
    const m = await startWgWorld("bbwm", 83, { impair: { lossPercent: 1, delayMs: 20, reorderPercent: 25, seed: 7 } });
    worlds.push(m);
    const r = await runJobs(
      m,
      [
        { kind: "sink", host: m.server4, bytes: 1 << 20, seed: 301 },
        { kind: "source", host: m.server6, bytes: 1 << 20, seed: 302 },
      ],
      120_000,
    );
    expect(r.results.filter((x) => !x.ok)).toEqual([]);
    const stats = await clientStats(m);
    const impairment = stats.impairment as { dropped: number; reordered: number }[];
    expect(impairment.reduce((a, i) => a + i.dropped, 0)).toBeGreaterThan(0);
    expect(impairment.reduce((a, i) => a + i.reordered, 0)).toBeGreaterThan(0);
  }, 150_000);
});
