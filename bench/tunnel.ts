/**
 * Tunnel benchmark (issue "Tunnel core"), in one run:
 * 1. Handshake CPU per side: the initiator's work (create the initiation
 *    with mac1, consume the response, derive keys) and the responder's
 *    (check mac1, consume the initiation, create the response, derive keys),
 *    as median wall µs and CPU µs (process.cpuUsage: includes the runtime's
 *    GC and JIT threads) per handshake over N handshakes, with one
 *    node:crypto X25519 DH measured in the same run as the unit (a handshake
 *    side does 4 DH + 1 key generation, so ≈ 5–6 DH-equivalents is the floor).
 * 2. AEAD MB/s per provider (libsodium via bun:ffi, libsodium-wrappers
 *    WebAssembly, @noble/ciphers) on 1,400-byte packets, seal + open, with
 *    ratios against @noble/ciphers measured in the same run (the baseline).
 * 3. Device transport: 1,400-byte IP packets sealed by one Device and opened
 *    by another in memory (no sockets), packets/s and MB/s, selected AEAD.
 * 4. TCP throughput through the whole client path: our TCP/IP stack (lwIP
 *    as WebAssembly) + our WireGuard on UDP, in a child process in one
 *    namespace, to a kernel TCP server behind Debian's wireguard-go in
 *    another; the baseline (same run, same server and receiving
 *    wireguard-go) is kernel TCP through a second wireguard-go in a third
 *    namespace (test/support/wgWorld.ts). MiB/s each way and the ratio.
 *    Needs root, wg and wireguard-go; skipped with the reason otherwise.
 *
 *   bun bench/tunnel.ts [--seconds 1] [--handshakes 400] [--tcp-mib 128]
 * Run under `flock /tmp/bb-heavy.lock` on shared machines.
 */
import { parseArgs } from "node:util";
import { open, seal, type Aead } from "../src/wireguard/aead/aead.ts";
import { nobleAead } from "../src/wireguard/aead/noble.ts";
import { selectAead } from "../src/wireguard/aead/select.ts";
import { sodiumFfiAead } from "../src/wireguard/aead/sodiumFfi.ts";
import { sodiumWasmAead } from "../src/wireguard/aead/sodiumWasm.ts";
import { decodeMessage, type Initiation, type Response } from "../src/wireguard/codec.ts";
import { CookieChecker, CookieJar } from "../src/wireguard/cookie.ts";
import { Device } from "../src/wireguard/device.ts";
import { MemoryNet, type MemEndpoint } from "../src/wireguard/fakeNet.ts";
import {
  commitInitiation,
  consumeInitiation,
  consumeResponse,
  createInitiation,
  createResponse,
  deriveSessionKeys,
  HandshakeState,
  localStatic,
  remoteStatic,
} from "../src/wireguard/noise.ts";
import { systemSuspendAwareClock, systemRandom } from "../src/wireguard/ports.ts";
import { tai64n } from "../src/wireguard/tai64n.ts";
import { dh, generateKeyPair, keyPairFromPrivate } from "../src/wireguard/x25519.ts";
import { probeSodium } from "../native/sodium/sodium.ts";
import { fixedLoad } from "../src/wireguard/load.ts";
import { icmpEcho } from "../test/support/ipCraft.ts";
import { runJobs, startWgWorld, wgWorldSkipReason } from "../test/support/wgWorld.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/tunnel.ts", 1200);

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "1" },
    handshakes: { type: "string", default: "400" },
    "tcp-mib": { type: "string", default: "128" },
  },
});
const SECONDS = Number(values.seconds);
const HANDSHAKES = Number(values.handshakes);
const PACKET = 1_400;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const cpuUs = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

// ---- 1. handshake CPU per side ----
const { aead: selected, ffiUnavailable } = await selectAead();
const initiatorKeys = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
const responderKeys = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
const iCtx = { aead: selected, random: systemRandom, local: localStatic(initiatorKeys) };
const rCtx = { aead: selected, random: systemRandom, local: localStatic(responderKeys) };
const peerOfI = remoteStatic(iCtx.local, responderKeys.publicKey);
const peerOfR = remoteStatic(rCtx.local, initiatorKeys.publicKey);
const jar = new CookieJar(responderKeys.publicKey, systemSuspendAwareClock, selected);
const jarR = new CookieJar(initiatorKeys.publicKey, systemSuspendAwareClock, selected);
const checker = new CookieChecker(responderKeys.publicKey, systemSuspendAwareClock, systemRandom, selected);
const checkerI = new CookieChecker(initiatorKeys.publicKey, systemSuspendAwareClock, systemRandom, selected);

