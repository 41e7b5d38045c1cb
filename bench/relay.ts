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
 * The sockets connect once per configuration; then --rounds runs of echo
 * and relay alternate (which goes first alternates too). Each ratio is the
 * median of the per-round ratios, each absolute figure the median of its
 * runs: on a shared machine a round's two runs see about the same load,
 * while the load between rounds can change severalfold.
 *
 *   bun bench/relay.ts [--seconds 2] [--pairs 1,1000] [--window 8] [--rounds 5] [--transports ws,wss]
 * Run under `flock /tmp/bb-heavy.lock` on shared machines.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { grantId, makeSigner, tokenPayload } from "../src/relay/testing.ts";
import { connectRelay, type RelayTransport } from "../src/relayclient/index.ts";
import { makeTestCert, relayConfigFile, writeRelayConfig } from "../test/support/relay.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/relay.ts", 900);

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "2" },
    pairs: { type: "string", default: "1,1000" },
    window: { type: "string", default: "8" },
    rounds: { type: "string", default: "5" },
    transports: { type: "string", default: "ws,wss" },
  },
});
const ROUNDS = Number(values.rounds);
if (!(ROUNDS >= 1)) throw new Error("--rounds must be at least 1");
const SECONDS = Number(values.seconds);
const PAIRS = values.pairs.split(",").map(Number);
const WINDOW = Number(values.window);
const TRANSPORTS = values.transports.split(",");
if (TRANSPORTS.some((t) => t !== "ws" && t !== "wss")) throw new Error("--transports takes ws, wss or both");
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

/** Starts `bun ARGS` and reads `from` (the echo prints its URLs on stdout, `bb` its messages on stderr) until `ready` matches; the other stream is inherited. */
async function spawnChild(args: string[], ready: RegExp, from: "stdout" | "stderr"): Promise<Child> {
  const proc = Bun.spawn([BUN, ...args], {
    stdout: from === "stdout" ? "pipe" : "inherit",
    stderr: from === "stderr" ? "pipe" : "inherit",
    stdin: "pipe",
    env: { ...process.env, NO_COLOR: "1" },
  });
  const reader = (proc[from] as ReadableStream<Uint8Array>).getReader();
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
  return {
    framesPerSecond: frames / wall,
    framesPerCpuSecond: cpu > 0 ? frames / cpu : 0,
    serverCores: cpu / wall,
    driverCores: driver / wall,
  };
}

async function inBatches<T>(n: number, size: number, make: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < n; i += size)
    out.push(...(await Promise.all(Array.from({ length: Math.min(size, n - i) }, (_, k) => make(i + k)))));
  return out;
}

/** Connected sockets ready to bounce frames: `start` sends the first window, `counter` counts frames received while `on`. */
interface Bouncers {
  counter: { n: number; on: boolean };
  start(): void;
  close(): Promise<void>;
}

/** N relay pairs (2N sessions); every frame an end receives it sends back through the relay. */
async function relayBouncers(url: string, pairs: number, tls: boolean): Promise<Bouncers> {
  const counter = { n: 0, on: false };
  const ca = tls ? cert.cert : undefined;
  const all: RelayTransport[] = [];
  const firsts = await inBatches(pairs, 50, async (i) => {
    const grant = grantId(grantBase++);
    const end = (role: "client" | "host") => {
      const self: { t: RelayTransport | null } = { t: null };
      const token = signer.sign(tokenPayload("relay-bench", role, grant, Date.now()));
      const onDatagram = (d: Uint8Array) => {
        if (!counter.on) return;
        counter.n++;
        self.t!.send(d);
      };
      return connectRelay({ url, token, ...(ca ? { ca } : {}), onDatagram, timeoutMs: 60_000 }).then(
        (t) => (self.t = t),
      );
    };
    const c = await end("client");
    all.push(c, await end("host"));
    return c;
  });
  return {
    counter,
    start: () => firsts.forEach((t) => Array.from({ length: WINDOW }, () => t.send(FRAME))),
    close: async () => {
      for (const t of all) t.close();
      await Promise.all(all.map((t) => t.closed));
    },
  };
}

/** 2N raw WebSocket connections to the echo server, W/2 frames each in flight. */
async function echoBouncers(url: string, pairs: number, tls: boolean): Promise<Bouncers> {
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
  return {
    counter,
    start: () => sockets.forEach((ws) => Array.from({ length: Math.max(1, WINDOW / 2) }, () => ws.send(FRAME))),
    close: () =>
      Promise.all(
        sockets.map(
          (ws) =>
            new Promise<void>((res) => {
              ws.onclose = () => res();
              ws.close();
            }),
        ),
      ).then(() => {}),
  };
}

