/**
 * Relay benchmark (issue 11, "bench/relay.ts"): how fast `bb relay run`
 * forwards 1,400-byte frames compared with a raw WebSocket echo server with
 * the same WebSocket settings, measured in the same run, with 1 and 1,000
 * concurrent pairs, over ws:// and wss:// on loopback.
 *
 * Both servers are subprocesses (one core each at most); this process
 * drives them. Relay: N pairs (2N sockets, through src/relayclient), each
 * pair bouncing W frames back and forth, so every frame the relay handles
 * is one receive and one send. Echo: 2N connections with W/2 frames each
 * bouncing off the server: the same sockets, frames in flight and server
 * work per frame. Reported: frames the server handled per second (wall)
 * and per server CPU-second (from /proc, less sensitive to a shared
 * machine), and relay/echo ratios (goal ≥ 0.8).
 *
 * Each figure is the best of --rounds runs, echo and relay interleaved
 * (other work on a shared machine only ever makes a run slower).
 *
 *   bun bench/relay.ts [--seconds 2] [--pairs 1,1000] [--window 8] [--rounds 2]
 * Run under `flock /tmp/bb-heavy.lock` on shared machines.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { grantId, makeSigner, tokenPayload } from "../src/relay/testing.ts";
import { connectRelay, type RelayTransport } from "../src/relayclient/index.ts";
import { makeTestCert, relayConfigFile, writeRelayConfig } from "../test/support/relay.ts";

const { values } = parseArgs({ options: { seconds: { type: "string", default: "2" }, pairs: { type: "string", default: "1,1000" }, window: { type: "string", default: "8" }, rounds: { type: "string", default: "2" } } });
const ROUNDS = Number(values.rounds);
const SECONDS = Number(values.seconds);
const PAIRS = values.pairs.split(",").map(Number);
const WINDOW = Number(values.window);
const FRAME = new Uint8Array(1400).fill(0x42);
const BUN = resolve("node_modules/.bin/bun");
const CLK_TCK = 100;

const dir = mkdtempSync(join(tmpdir(), "bb-relay-bench-"));
const cert = makeTestCert(dir);
const signer = makeSigner("bench");

interface Child {
  proc: ReturnType<typeof Bun.spawn>;
  line: string;
}

async function spawnChild(args: string[], ready: RegExp): Promise<Child> {
  const proc = Bun.spawn([BUN, ...args], { stdout: "pipe", stderr: "inherit", stdin: "pipe", env: { ...process.env, NO_COLOR: "1" } });
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let out = "";
  while (!ready.test(out)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`${args.join(" ")} exited: ${out}`);
    out += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return { proc, line: out };
}

/** Server CPU seconds so far (user + system) from /proc. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

interface Result {
  framesPerSecond: number;
  framesPerCpuSecond: number;
  /** Cores the server and this driver process used during the run (CPU-s per wall second). */
  serverCores: number;
  driverCores: number;
}

/** Runs the bounce for SECONDS after a short warm-up; `count` is bumped by the receive handlers. */
async function measure(pid: number, start: () => void, counter: { n: number; on: boolean }): Promise<Result> {
  counter.on = true;
  start();
  await Bun.sleep(500);
  const n0 = counter.n;
  const c0 = cpuSeconds(pid);
  const d0 = cpuSeconds(process.pid);
  const t0 = performance.now();
  await Bun.sleep(SECONDS * 1000);
  const frames = counter.n - n0;
  const wall = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds(pid) - c0;
  const driver = cpuSeconds(process.pid) - d0;
  counter.on = false;
  await Bun.sleep(200);
  return { framesPerSecond: frames / wall, framesPerCpuSecond: cpu > 0 ? frames / cpu : 0, serverCores: cpu / wall, driverCores: driver / wall };
}

async function inBatches<T>(n: number, size: number, make: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < n; i += size) out.push(...(await Promise.all(Array.from({ length: Math.min(size, n - i) }, (_, k) => make(i + k)))));
  return out;
}

async function relayRun(url: string, pid: number, pairs: number, tls: boolean, round: number): Promise<Result> {
  const counter = { n: 0, on: false };
  const ca = tls ? cert.cert : undefined;
  const all: RelayTransport[] = [];
  const conns = await inBatches(pairs, 50, async (i) => {
    const grant = grantId(1_000_000 * (round + 1) + i + (tls ? 500_000 : 0) + pairs * 7);
    const ends: { t: RelayTransport | null } = { t: null };
    const bounce = (self: { t: RelayTransport | null }) => (d: Uint8Array) => {
      if (!counter.on) return;
      counter.n++;
      self.t!.send(d);
    };
    const b: { t: RelayTransport | null } = { t: null };
    const tokenFor = (role: "client" | "host") => signer.sign(tokenPayload("relay-bench", role, grant, Date.now()));
    ends.t = await connectRelay({ url, token: tokenFor("client"), ...(ca ? { ca } : {}), onDatagram: bounce(ends), timeoutMs: 60_000 });
    b.t = await connectRelay({ url, token: tokenFor("host"), ...(ca ? { ca } : {}), onDatagram: bounce(b), timeoutMs: 60_000 });
    all.push(ends.t, b.t);
    return ends.t;
  });
  const r = await measure(pid, () => conns.forEach((t) => Array.from({ length: WINDOW }, () => t.send(FRAME))), counter);
  for (const t of all) t.close();
  await Promise.all(all.map((t) => t.closed));
  return r;
}

