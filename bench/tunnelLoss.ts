/**
 * Throughput of the whole client path on a bad link (issue "Tunnel core"):
 * our TCP/IP stack (lwIP as WebAssembly) + our WireGuard on UDP in one
 * namespace → Debian's wireguard-go → the kernel's TCP server in another
 * (test/support/wgWorld.ts), with loss, delay and reordering of the UDP
 * datagrams both ways: `tc netem` on the veth when the kernel has it, else
 * the userspace impairment (printed). By default one flow carries 256 MiB to
 * the server (the figure in docs/adr/0102-lwip-wasm-and-tun.md); `--flows N`
 * splits the total across N concurrent connections, alternating IPv4/IPv6,
 * and `--direction down|both` makes the server send (kernel TCP, which acts on
 * SACK) or alternates.
 *
 * The reference printed beside the result is the Reno bound of one flow,
 * MSS/RTT × 1.22/√p (Mathis et al. 1997) with the tunnel MSS (1,220 bytes over IPv6), RTT = 2 ×
 * delay and p = the loss per direction, as a ratio measured/bound.
 * Every transfer is checked byte-exact (SHA-256) by the client.
 *
 *   bun bench/tunnelLoss.ts [--mib 256] [--flows 1] [--direction up|down|both]
 *                           [--loss 1] [--delay 20] [--reorder 25]
 * Needs root, wg and wireguard-go. Run under `flock /tmp/bb-heavy.lock`:
 * one 256 MiB flow at 1% loss takes several minutes.
 */
import { parseArgs } from "node:util";
import { sh } from "../test/support/netns.ts";
import { TCP_MSS_BYTES } from "../src/netstack/limits.ts";
import { clientStats, runJobs, startWgWorld, wgWorldSkipReason } from "../test/support/wgWorld.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/tunnelLoss.ts", 900);

const { values } = parseArgs({
  options: {
    mib: { type: "string", default: "256" },
    flows: { type: "string", default: "1" },
    direction: { type: "string", default: "up" },
    loss: { type: "string", default: "1" },
    delay: { type: "string", default: "20" },
    reorder: { type: "string", default: "25" },
  },
});
const MIB = Number(values.mib);
const FLOWS = Number(values.flows);
const direction = values.direction!;
if (!(MIB > 0) || !(FLOWS >= 1) || !["up", "down", "both"].includes(direction)) {
  console.error(
    "usage: bun bench/tunnelLoss.ts [--mib M>0] [--flows N>=1] [--direction up|down|both] [--loss %] [--delay ms] [--reorder %]",
  );
  process.exit(2);
}
const impair = {
  lossPercent: Number(values.loss),
  delayMs: Number(values.delay),
  reorderPercent: Number(values.reorder),
  seed: 11,
};

const skip = wgWorldSkipReason();
if (skip) {
  console.log(`tunnelLoss: skipped: ${skip}`);
  process.exit(0);
}
const MSS = TCP_MSS_BYTES;
const renoMiBps =
  impair.lossPercent > 0
    ? ((MSS / ((2 * impair.delayMs) / 1000)) * (1.22 / Math.sqrt(impair.lossPercent / 100))) / 2 ** 20
    : Infinity;

const w = await startWgWorld("bbtl", 86, { impair });
try {
  console.log(
    `tunnelLoss: ${MIB} MiB over ${FLOWS} flow(s), direction ${direction}; ${impair.lossPercent}% loss, ${impair.delayMs} ms delay, ${impair.reorderPercent}% reordering each way, by ${w.impairedBy}`,
  );
  const total = MIB * 2 ** 20;
  const per = Math.floor(total / FLOWS);
  const jobs = Array.from({ length: FLOWS }, (_, i) => ({
    kind: (direction === "up" || (direction === "both" && i % 2 === 0) ? "sink" : "source") as "sink" | "source",
    host: i % 2 === 0 ? w.server4 : w.server6,
    bytes: i === FLOWS - 1 ? total - per * (FLOWS - 1) : per,
    seed: 900 + i,
  }));
  const r = await runJobs(w, jobs, 3_600_000);
  const bad = r.results.filter((x) => !x.ok);
  const mibps = MIB / (r.ms / 1000);
  const perFlow = r.results.map((x) => x.bytes / 2 ** 20 / (x.ms / 1000)).sort((a, b) => a - b);
  console.log(`  ${r.results.length - bad.length}/${r.results.length} flows byte-exact (SHA-256)`);
  console.log(
    `  ${(r.ms / 1000).toFixed(1)} s wall, ${mibps.toFixed(2)} MiB/s = ${((mibps * 8 * 2 ** 20) / 1e6).toFixed(1)} Mbit/s aggregate; client CPU ${(r.cpuMs / 1000).toFixed(1)} s`,
  );
  console.log(
    `  per flow MiB/s: min ${perFlow[0]!.toFixed(2)}, median ${perFlow[Math.floor(perFlow.length / 2)]!.toFixed(2)}, max ${perFlow.at(-1)!.toFixed(2)}`,
  );
  console.log(
    `  Reno bound of one flow: ${renoMiBps.toFixed(2)} MiB/s; median flow / bound = ${(perFlow[Math.floor(perFlow.length / 2)]! / renoMiBps).toFixed(2)}`,
  );
  for (const ns of [w.a, w.b]) {
    const snmp = sh(ns.exec(["cat", "/proc/net/snmp"]))
      .out.split("\n")
      .filter((l) => l.startsWith("Udp:"));
    const [names, vals] = snmp.map((l) => l.split(/\s+/).slice(1));
    const udp = Object.fromEntries(names!.map((n, i) => [n, Number(vals![i])]));
    console.log(
      `  UDP in ${ns.name}: in ${udp.InDatagrams}, out ${udp.OutDatagrams}, receive-buffer drops ${udp.RcvbufErrors}, send-buffer drops ${udp.SndbufErrors}`,
    );
  }
  const stats = await clientStats(w);
  console.log(`  client: ${JSON.stringify({ stack: stats.stack, impairment: stats.impairment })}`);
  if (bad.length) {
    console.log(`  FAILED: ${JSON.stringify(bad.slice(0, 5))}`);
    process.exitCode = 1;
  }
} finally {
  await w.close();
}
