/**
 * The client side of the full tunnel path, as a child process for tests and
 * benchmarks that run it in a namespace (`ip netns exec NS bun wgNetstackClient.ts CONFIG`):
 * our userspace TCP/IP stack (src/netstack) whose packets go through our
 * WireGuard Device (src/wireguard) over one UDP socket. Optional seeded loss,
 * delay and reordering of the UDP datagrams both ways (test/support/impairment.ts),
 * standing in for `tc netem` where the kernel lacks it.
 *
 * CONFIG (argv[2], JSON): { privateKey, listen: {address, port},
 *   peer: {publicKey, endpoint: {address, port}, allowedIps},
 *   stack: {ipv4: {address, prefixLength}, ipv6: [address]}, impair?: ImpairmentOptions }.
 * Commands, one JSON line each on stdin:
 *   {"op":"run","jobs":[{kind:"sink"|"source"|"echo", host, port, bytes, seed}, …]}
 *       runs the jobs concurrently against tcpPeer.ts; answers
 *       {"ev":"done","ms":N,"cpuMs":N,"results":[{kind,host,bytes,ms,ok,error?}, …]}
 *       (cpuMs: this process's CPU time, all threads, during the run)
 *   {"op":"stats"}  answers {"ev":"stats", stack, device, impairment}
 * Events: {"ev":"ready"} once the socket is bound. Exits when stdin closes.
 */
import { createHash } from "node:crypto";
import { setSocketBuffers, udpSocketFd } from "../../native/sockbuf/sockbuf.ts";
import { createNetstack, type TcpConnection } from "../../src/netstack/index.ts";
import { selectAead } from "../../src/wireguard/aead/select.ts";
import { Device } from "../../src/wireguard/device.ts";
import { systemSuspendAwareClock, systemRandom } from "../../src/wireguard/ports.ts";
import { DeviceTimerDriver } from "../../src/wireguard/timerDriver.ts";
import { udpEndpoint, type UdpEndpoint } from "../../src/wireguard/udp.ts";
import { Impairment, type ImpairmentOptions } from "./impairment.ts";
import { forEachStreamChunk, streamSha256 } from "./stream.ts";
import { stdinLines } from "./stdinLines.ts";

interface Config {
  privateKey: string;
  listen: { address: string; port: number };
  peer: { publicKey: string; endpoint: { address: string; port: number }; allowedIps: string[] };
  stack: { ipv4: { address: string; prefixLength: number }; ipv6: string[] };
  impair?: ImpairmentOptions;
}
interface Job {
  kind: "sink" | "source" | "echo";
  host: string;
  port: number;
  bytes: number;
  seed: number;
}

const cfg = JSON.parse(process.argv[2]!) as Config;
const b64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));
const emit = (o: object) => process.stdout.write(JSON.stringify(o) + "\n");
const enc = (s: string) => new TextEncoder().encode(s);

const { aead } = await selectAead();
let socket: Bun.udp.Socket<"uint8array"> | null = null;
/**
 * Datagrams sealed during one turn of the event loop go out together with
 * sendmmsg(2) (Bun's sendMany): one syscall per batch instead of one per
 * datagram (≈ 3× less CPU per datagram in a send loop here; ≈ 15% less CPU
 * per MiB for the whole client). src/wireguard/udp.ts could do the same.
 */
