/**
 * A kernel TCP client for benchmarks, the counterpart of tcpPeer.ts, run in a
 * namespace with `ip netns exec`:
 *   sink HOST PORT BYTES SEED     send the test stream to SINK, check the answer
 *   source HOST PORT BYTES SEED   read the test stream from SOURCE, check it
 * Prints one JSON line {ok, bytes, ms} (ms from connect to the last byte checked).
 */
import { createHash } from "node:crypto";
import net from "node:net";
import { forEachStreamChunk, streamSha256 } from "./stream.ts";

const [mode, host, portText, bytesText, seedText] = process.argv.slice(2);
const port = Number(portText);
const bytes = Number(bytesText);
const seed = Number(seedText);
const want = await streamSha256(bytes, seed);
const t0 = performance.now();
const sock = net.connect({ host: host!, port, allowHalfOpen: true });
await new Promise((r) => sock.once("connect", r));
let ok = false;
if (mode === "sink") {
  sock.write(`SINK\n`);
  let answer = "";
  sock.on("data", (d) => (answer += d.toString()));
  const ended = new Promise((r) => sock.once("end", r));
  await forEachStreamChunk(bytes, seed, 256 * 1024, (c) =>
    sock.write(c) ? undefined : new Promise((r) => sock.once("drain", r)),
  );
  sock.end();
  await ended;
  ok = answer.trim() === `${bytes} ${want}`;
} else {
  sock.write(`SOURCE ${bytes} ${seed}\n`);
  const h = createHash("sha256");
  let n = 0;
  sock.on("data", (d) => {
    h.update(d);
    n += d.length;
  });
  await new Promise((r) => sock.once("end", r));
  ok = n === bytes && h.digest("hex") === want;
}
const ms = performance.now() - t0;
sock.destroy();
console.log(JSON.stringify({ ok, bytes, ms }));
