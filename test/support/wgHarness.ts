/**
 * Our WireGuard Device on UDP as a child process, for interop tests that run
 * it inside a network namespace (`ip netns exec NS bun wgHarness.ts CONFIG`).
 * CONFIG (argv[2], JSON): { privateKey, listen: {address, port},
 * peer: {publicKey, endpoint?: {address, port}, allowedIps},
 * floodSource?: address, tun?: interface name }. Keys are base64. With `tun`,
 * the harness opens that TUN device (native/tun) in its namespace and joins
 * it to the Device: packets the kernel routes into it are sealed, decrypted
 * packets are written to it (no "packet" events then).
 *
 * Commands, one JSON object per stdin line:
 *   {"op":"send","packet":B64}        seal an IP packet into the tunnel
 *   {"op":"initiate"}                  start a handshake now
 *   {"op":"load","on":true|false}      demand cookies (responder under load) or not
 *   {"op":"flood","ms":N,"burst":B,"intervalMs":I,"to":{address,port}}  send bursts
 *        of B valid-mac1 initiations every I ms from `floodSource` with a throwaway
 *        key, for N ms (puts the other side under load); {"op":"flood-stop"} ends it
 *   {"op":"stats"}                     report counters
 * Events, one JSON object per stdout line: {"ev":"ready"}, {"ev":"packet","data":B64},
 * {"ev":"stats",...}, {"ev":"flooded","sent":N}, {"ev":"error","message":…}.
 * Must never: bind outside the addresses it is given, or outlive stdin.
 */
import { selectAead } from "../../src/wireguard/aead/select.ts";
import { Device } from "../../src/wireguard/device.ts";
import { MESSAGE_INITIATION } from "../../src/wireguard/constants.ts";
import { messageType } from "../../src/wireguard/codec.ts";
import { fixedLoad, type LoadPolicy } from "../../src/wireguard/load.ts";
import { systemSuspendAwareClock, systemRandom } from "../../src/wireguard/ports.ts";
import { startUdpDevice, udpEndpoint, type UdpEndpoint } from "../../src/wireguard/udp.ts";
import { DEFAULT_TUN_MTU, openTun, type TunDevice } from "../../native/tun/tun.ts";
import { stdinLines } from "./stdinLines.ts";

interface Config {
  privateKey: string;
  listen: { address: string; port: number };
  peer: { publicKey: string; endpoint?: { address: string; port: number }; allowedIps: string[] };
  floodSource?: string;
  tun?: string;
}

const cfg = JSON.parse(process.argv[2]!) as Config;
const b64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));
const emit = (o: object) => process.stdout.write(JSON.stringify(o) + "\n");

let tun: TunDevice | null = null;
let loaded = false;
const load: LoadPolicy = { note: () => {}, underLoad: () => loaded };
const { aead } = await selectAead();
const wg = await startUdpDevice({
  privateKey: b64(cfg.privateKey),
  aead,
  hostname: cfg.listen.address,
  port: cfg.listen.port,
  load,
  onPacket: (p) => (tun ? tun.write(p) : emit({ ev: "packet", data: Buffer.from(p).toString("base64") })),
});
if (cfg.tun) {
  tun = openTun({ name: cfg.tun, mtu: DEFAULT_TUN_MTU });
  // Views into the reader's ring are valid only during the call: copy, since a packet may wait for a handshake.
  tun.start((packets) => {
    for (const p of packets) wg.sendPacket(Uint8Array.from(p));
  });
}
const peer = wg.device.addPeer({
  publicKey: b64(cfg.peer.publicKey),
  endpoint: cfg.peer.endpoint ? udpEndpoint(cfg.peer.endpoint.address, cfg.peer.endpoint.port) : null,
  allowedIps: cfg.peer.allowedIps,
});

/** One valid initiation to `to`'s key from a throwaway identity (correct mac1, unknown static key). */
function floodInitiation(): Uint8Array {
  let captured: Uint8Array | null = null;
  const d = new Device<UdpEndpoint>({
    privateKey: systemRandom.fill(new Uint8Array(32)),
    clock: systemSuspendAwareClock,
    random: systemRandom,
    aead,
    load: fixedLoad(false),
    io: { sendDatagram: (x) => void (captured = x), deliverPacket: () => {} },
  });
  d.initiateHandshake(d.addPeer({ publicKey: peer.remote.publicKey, endpoint: udpEndpoint("0.0.0.0", 1) }));
  if (!captured || messageType(captured) !== MESSAGE_INITIATION) throw new Error("could not build a flood initiation");
  return captured;
}

let flooding = false;

/**
 * Sends bursts of `burst` valid-mac1 initiations every `intervalMs` for up to
 * `ms` (or until "flood-stop"): each burst overfills the peer's handshake
 * queue for a moment (wireguard-go is under load from 1/8 of its 1,024-entry
 * queue and stays so for 1 s), and the gaps let the queue drain so our own
 * handshake messages are not lost at its door.
 */
async function flood(
  ms: number,
  burst: number,
  intervalMs: number,
  to: { address: string; port: number },
): Promise<number> {
  if (!cfg.floodSource) throw new Error("no floodSource configured");
  const sock = await Bun.udpSocket({
    hostname: cfg.floodSource,
    port: 0,
    binaryType: "uint8array",
    socket: { data() {} },
  });
  const msg = floodInitiation();
  const batch: (Uint8Array | number | string)[] = [];
  for (let i = 0; i < 64; i++) batch.push(msg, to.port, to.address);
  let sent = 0;
  flooding = true;
  const end = performance.now() + ms;
  while (flooding && performance.now() < end) {
    for (let i = 0; i < Math.ceil(burst / 64); i++) sent += sock.sendMany(batch);
    await Bun.sleep(intervalMs);
  }
  flooding = false;
  sock.close();
  return sent;
}

const lines = stdinLines();

emit({ ev: "ready", port: wg.port });
for await (const line of lines) {
  if (!line.trim()) continue;
  try {
    const c = JSON.parse(line) as {
      op: string;
      packet?: string;
      on?: boolean;
      ms?: number;
      burst?: number;
      intervalMs?: number;
      to?: { address: string; port: number };
    };
    if (c.op === "send") wg.sendPacket(b64(c.packet!));
    else if (c.op === "initiate") wg.initiateHandshake(peer);
    else if (c.op === "load") loaded = !!c.on;
    else if (c.op === "flood-stop") flooding = false;
    else if (c.op === "flood")
      void flood(c.ms!, c.burst ?? 1_536, c.intervalMs ?? 250, c.to!).then(
        (sent) => emit({ ev: "flooded", sent }),
        (e) => emit({ ev: "error", message: String(e) }),
      );
    else if (c.op === "stats") {
      const k = peer.keypairs;
      emit({
        ev: "stats",
        aead: aead.name,
        counters: wg.device.counters,
        peer: {
          endpoint: peer.endpoint?.key ?? null,
          lastHandshakeWallMs: peer.stats.lastHandshakeWallMs,
          hasCookie: peer.cookies.hasFreshCookie(),
          sessions: [k.previous, k.current, k.next].filter(Boolean).length,
        },
      });
    } else emit({ ev: "error", message: `unknown op ${c.op}` });
  } catch (e) {
    emit({ ev: "error", message: String(e) });
  }
}
await tun?.close();
wg.close();