const iWall: number[] = [];
const rWall: number[] = [];
let iCpu = 0;
let rCpu = 0;
for (let n = 0; n < HANDSHAKES + 50; n++) {
  const warm = n < 50;
  const hsI = new HandshakeState();
  const hsR = new HandshakeState();
  // initiator, part 1
  let c0 = cpuUs();
  let t0 = performance.now();
  const init = createInitiation(iCtx, peerOfI, hsI, 1 + n, tai64n(Date.now()))!;
  jar.addMacs(init);
  let iw = performance.now() - t0;
  let ic = cpuUs() - c0;
  // responder
  c0 = cpuUs();
  t0 = performance.now();
  if (!checker.checkMac1(init)) throw new Error("mac1");
  const ci = consumeInitiation(rCtx, (decodeMessage(init) as { message: Initiation }).message, () => peerOfR);
  if (!ci.ok) throw new Error(ci.error);
  commitInitiation(hsR, ci.value, 0);
  const resp = createResponse(rCtx, peerOfR, hsR, 100_000 + n)!;
  jarR.addMacs(resp);
  const kr = deriveSessionKeys(hsR)!;
  const rw = performance.now() - t0;
  const rc = cpuUs() - c0;
  // initiator, part 2
  c0 = cpuUs();
  t0 = performance.now();
  if (!checkerI.checkMac1(resp)) throw new Error("mac1 (response)");
  const err = consumeResponse(iCtx, peerOfI, hsI, (decodeMessage(resp) as { message: Response }).message);
  if (err) throw new Error(err);
  const ki = deriveSessionKeys(hsI)!;
  iw += performance.now() - t0;
  ic += cpuUs() - c0;
  if (Buffer.compare(Buffer.from(ki.sendKey), Buffer.from(kr.receiveKey)) !== 0) throw new Error("keys differ");
  if (warm) continue;
  iWall.push(iw);
  rWall.push(rw);
  iCpu += ic;
  rCpu += rc;
}
const dhTimes: number[] = [];
const eph = generateKeyPair(systemRandom);
for (let n = 0; n < 2_000; n++) {
  const t0 = performance.now();
  dh(eph.privateObject, responderKeys.publicKey);
  dhTimes.push(performance.now() - t0);
}
const dhUs = median(dhTimes.slice(200)) * 1000;
const iUs = median(iWall) * 1000;
const rUs = median(rWall) * 1000;
console.log(`handshake (${HANDSHAKES} after 50 warm-up, AEAD ${selected.name}):`);
console.log(
  `  initiator: median ${iUs.toFixed(0)} µs wall, ${(iCpu / HANDSHAKES).toFixed(0)} µs CPU per handshake = ${(iUs / dhUs).toFixed(1)} DH-equivalents`,
);
console.log(
  `  responder: median ${rUs.toFixed(0)} µs wall, ${(rCpu / HANDSHAKES).toFixed(0)} µs CPU per handshake = ${(rUs / dhUs).toFixed(1)} DH-equivalents`,
);
console.log(`  baseline (same run): one node:crypto X25519 DH, median ${dhUs.toFixed(1)} µs (incl. raw-key import)`);

// ---- 2. AEAD MB/s per provider ----
/** MB/s of plaintext sealed and opened, by wall time and per CPU-second of this process (steadier on a shared machine). */
function aeadMBps(a: Aead): { wall: number; cpu: number } {
  const key = systemRandom.fill(new Uint8Array(32));
  const pt = systemRandom.fill(new Uint8Array(PACKET));
  const ct = new Uint8Array(PACKET + 16);
  const back = new Uint8Array(PACKET);
  // warm-up and correctness
  const ref = seal(a, key, 1, pt, null);
  if (!open(a, key, 1, ref, null)) throw new Error(`${a.name}: open failed`);
  for (let i = 0; i < 2_000; i++) a.sealInto(ct, key, i, pt, null);
  let n = 0;
  const c0 = cpuUs();
  const t0 = performance.now();
  const end = t0 + SECONDS * 1000;
  while (performance.now() < end) {
    for (let i = 0; i < 256; i++, n++) {
      a.sealInto(ct, key, n, pt, null);
      if (!a.openInto(back, key, n, ct, null)) throw new Error(`${a.name}: open failed`);
    }
  }
  const s = (performance.now() - t0) / 1000;
  const c = (cpuUs() - c0) / 1e6;
  return { wall: (n * PACKET) / s / 1e6, cpu: (n * PACKET) / c / 1e6 };
}

const providers: Aead[] = [nobleAead(), await sodiumWasmAead()];
const probe = probeSodium();
if (probe.ok) providers.push(sodiumFfiAead(probe.library));
const results = providers.map((a) => ({ name: a.name, ...aeadMBps(a) }));
const baseline = results.find((r) => r.name === "noble")!;
console.log(
  `AEAD ChaCha20-Poly1305, ${PACKET}-byte packets, seal + open, one thread (MB of plaintext per wall second / per CPU-second):`,
);
for (const r of results) {
  console.log(
    `  ${r.name.padEnd(12)} ${r.wall.toFixed(1).padStart(7)} MB/s wall ${r.cpu.toFixed(1).padStart(7)} MB/CPU-s   ratio vs @noble/ciphers ${(r.wall / baseline.wall).toFixed(2)}× wall, ${(r.cpu / baseline.cpu).toFixed(2)}× CPU`,
  );
}
if (!probe.ok) console.log(`  sodium-ffi unavailable: ${probe.reason}`);
console.log(`  selected at runtime: ${selected.name}${ffiUnavailable ? ` (${ffiUnavailable})` : ""}`);

