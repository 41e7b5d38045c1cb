/**
 * bench/exec.ts's client side, run inside the laptop namespace: opens the
 * control channel to ALLOCATION as `bb exec` does (src/proxy/controlOpen.ts:
 * BB_SCHEDULER_URL, BB_TOKEN, BB_CONNECTION_KEYS) and measures, over that
 * one channel, ROUNDS exec round trips of `true` (start, output to its end,
 * final view) and a MIB MiB upload and download (/root/bench-ours.bin),
 * then prints one JSON line: {execMs: number[], upMs, downMs, bytes}.
 *
 *   bun bench/children/execClient.ts ALLOCATION ROUNDS MIB
 */
import { randomBytes } from "node:crypto";
import { openControl } from "../../src/proxy/controlOpen.ts";
import { runExec } from "../../src/proxy/execRun.ts";

const [allocation, roundsText, mibText] = process.argv.slice(2);
const rounds = Number(roundsText);
const bytes = Number(mibText) * 1024 * 1024;
const { client, channel } = await openControl({}, allocation!);
try {
  const quiet = { stdin: null, stdout: async () => {}, stderr: async () => {} };
  await runExec(client, { argv: ["true"] }, quiet); // warm-up: the path, the guest's first fork
  const execMs: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const t = performance.now();
    const v = await runExec(client, { argv: ["true"] }, quiet);
    execMs.push(performance.now() - t);
    if (v.exitCode !== 0) throw new Error(`true exited ${v.exitCode}`);
    await client.removeExec(v.execId); // stay under MAX_EXECS
  }
  const chunk = randomBytes(1024 * 1024);
  async function* source() {
    for (let i = 0; i < bytes / chunk.length; i++) yield chunk;
  }
  let t = performance.now();
  await client.writeFile("/root/bench-ours.bin", source());
  const upMs = performance.now() - t;
  t = performance.now();
  let got = 0;
  for await (const c of client.readFile("/root/bench-ours.bin")) got += c.length;
  const downMs = performance.now() - t;
  if (got !== bytes) throw new Error(`read ${got} bytes of ${bytes}`);
  console.log(JSON.stringify({ execMs, upMs, downMs, bytes }));
} finally {
  await channel.close();
}
