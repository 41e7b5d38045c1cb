/**
 * TEST SUPPORT: a lossy link inside a router namespace, for topologies whose
 * kernel has no `tc netem` (test/support/netem.ts). Run with `ip netns exec`
 * in a namespace that routes between two interfaces: it opens a TUN device
 * (name argv[2], MTU 1,500) and prints {"ev":"ready"}; the test then sends
 * the traffic it wants impaired into the TUN with policy routes (e.g.
 * `ip rule add iif IN lookup 100`, `ip route add default dev TUN table 100`).
 * Each packet read is passed through the seeded userspace Impairment
 * (test/support/impairment.ts), one per direction (packets from
 * 10.0.0.0/8 are "up", the rest "down"), and written back into the TUN,
 * where the kernel routes it on through its main table.
 * CONFIG (argv[3], JSON): ImpairmentOptions (lossPercent, delayMs, reorderPercent, seed).
 * stdin lines: {"op":"stats"} → {"ev":"stats","up":ImpairmentStats,"down":ImpairmentStats}.
 * Exits, closing the TUN, when stdin closes. Must never: be imported by src/, or
 * run outside a namespace of the test's own.
 */
import { openTun } from "../../native/tun/tun.ts";
import { Impairment, type ImpairmentOptions } from "./impairment.ts";
import { stdinCommands } from "./stdinLines.ts";

/** The TUN's MTU, bytes: Ethernet's, so the router carries whatever its links carry. */
const ROUTER_TUN_MTU = 1500;

const name = process.argv[2]!;
const opts = JSON.parse(process.argv[3]!) as ImpairmentOptions;
const emit = (o: object) => process.stdout.write(JSON.stringify(o) + "\n");
const tun = openTun({ name, mtu: ROUTER_TUN_MTU });
const write = (p: Uint8Array) => void tun.write(p);
const up = new Impairment(opts, write);
const down = new Impairment({ ...opts, seed: opts.seed + 1 }, write);
tun.start((packets) => {
  // An IPv4 source address starts at offset 12; anything else counts as "down".
  for (const p of packets) (p[0]! >> 4 === 4 && p[12] === 10 ? up : down).send(p);
});
emit({ ev: "ready" });
for await (const c of stdinCommands<{ op: string }>())
  if (c.op === "stats") emit({ ev: "stats", up: up.stats, down: down.stats });
up.stop();
down.stop();
await tun.close();
process.exit(0);
