/**
 * Userspace TCP/IP and TUN benchmark (issue "Tunnel core"): in one run,
 *   1. TUN packets/s: 1,372-byte UDP datagrams written by us into a TUN
 *      device (kernel delivers them to a socket in a namespace), and read by
 *      the reader Worker from the device while a sender in the namespace
 *      floods it; the baseline is the same sender into a kernel UDP socket.
 *   2. TCP throughput of our stack (lwIP as WebAssembly in this process,
 *      through TUN) against a kernel TCP server in a namespace, both
 *      directions, IPv4; the baseline is kernel TCP ⇄ kernel TCP between two
 *      namespaces over veth with the same server and a Bun client.
 * Prints MiB/s, packets/s and the ratio to the baseline measured in the same run.
 * Needs root. Run under the machine-wide lock:
 *   flock /tmp/bb-heavy.lock node_modules/.bin/bun bench/netstack.ts [--mib 256] [--packets 200000]
 */
import { parseArgs } from "node:util";
import { TUNNEL_MTU } from "../src/protocol/tunnelMtu.ts";
import { resolve } from "node:path";
import { Netns, must } from "../test/support/netns.ts";
import { forEachStreamChunk, streamSha256 } from "../test/support/stream.ts";
import { startTunWorld } from "../test/support/tunWorld.ts";
import { udp4 } from "../test/support/packets.ts";
import { createHash } from "node:crypto";
import { openTun } from "../native/tun/tun.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/netstack.ts", 900);

const { values } = parseArgs({
  options: { mib: { type: "string", default: "256" }, packets: { type: "string", default: "200000" } },
});
const MIB = Number(values.mib);
const PACKETS = Number(values.packets);
const BYTES = MIB << 20;
const bun = process.execPath;
const support = resolve(import.meta.dir, "../test/support");

