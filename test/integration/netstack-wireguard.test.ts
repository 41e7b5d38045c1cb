/**
 * The whole client path of issue "Tunnel core": our TCP/IP stack (lwIP as
 * WebAssembly) → our WireGuard Device → UDP → Debian's wireguard-go (set up by
 * `wg`) in another namespace → the kernel's TCP server there
 * (test/support/wgWorld.ts draws the topology). Checks:
 * - 256 MiB up over IPv4 and 64 MiB down over IPv6, byte-exact (SHA-256);
 * - 100 concurrent connections (half IPv4, half IPv6) echoing 64 KiB each.
 * The same path under loss, delay and reordering is
 * test/integration/netstack-wireguard-loss.test.ts.
 * Time here: ≈ 25–35 s (the 256 MiB at ≈ 13–16 MiB/s). Namespaces bbwl-*.
 * Needs root, ip, wg, wireguard-go; otherwise prints why and skips.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { runJobs, startWgWorld, wgWorldSkipReason, type WgWorld } from "../support/wgWorld.ts";

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
    console.log(
      `netstack-wireguard: 256 MiB up in ${(up.ms / 1000).toFixed(1)} s, 64 MiB down in ${(down.ms / 1000).toFixed(1)} s`,
    );
  }, 400_000);

  test("100 concurrent connections, half IPv4 and half IPv6, each echo 64 KiB byte-exact", async () => {
    const jobs = Array.from({ length: 100 }, (_, i) => ({
      kind: "echo" as const,
      host: i % 2 ? w.server6 : w.server4,
      bytes: 64 * 1024,
      seed: 200 + i,
    }));
    const r = await runJobs(w, jobs, 120_000);
    expect(r.results.filter((x) => !x.ok)).toEqual([]);
    expect(r.results).toHaveLength(100);
  }, 150_000);
});