let grantBase = 1;
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

const fmt = (x: number) => Math.round(x).toLocaleString("en-US");
const echo = await spawnChild(["bench/children/relayEcho.ts", cert.certPath, cert.keyPath], /\}\n/, "stdout");
const echoUrls = JSON.parse(echo.line) as { ws: string; wss: string };
const relayArgs = (tls: boolean) => {
  const cfg = relayConfigFile(signer, cert, {
    relayId: "relay-bench",
    maxHandshakes: 10_000,
    maxHandshakesPerAddress: 10_000,
    maxPendingPairs: 10_000,
    maxSessions: 100_000,
  });
  const sub = join(dir, tls ? "tls" : "plain");
  mkdirSync(sub);
  const path = writeRelayConfig(sub, cfg);
  return [
    ...(process.env["BB_BENCH_RELAY_BUN_ARGS"]?.split(" ").filter(Boolean) ?? []),
    "bin/bb.ts",
    "relay",
    "run",
    "--config",
    path,
    ...(tls ? [] : ["--insecure-listen", "127.0.0.1:0"]),
  ];
};

console.log(
  `relay forwarding vs raw WebSocket echo, 1,400-byte frames, window ${WINDOW} per pair, ${SECONDS} s per run (server frames/s; per server CPU-second)`,
);
try {
  for (const tls of TRANSPORTS.map((t) => t === "wss")) {
    const relay = await spawnChild(relayArgs(tls), /listening: \S+ health \S+/, "stderr");
    const [, url, health] = /listening: (\S+) health (\S+)/.exec(relay.line)!;
    const dropped = async () => {
      const c = ((await (await fetch(health!)).json()) as { counters: { framesDropped: Record<string, number> } })
        .counters.framesDropped;
      return Object.values(c).reduce((a, b) => a + b, 0);
    };
    try {
      for (const pairs of PAIRS) {
        const e = await echoBouncers(tls ? echoUrls.wss : echoUrls.ws, pairs, tls);
        const r = await relayBouncers(url!, pairs, tls);
        const echoRuns: Result[] = [];
        const relayRuns: Result[] = [];
        try {
          for (let round = 0; round < ROUNDS; round++) {
            // Alternate which goes first, so a machine getting busier or quieter favours neither.
            const runEcho = async () => void echoRuns.push(await measure(echo.proc.pid, e.start, e.counter));
            const runRelay = async () => void relayRuns.push(await measure(relay.proc.pid, r.start, r.counter));
            if (round % 2 === 0) {
              await runEcho();
              await runRelay();
            } else {
              await runRelay();
              await runEcho();
            }
          }
        } finally {
          await e.close();
          await r.close();
        }
        const wall = median(relayRuns.map((x, i) => x.framesPerSecond / echoRuns[i]!.framesPerSecond));
        const cpu = median(relayRuns.map((x, i) => x.framesPerCpuSecond / echoRuns[i]!.framesPerCpuSecond));
        const med = (rs: Result[], k: keyof Result) => median(rs.map((x) => x[k]));
        console.log(
          `${tls ? "wss" : "ws "} ${String(pairs).padStart(5)} pairs: echo ${fmt(med(echoRuns, "framesPerSecond"))}/s (${fmt(med(echoRuns, "framesPerCpuSecond"))}/CPU-s), relay ${fmt(med(relayRuns, "framesPerSecond"))}/s (${fmt(med(relayRuns, "framesPerCpuSecond"))}/CPU-s); ` +
            `ratio ${wall.toFixed(2)} wall, ${cpu.toFixed(2)} per CPU-s; cores server/driver echo ${med(echoRuns, "serverCores").toFixed(2)}/${med(echoRuns, "driverCores").toFixed(2)}, relay ${med(relayRuns, "serverCores").toFixed(2)}/${med(relayRuns, "driverCores").toFixed(2)}`,
        );
      }
      // A dropped frame shrinks a pair's window for the rest of its run, so drops would make the relay look slower.
      const d = await dropped();
      if (d > 0)
        console.log(
          `${tls ? "wss" : "ws "} the relay dropped ${d} frames (see its /metrics): the figures above understate it`,
        );
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
