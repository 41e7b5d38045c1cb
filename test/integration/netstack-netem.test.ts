/**
 * The userspace TCP/IP stack against the Linux kernel's TCP through TUN on a
 * bad path: 1% loss both ways, 20 ms delay and 25% reordering (50%
 * correlation) on the kernel's side. With `tc netem` on the device when the
 * kernel has it (this machine's kernel lacks CONFIG_NET_SCH_NETEM), otherwise
 * the same impairment in userspace between the device and the stack
 * (test/support/impairment.ts); loss toward the kernel is always in userspace.
 *
 * Sized for CI: a single flow at 1% loss and ≈ 20 ms RTT is bounded near
 * MSS/RTT × 1.22/√p ≈ 6.6 Mbit/s, so 2 MiB each way (IPv4 up, IPv6 down)
 * takes ≈ 6 s. Namespace bbnm-PID. Needs root and ip; otherwise skips.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { netnsSkipReason } from "../support/netns.ts";
import { forEachStreamChunk, streamSha256 } from "../support/stream.ts";
import { startTunWorld, type TunWorld } from "../support/tunWorld.ts";

const skipReason = netnsSkipReason();
if (skipReason) console.log(`SKIP test/integration/netstack-netem.test.ts: ${skipReason}`);
let w: TunWorld;

beforeAll(async () => {
  if (skipReason) return;
  w = await startTunWorld("bbnm", 77, { impair: { lossPercent: 1, delayMs: 20, reorderPercent: 25, seed: 1234 } });
  console.log(`netstack-netem: impairment by ${w.impairedBy}`);
});
afterAll(async () => {
  await w?.close();
});

const enc = (s: string) => new TextEncoder().encode(s);
const N = 2 << 20;

describe.skipIf(!!skipReason)("lwIP ⇄ Linux TCP through TUN with loss, delay and reordering", () => {
  test("2 MiB up over IPv4 and 2 MiB down over IPv6 stay byte-exact", async () => {
    const up = await w.stack.connect(w.kernel4, w.port);
    await up.write(enc("SINK\n"));
    await forEachStreamChunk(N, 71, 64 * 1024, (ch) => up.write(ch));
    await up.closeWrite();
    let answer = "";
    for (let ch = await up.read(); ch; ch = await up.read()) answer += new TextDecoder().decode(ch);
    expect(answer.trim()).toBe(`${N} ${await streamSha256(N, 71)}`);

    const down = await w.stack.connect(w.kernel6, w.port);
    await down.write(enc(`SOURCE ${N} 72\n`));
    const h = createHash("sha256");
    let bytes = 0;
    for (let ch = await down.read(); ch; ch = await down.read()) {
      h.update(ch);
      bytes += ch.length;
    }
    expect({ bytes, sha256: h.digest("hex") }).toEqual({ bytes: N, sha256: await streamSha256(N, 72) });
    // The path really was bad: packets were lost and reordered on the way.
    const dropped = w.impairments.reduce((a, i) => a + i.stats.dropped, 0);
    expect(dropped).toBeGreaterThan(0);
    await up.close();
    await down.close();
  }, 120_000);
});