async function echoRun(url: string, pid: number, pairs: number, tls: boolean): Promise<Result> {
  const counter = { n: 0, on: false };
  const sockets = await inBatches(pairs * 2, 50, (i) => {
    return new Promise<WebSocket>((res, rej) => {
      const ws = new WebSocket(url, tls ? { tls: { ca: cert.cert } } : {});
      ws.binaryType = "arraybuffer";
      ws.onopen = () => res(ws);
      ws.onerror = () => rej(new Error(`echo connection ${i} failed`));
      ws.onmessage = (ev) => {
        if (!counter.on) return;
        counter.n++;
        ws.send(ev.data as ArrayBuffer);
      };
    });
  });
  const r = await measure(pid, () => sockets.forEach((ws) => Array.from({ length: Math.max(1, WINDOW / 2) }, () => ws.send(FRAME))), counter);
  await Promise.all(
    sockets.map(
      (ws) =>
        new Promise<void>((res) => {
          ws.onclose = () => res();
          ws.close();
        }),
    ),
  );
  return r;
}

const fmt = (x: number) => Math.round(x).toLocaleString("en-US");
const echo = await spawnChild(["bench/relayEcho.ts", cert.certPath, cert.keyPath], /\}\n/);
const echoUrls = JSON.parse(echo.line) as { ws: string; wss: string };
const relayArgs = (tls: boolean) => {
  const cfg = relayConfigFile(signer, cert, { relayId: "relay-bench", maxHandshakes: 10_000, maxHandshakesPerAddress: 10_000, maxPendingPairs: 10_000, maxSessions: 100_000 });
  const sub = join(dir, tls ? "tls" : "plain");
  mkdirSync(sub);
  const path = writeRelayConfig(sub, cfg);
  return ["bin/bb.ts", "relay", "run", "--config", path, ...(tls ? [] : ["--insecure-listen", "127.0.0.1:0"])];
};

console.log(`relay forwarding vs raw WebSocket echo, 1,400-byte frames, window ${WINDOW} per pair, ${SECONDS} s per run (server frames/s; per server CPU-second)`);
try {
  for (const tls of [false, true]) {
    const relay = await spawnChild(relayArgs(tls), /listening: (\S+)/);
    const url = /listening: (\S+)/.exec(relay.line)![1]!;
    try {
      for (const pairs of PAIRS) {
        // The faster run's figures, with the better CPU efficiency of the two.
        const best = (a: Result | null, b: Result): Result => (!a ? b : { ...(a.framesPerSecond >= b.framesPerSecond ? a : b), framesPerCpuSecond: Math.max(a.framesPerCpuSecond, b.framesPerCpuSecond) });
        let e: Result | null = null;
        let r: Result | null = null;
        for (let round = 0; round < ROUNDS; round++) {
          e = best(e, await echoRun(tls ? echoUrls.wss : echoUrls.ws, echo.proc.pid, pairs, tls));
          r = best(r, await relayRun(url, relay.proc.pid, pairs, tls, round));
        }
        if (!e || !r) throw new Error("--rounds must be at least 1");
        console.log(
          `${tls ? "wss" : "ws "} ${String(pairs).padStart(5)} pairs: echo ${fmt(e.framesPerSecond)}/s (${fmt(e.framesPerCpuSecond)}/CPU-s), relay ${fmt(r.framesPerSecond)}/s (${fmt(r.framesPerCpuSecond)}/CPU-s); ratio ${(r.framesPerSecond / e.framesPerSecond).toFixed(2)} wall, ${(r.framesPerCpuSecond / e.framesPerCpuSecond).toFixed(2)} per CPU-s; cores server/driver echo ${e.serverCores.toFixed(2)}/${e.driverCores.toFixed(2)}, relay ${r.serverCores.toFixed(2)}/${r.driverCores.toFixed(2)}`,
        );
      }
    } finally {
      relay.proc.kill("SIGTERM");
      await relay.proc.exited;
    }
  }
} finally {
  (echo.proc.stdin as import("bun").FileSink).end();
  echo.proc.kill("SIGTERM");
  await echo.proc.exited;
  rmSync(dir, { recursive: true, force: true });
}