const SEND_BATCH_DATAGRAMS = 64;
const outBatch: (Uint8Array | number | string)[] = [];
function flushOut(): void {
  let off = 0;
  while (off < outBatch.length) {
    const n = socket?.sendMany(off === 0 ? outBatch : outBatch.slice(off)) ?? 0;
    if (n === 0) break; // socket buffer full: drop the rest, as a full link would (TCP retransmits)
    off += 3 * n;
  }
  outBatch.length = 0;
}
let toWire = (d: Uint8Array, to: UdpEndpoint) => {
  if (outBatch.length === 0) queueMicrotask(flushOut);
  outBatch.push(d, to.port, to.address);
  if (outBatch.length >= 3 * SEND_BATCH_DATAGRAMS) flushOut();
};
const device = new Device<UdpEndpoint>({
  privateKey: b64(cfg.privateKey),
  clock: systemSuspendAwareClock,
  random: systemRandom,
  aead,
  io: {
    sendDatagram: (d, to) => toWire(d, to),
    deliverPacket: (p) => void stack.input(p),
  },
});
const driver = new DeviceTimerDriver(device, systemSuspendAwareClock);
const stack = createNetstack({
  ipv4: cfg.stack.ipv4,
  ipv6: cfg.stack.ipv6,
  // The view is valid only during the call and the Device may stage it for a handshake: copy.
  output: (p) => {
    device.sendPacket(p.slice());
    driver.poke();
  },
});
let fromWire = (d: Uint8Array, from: UdpEndpoint) => {
  device.receiveDatagram(d, from);
  driver.poke();
};
const impairments: Impairment[] = [];
if (cfg.impair) {
  // One peer: every datagram goes to where the Device last addressed one.
  let lastTo = udpEndpoint(cfg.peer.endpoint.address, cfg.peer.endpoint.port);
  const out = new Impairment(cfg.impair, (d) => void socket?.send(d, lastTo.port, lastTo.address));
  toWire = (d, to) => {
    lastTo = to;
    out.send(d);
  };
  const inbound = new Impairment({ ...cfg.impair, seed: cfg.impair.seed + 1 }, (d) => {
    device.receiveDatagram(d, udpEndpoint(cfg.peer.endpoint.address, cfg.peer.endpoint.port));
    driver.poke();
  });
  fromWire = (d) => inbound.send(d);
  impairments.push(out, inbound);
}
socket = await Bun.udpSocket({
  hostname: cfg.listen.address,
  port: cfg.listen.port,
  binaryType: "uint8array",
  socket: { data: (_s, buf, port, address) => fromWire(buf, udpEndpoint(address, port)) },
});
// The kernel's default ≈ 208 KiB receive buffer overflowed with 100 flows (34,209 of 157,497 datagrams dropped).
const socketBuffers = setSocketBuffers(udpSocketFd(socket));
const peer = device.addPeer({
  publicKey: b64(cfg.peer.publicKey),
  endpoint: udpEndpoint(cfg.peer.endpoint.address, cfg.peer.endpoint.port),
  allowedIps: cfg.peer.allowedIps,
});
device.initiateHandshake(peer);
driver.poke();

async function readAll(c: TcpConnection): Promise<{ bytes: number; sha256: string; text: string }> {
  const h = createHash("sha256");
  let bytes = 0;
  let text = "";
  for (let ch = await c.read(); ch; ch = await c.read()) {
    h.update(ch);
    bytes += ch.length;
    if (text.length < 200) text += new TextDecoder().decode(ch);
  }
  return { bytes, sha256: h.digest("hex"), text };
}

const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

async function runJob(
  j: Job,
): Promise<{ kind: string; host: string; bytes: number; ms: number; ok: boolean; error?: string }> {
  const t0 = performance.now();
  try {
    const want = await streamSha256(j.bytes, j.seed);
    const c = await stack.connect(j.host, j.port, { timeoutMs: 20_000 });
    let ok: boolean;
    if (j.kind === "source") {
      await c.write(enc(`SOURCE ${j.bytes} ${j.seed}\n`));
      const got = await readAll(c);
      ok = got.bytes === j.bytes && got.sha256 === want;
    } else {
      await c.write(enc(j.kind === "sink" ? "SINK\n" : "ECHO\n"));
      const writing = (async () => {
        await forEachStreamChunk(j.bytes, j.seed, 64 * 1024, (ch) => c.write(ch));
        await c.closeWrite();
      })();
      const got = await readAll(c);
      await writing;
      ok = j.kind === "sink" ? got.text.trim() === `${j.bytes} ${want}` : got.bytes === j.bytes && got.sha256 === want;
    }
    await c.close();
    return { kind: j.kind, host: j.host, bytes: j.bytes, ms: performance.now() - t0, ok };
  } catch (e) {
    return { kind: j.kind, host: j.host, bytes: j.bytes, ms: performance.now() - t0, ok: false, error: String(e) };
  }
}

const lines = stdinLines();

emit({ ev: "ready", aead: aead.name, socketBuffers });
for await (const line of lines) {
  if (!line.trim()) continue;
  const c = JSON.parse(line) as { op: string; jobs?: Job[] };
  if (c.op === "run") {
    const t0 = performance.now();
    const c0 = cpuMs();
    const results = await Promise.all(c.jobs!.map(runJob));
    emit({ ev: "done", ms: performance.now() - t0, cpuMs: cpuMs() - c0, results });
  } else if (c.op === "stats") {
    emit({ ev: "stats", stack: stack.stats(), device: device.counters, impairment: impairments.map((i) => i.stats) });
  } else emit({ ev: "error", message: `unknown op ${c.op}` });
}
stack.close();
driver.stop();
for (const i of impairments) i.stop();
socket.close();
