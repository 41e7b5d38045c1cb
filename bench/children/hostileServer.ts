/**
 * Child process of bench/hostile.ts: a real scheduler (fresh data directory,
 * development manifest) with one enrolled host and one allocation, that
 * samples its own event loop so the figures are the server's alone.
 *
 * Prints one JSON line with the URL and credentials, then answers stdin
 * lines: `reset` (start a measurement), `report` (print event-loop delay
 * percentiles, ms, and CPU time used since `reset`, ms), `quit`.
 */
import { enrollTestHost, startTestScheduler, rawPost } from "../../test/support/scheduler.ts";
import { percentile, sampleEventLoop } from "../../test/support/hostileRequests.ts";

const s = await startTestScheduler();
const enrolled = await enrollTestHost(s, "bench-host");
const allocationId = (await s.controller.create({ clientRequestId: "bench-target", workloadClass: "ci-small" })).view
  .allocationId;
console.log(
  JSON.stringify({
    url: s.url,
    controllerToken: s.tokens.token,
    operatorToken: s.tokens.operatorToken,
    hostId: "bench-host",
    hostCredential: enrolled.credential,
    allocationId,
  }),
);

let sampler = sampleEventLoop(2);
let cpu = process.cpuUsage();
for await (const line of console) {
  const cmd = line.trim();
  if (cmd === "reset") {
    sampler.stop();
    sampler = sampleEventLoop(2);
    cpu = process.cpuUsage();
  } else if (cmd === "report") {
    const d = sampler.stop();
    const used = process.cpuUsage(cpu);
    console.log(
      JSON.stringify({
        samples: d.length,
        p50: percentile(d, 50),
        p99: percentile(d, 99),
        max: percentile(d, 100),
        cpuMs: (used.user + used.system) / 1000,
      }),
    );
    sampler = sampleEventLoop(2);
  } else if (cmd === "quit") break;
}
sampler.stop();
await s.stop();
process.exit(0);