// ---- 3. Device transport in memory ----
function deviceTransport(a: Aead): { pps: number; ppsCpu: number } {
  const net = new MemoryNet();
  const common = { clock: systemSuspendAwareClock, random: systemRandom, aead: a, load: fixedLoad(false) };
  const da = new Device<MemEndpoint>({ ...common, privateKey: systemRandom.fill(new Uint8Array(32)), io: net.io("a") });
  const db = new Device<MemEndpoint>({ ...common, privateKey: systemRandom.fill(new Uint8Array(32)), io: net.io("b") });
  net.attach("a", da);
  net.attach("b", db);
  da.addPeer({ publicKey: db.publicKey, endpoint: net.endpoint("b"), allowedIps: ["10.0.0.2/32"] });
  db.addPeer({ publicKey: da.publicKey, endpoint: net.endpoint("a"), allowedIps: ["10.0.0.1/32"] });
  const pkt = icmpEcho("10.0.0.1", "10.0.0.2", 1, 1, new Uint8Array(PACKET - 28));
  da.sendPacket(pkt);
  net.pump();
  const delivered = net.delivered.get("b")!;
  delivered.length = 0;
  net.log.length = 0;
  let n = 0;
  const c0 = cpuUs();
  const t0 = performance.now();
  const end = t0 + SECONDS * 1000;
  while (performance.now() < end) {
    for (let i = 0; i < 256; i++, n++) da.sendPacket(pkt);
    net.pump();
    if (delivered.length !== 256) throw new Error(`delivered ${delivered.length} of 256`);
    delivered.length = 0;
    net.log.length = 0;
  }
  const s = (performance.now() - t0) / 1000;
  return { pps: n / s, ppsCpu: n / ((cpuUs() - c0) / 1e6) };
}
const dt = deviceTransport(selected);
const dtNoble = deviceTransport(nobleAead());
const mb = (pps: number) => ((pps * PACKET) / 1e6).toFixed(1);
console.log(
  `Device → Device in memory, ${PACKET}-byte IP packets, both ends in this thread (route, pad, seal, decode, replay check, open, source check):`,
);
for (const [name, r] of [
  [selected.name, dt],
  ["noble", dtNoble],
] as const) {
  console.log(
    `  ${name.padEnd(12)} ${r.pps.toFixed(0).padStart(6)} packets/s = ${mb(r.pps)} MB/s wall; ${r.ppsCpu.toFixed(0)} packets/CPU-s = ${mb(r.ppsCpu)} MB/CPU-s`,
  );
}
console.log(
  `  ratio ${selected.name} Device vs its raw AEAD (per CPU-s): ${((dt.ppsCpu * PACKET) / 1e6 / results.find((r) => r.name === selected.name)!.cpu).toFixed(2)}×`,
);

// ---- 4. TCP through our stack + our WireGuard vs wireguard-go + kernel TCP ----
const tcpSkip = wgWorldSkipReason();
if (tcpSkip) console.log(`TCP throughput: skipped (${tcpSkip})`);
else {
  const TCP_BYTES = Number(values["tcp-mib"]) << 20;
  const w = await startWgWorld("bbtb", 84, { baseline: true });
  try {
    const mibps = (bytes: number, ms: number) => bytes / (1 << 20) / (ms / 1000);
    console.log(
      `TCP through the tunnel, ${TCP_BYTES >> 20} MiB each way over IPv4, one connection (MiB/s; ratio vs wireguard-go + kernel TCP, same run):`,
    );
    for (const kind of ["sink", "source"] as const) {
      const run = await runJobs(w, [{ kind, host: w.server4, bytes: TCP_BYTES, seed: 11 }], 600_000);
      const ours = run.results[0]!;
      const base = await w.baselineClient([kind, w.server4, String(w.port), String(TCP_BYTES), "11"]);
      const o = mibps(ours.bytes, ours.ms);
      const k = mibps(base.bytes, base.ms);
      const dir = kind === "sink" ? "to the server  " : "from the server";
      console.log(
        `  ${dir} ours ${o.toFixed(1).padStart(6)}${ours.ok ? "" : " (FAILED)"}   wireguard-go+kernel ${k.toFixed(1).padStart(6)}${base.ok ? "" : " (FAILED)"}   ratio ${(o / k).toFixed(2)}   (ours: ${mibps(ours.bytes, run.cpuMs).toFixed(1)} MiB per CPU-second of the client process)`,
      );
    }
  } finally {
    await w.close();
  }
}