/** Runs `cmd` without blocking this thread (the TUN reader needs it) and parses its last stdout line. */
async function json(cmd: string[]): Promise<{ ok: boolean; bytes: number; ms: number }> {
  const p = Bun.spawn(cmd, { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`${cmd.join(" ")} exited ${code}: ${err}`);
  return JSON.parse(out.trim().split("\n").pop()!);
}

const mibps = (bytes: number, ms: number) => bytes / (1 << 20) / (ms / 1000);
const line = (label: string, value: string, ratio?: number) =>
  console.log(`${label.padEnd(46)} ${value.padStart(14)}${ratio === undefined ? "" : `   ratio ${ratio.toFixed(2)}`}`);

const floodScript = (host: string) =>
  `const t=performance.now(); const s = await Bun.udpSocket({}); const b = Buffer.alloc(1372); for (let i=0;i<${PACKETS};i++){ while(!s.send(b, 9999, "${host}")) await Bun.sleep(0); } s.close(); console.log(JSON.stringify({ok:true,bytes:0,ms:performance.now()-t}))`;

console.log(`netstack bench: ${MIB} MiB per TCP transfer, ${PACKETS} UDP packets per TUN pass`);

// ---- 1. TUN packets/s: namespace bbbt (device 10.74.0.1, veth 10.75.0.1) and bbbp (veth 10.75.0.2) ----
{
  const ns = new Netns(`bbbt-${process.pid}`);
  const peer = new Netns(`bbbp-${process.pid}`);
  const tun = openTun({ name: `bbbt${process.pid % 10000}`, mtu: TUNNEL_MTU });
  try {
    must(["ip", "link", "set", tun.name, "netns", ns.name]);
    ns.ip("addr", "add", "10.74.0.1/24", "dev", tun.name);
    ns.ip("link", "set", tun.name, "txqueuelen", "4096");
    ns.ip("link", "set", tun.name, "up");
    must(["ip", "-n", ns.name, "link", "add", "bbbtv0", "type", "veth", "peer", "name", "bbbtv1", "netns", peer.name]);
    ns.ip("addr", "add", "10.75.0.1/24", "dev", "bbbtv0");
    ns.ip("link", "set", "bbbtv0", "up");
    peer.ip("addr", "add", "10.75.0.2/24", "dev", "bbbtv1");
    peer.ip("link", "set", "bbbtv1", "up");
    let received = 0;
    let first = 0;
    let last = 0;
    tun.start((ps) => {
      for (const p of ps) {
        if (p[9] !== 17 || p[22] !== 0x27 || p[23] !== 0x0f) continue; // UDP to port 9999
        if (received++ === 0) first = performance.now();
        last = performance.now();
      }
    });
    const sent = await json(ns.exec([bun, "-e", floodScript("10.74.0.2")]));
    await Bun.sleep(200);
    const readPps = received / ((last - first) / 1000);
    const sink = Bun.spawn(peer.exec([bun, `${support}/udpPeer.ts`, "recv", "10.75.0.2", "9999", String(PACKETS)]), {
      stdout: "pipe",
    });
    await sink.stdout.getReader().read();
    const base = await json(ns.exec([bun, "-e", floodScript("10.75.0.2")]));
    sink.kill();
    await sink.exited;
    const basePps = PACKETS / (base.ms / 1000);
    line("TUN read (Worker + ring), packets/s", `${Math.round(readPps)}`, readPps / basePps);
    line("  delivered / sent", `${received}/${PACKETS}`);
    line("  sender into TUN, packets/s", `${Math.round(PACKETS / (sent.ms / 1000))}`);
    line("  baseline: same sender over veth, packets/s", `${Math.round(basePps)}`);

    const pkt = udp4("10.74.0.2", 40000, "10.74.0.1", 9, new Uint8Array(1344));
    let t = performance.now();
    let ok = 0;
    for (let i = 0; i < PACKETS; i++) if (tun.write(pkt)) ok++;
    const writePps = ok / ((performance.now() - t) / 1000);
    const sinkSock = await Bun.udpSocket({ hostname: "127.0.0.1", socket: { data() {} } });
    const udp = await Bun.udpSocket({});
    const b = Buffer.alloc(1344);
    t = performance.now();
    for (let i = 0; i < PACKETS; i++) while (!udp.send(b, sinkSock.port, "127.0.0.1")) await Bun.sleep(0);
    const udpPps = PACKETS / ((performance.now() - t) / 1000);
    udp.close();
    sinkSock.close();
    line("TUN write (main thread, FFI), packets/s", `${Math.round(writePps)}`, writePps / udpPps);
    line("  baseline: Bun UDP socket to loopback, packets/s", `${Math.round(udpPps)}`);
  } finally {
    await tun.close();
    ns.delete();
    peer.delete();
  }
}

// ---- 2. TCP throughput: our stack through TUN vs kernel TCP over veth, same server ----
{
  const w = await startTunWorld("bbbn", 76, { port: 7100 });
  const peer = new Netns(`bbbn-peer-${process.pid}`);
  let vethServer: ReturnType<typeof Bun.spawn> | null = null;
  try {
    must([
      "ip",
      "-n",
      peer.name,
      "link",
      "add",
      "bbbnv0",
      "type",
      "veth",
      "peer",
      "name",
      "bbbnv1",
      "netns",
      w.ns.name,
    ]);
    peer.ip("addr", "add", "10.75.0.2/24", "dev", "bbbnv0");
    peer.ip("link", "set", "bbbnv0", "up");
    w.ns.ip("addr", "add", "10.75.0.1/24", "dev", "bbbnv1");
    w.ns.ip("link", "set", "bbbnv1", "up");
    const vs = Bun.spawn(w.ns.exec([bun, `${support}/tcpPeer.ts`, "7101", "10.75.0.1"]), { stdout: "pipe" });
    vethServer = vs;
    await vs.stdout.getReader().read();

    const up = async () => {
      const t0 = performance.now();
      const c = await w.stack.connect(w.kernel4, w.port);
      await c.write(new TextEncoder().encode("SINK\n"));
      await forEachStreamChunk(BYTES, 5, 64 * 1024, (ch) => c.write(ch));
      await c.closeWrite();
      let answer = "";
      for (let ch = await c.read(); ch; ch = await c.read()) answer += new TextDecoder().decode(ch);
      const ms = performance.now() - t0;
      await c.close();
      return { ok: answer.trim() === `${BYTES} ${await streamSha256(BYTES, 5)}`, ms };
    };
    const down = async () => {
      const t0 = performance.now();
      const c = await w.stack.connect(w.kernel4, w.port);
      await c.write(new TextEncoder().encode(`SOURCE ${BYTES} 9\n`));
      const h = createHash("sha256");
      let n = 0;
      for (let ch = await c.read(); ch; ch = await c.read()) {
        h.update(ch);
        n += ch.length;
      }
      const ms = performance.now() - t0;
      await c.close();
      return { ok: n === BYTES && h.digest("hex") === (await streamSha256(BYTES, 9)), ms };
    };
    await streamSha256(BYTES, 5);
    await streamSha256(BYTES, 9);
    const ours = { up: await up(), down: await down() };
    const base = {
      up: await json(peer.exec([bun, `${support}/tcpClient.ts`, "sink", "10.75.0.1", "7101", String(BYTES), "5"])),
      down: await json(peer.exec([bun, `${support}/tcpClient.ts`, "source", "10.75.0.1", "7101", String(BYTES), "9"])),
    };
    for (const dir of ["up", "down"] as const) {
      const o = mibps(BYTES, ours[dir].ms);
      const k = mibps(BYTES, base[dir].ms);
      line(
        `TCP ${dir === "up" ? "to" : "from"} kernel: lwIP+TUN, MiB/s${ours[dir].ok ? "" : " (DATA MISMATCH)"}`,
        o.toFixed(1),
        o / k,
      );
      line(`  baseline: kernel TCP over veth, MiB/s${base[dir].ok ? "" : " (DATA MISMATCH)"}`, k.toFixed(1));
    }
    const s = w.stack.stats();
    line("lwIP module memory, bytes", String(s.memoryBytes));
    line("lwIP heap peak, bytes", String(s.heapPeakBytes));
  } finally {
    vethServer?.kill();
    await vethServer?.exited;
    await w.close();
    peer.delete();
  }
}
