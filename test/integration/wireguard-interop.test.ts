/**
 * Interop of our WireGuard Device (src/wireguard) with Debian's wireguard-go
 * configured by `wg`, over a veth pair between two namespaces this test
 * creates (issue "Tunnel core", done-when: handshakes initiated by either
 * side, ICMP and UDP both ways, a peer restart, the cookie reply path).
 *
 * Topology (torn down by name even on failure; no traffic leaves them):
 *   bbt-wga-PID: our Device in a Bun child (test/support/wgHarness.ts) on
 *     192.0.2.1:51821 (and 192.0.2.3 as a flood source); tunnel 10.77.0.1, fd77::1
 *   bbt-wgb-PID: wireguard-go on TUN bbtwgPID, UDP 192.0.2.2:51820; tunnel
 *     10.77.0.2/24, fd77::2/64; kernel ICMP, UDP echo on port 7777 (udpEcho.ts)
 * Our side crafts IPv4/IPv6 packets (test/support/ipCraft.ts) and checks the
 * kernel's replies come back decrypted. Last, our Device is joined to a
 * kernel TUN in bbt-wga-PID (native/tun) and kernel TCP runs both ways
 * through it, byte-exact (SHA-256), over IPv4 and IPv6.
 * Needs root, ip, wg, wireguard-go, ping; otherwise prints why and skips.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { icmpEcho, parseIcmpEcho, parseUdp, udpPacket } from "../support/ipCraft.ts";
import { LineChild } from "../support/lineChild.ts";
import { keyPairFromPrivate } from "../../src/wireguard/x25519.ts";
import { systemRandom } from "../../src/wireguard/ports.ts";
import { probeTun } from "../../native/tun/probe.ts";

const repo = resolve(import.meta.dir, "../..");
const bun = process.execPath;
const missing = ["ip", "wg", "wireguard-go", "ping"].filter((c) => !Bun.which(c));
const skipReason =
  process.getuid?.() !== 0
    ? "needs root (network namespaces, TUN)"
    : missing.length
      ? `missing ${missing.join(", ")} (apt-get install -y iproute2 wireguard-tools wireguard-go iputils-ping)`
      : !existsSync("/dev/net/tun")
        ? "no /dev/net/tun"
        : null;
if (skipReason) console.log(`SKIP test/integration/wireguard-interop.test.ts: ${skipReason}`);

const NS_A = `bbt-wga-${process.pid}`;
const NS_B = `bbt-wgb-${process.pid}`;
const IF = `bbtwg${process.pid}`.slice(0, 15);
const WG_PORT = 51820;
const OUR_PORT = 51821;
const work = mkdtempSync(join(tmpdir(), "bbt-wg-"));
const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
const ours = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
const theirs = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));

const sh = (cmd: string[]) => Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe" });
const must = (cmd: string[]) => {
  const r = sh(cmd);
  if (r.exitCode !== 0) throw new Error(`${cmd.join(" ")}: ${r.stderr}`);
  return r.stdout.toString();
};
const inB = (cmd: string[]) => ["ip", "netns", "exec", NS_B, ...cmd];

let wgGo: ReturnType<typeof Bun.spawn> | null = null;
let harness: LineChild | null = null;
let echo4: LineChild | null = null;
let echo6: LineChild | null = null;

async function startWireguardGo(): Promise<void> {
  const log = join(work, "wireguard-go.log");
  const env = { ...process.env, WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD: "1", LOG_LEVEL: "error" };
  wgGo = Bun.spawn(inB(["wireguard-go", "-f", IF]), { stdout: Bun.file(log), stderr: Bun.file(log), env });
  const sock = `/var/run/wireguard/${IF}.sock`;
  for (let i = 0; i < 100 && !existsSync(sock); i++) await Bun.sleep(50);
  if (!existsSync(sock)) throw new Error(`wireguard-go did not create ${sock}`);
  const keyFile = join(work, "wg-go.key");
  writeFileSync(keyFile, b64(theirs.privateKey) + "\n", { mode: 0o600 });
  must(
    inB([
      "wg",
      "set",
      IF,
      "private-key",
      keyFile,
      "listen-port",
      String(WG_PORT),
      "peer",
      b64(ours.publicKey),
      "allowed-ips",
      "10.77.0.1/32,fd77::1/128",
      "endpoint",
      `192.0.2.1:${OUR_PORT}`,
    ]),
  );
  must(["ip", "-n", NS_B, "addr", "add", "10.77.0.2/24", "dev", IF]);
  must(["ip", "-n", NS_B, "addr", "add", "fd77::2/64", "dev", IF, "nodad"]);
  must(["ip", "-n", NS_B, "link", "set", IF, "up"]);
  echo4 = new LineChild(
    inB([bun, join(repo, "test/support/udpEcho.ts"), "10.77.0.2", "7777"]),
    join(work, "echo4.log"),
  );
  echo6 = new LineChild(inB([bun, join(repo, "test/support/udpEcho.ts"), "fd77::2", "7777"]), join(work, "echo6.log"));
  await echo4.waitFor((e) => e.ev === "ready", 10_000, "udp echo (IPv4)");
  await echo6.waitFor((e) => e.ev === "ready", 10_000, "udp echo (IPv6)");
}

async function stopWireguardGo(): Promise<void> {
  await echo4?.stop();
  await echo6?.stop();
  if (wgGo && wgGo.exitCode === null) {
    wgGo.kill("SIGTERM");
    const t = setTimeout(() => wgGo?.kill("SIGKILL"), 3_000);
    await wgGo.exited;
    clearTimeout(t);
  }
  wgGo = null;
  rmSync(`/var/run/wireguard/${IF}.sock`, { force: true });
}

async function startHarness(tun?: string): Promise<LineChild> {
  const cfg = {
    ...(tun ? { tun } : {}),
    privateKey: b64(ours.privateKey),
    listen: { address: "192.0.2.1", port: OUR_PORT },
    peer: {
      publicKey: b64(theirs.publicKey),
      endpoint: { address: "192.0.2.2", port: WG_PORT },
      allowedIps: ["10.77.0.0/24", "fd77::/64"],
    },
    floodSource: "192.0.2.3",
  };
  const h = new LineChild(
    ["ip", "netns", "exec", NS_A, bun, join(repo, "test/support/wgHarness.ts"), JSON.stringify(cfg)],
    join(work, "harness.log"),
  );
  await h.waitFor((e) => e.ev === "ready", 15_000, "harness ready");
  harness = h;
  return h;
}

/** Waits for a decrypted packet from the tunnel that `match` accepts (looking only at events after `from`). */
async function packetFrom<T>(
  h: LineChild,
  match: (p: Uint8Array) => T | null,
  what: string,
  from: number,
  timeoutMs = 10_000,
): Promise<T> {
  let found: T | null = null;
  await h.waitFor(
    (e) => {
      if (e.ev !== "packet") return false;
      found = match(new Uint8Array(Buffer.from(e.data as string, "base64")));
      return found !== null;
    },
    timeoutMs,
    what,
    from,
  );
  return found!;
}

const sendPacket = (h: LineChild, p: Uint8Array) => h.send({ op: "send", packet: b64(p) });

async function kernelPing(dst: string, seq: number, timeoutS: number): Promise<void> {
  // The kernel pings us; our side answers each echo request it receives.
  const h = harness!;
  const from = h.events.length;
  const ping = Bun.spawn(inB(["ping", "-c", "1", "-W", String(timeoutS), dst]), { stdout: "pipe", stderr: "pipe" });
  const req = await packetFrom(
    h,
    (p) => {
      const e = parseIcmpEcho(p);
      return e && !e.reply ? e : null;
    },
    `echo request to ${dst}`,
    from,
    timeoutS * 1000,
  );
  sendPacket(h, icmpEcho(req.dst, req.src, req.id, req.seq, req.data, true));
  expect(await ping.exited, `ping ${dst} (seq ${seq}): ${await new Response(ping.stdout).text()}`).toBe(0);
}

async function ourPing(src: string, dst: string, seq: number, timeoutMs = 10_000): Promise<void> {
  const h = harness!;
  const from = h.events.length;
  const data = new TextEncoder().encode(`bb-ping-${seq}`);
  sendPacket(h, icmpEcho(src, dst, 0x4242, seq, data));
  const rep = await packetFrom(
    h,
    (p) => {
      const e = parseIcmpEcho(p);
      return e && e.reply && e.seq === seq ? e : null;
    },
    `echo reply from ${dst}`,
    from,
    timeoutMs,
  );
  expect(rep).toMatchObject({ src: dst, dst: src, id: 0x4242 });
  expect(new TextDecoder().decode(rep.data)).toBe(`bb-ping-${seq}`);
}

describe.skipIf(!!skipReason)("WireGuard interop with wireguard-go", () => {
  beforeAll(async () => {
    for (const ns of [NS_A, NS_B]) must(["ip", "netns", "add", ns]);
    must(["ip", "-n", NS_A, "link", "add", "wgu0", "type", "veth", "peer", "name", "wgu0", "netns", NS_B]);
    must(["ip", "-n", NS_A, "addr", "add", "192.0.2.1/24", "dev", "wgu0"]);
    must(["ip", "-n", NS_A, "addr", "add", "192.0.2.3/24", "dev", "wgu0"]);
    must(["ip", "-n", NS_B, "addr", "add", "192.0.2.2/24", "dev", "wgu0"]);
    for (const ns of [NS_A, NS_B]) {
      must(["ip", "-n", ns, "link", "set", "wgu0", "up"]);
      must(["ip", "-n", ns, "link", "set", "lo", "up"]);
    }
    await startWireguardGo();
    await startHarness();
  }, 60_000);

  afterAll(async () => {
    await harness?.stop();
    await stopWireguardGo();
    for (const ns of [NS_A, NS_B]) sh(["ip", "netns", "delete", ns]);
    rmSync(work, { recursive: true, force: true });
  }, 30_000);

  test("wg derives the same public key from our private key encoding", () => {
    expect(must(inB(["wg", "show", IF, "public-key"])).trim()).toBe(b64(theirs.publicKey));
  }, 30_000);

  test("wireguard-go initiates (kernel pings us over IPv4 and IPv6); we answer as responder", async () => {
    await kernelPing("10.77.0.1", 1, 10);
    await kernelPing("fd77::1", 2, 10);
    const s = await harness!.stats();
    expect(s.counters.initiationsSent).toBe(0);
    expect(s.counters.responsesSent).toBe(1);
    expect(s.counters.handshakesCompleted).toBe(1);
  }, 30_000);

  test("we initiate; ICMP echo over IPv4 and IPv6 comes back decrypted from the kernel", async () => {
    const before = Number(
      must(inB(["wg", "show", IF, "latest-handshakes"]))
        .trim()
        .split(/\s+/)[1],
    );
    harness!.send({ op: "initiate" });
    await ourPing("10.77.0.1", "10.77.0.2", 10);
    await ourPing("fd77::1", "fd77::2", 11);
    const s = await harness!.stats();
    expect(s.counters.initiationsSent).toBe(1);
    expect(s.counters.handshakesCompleted).toBe(2);
    const after = Number(
      must(inB(["wg", "show", IF, "latest-handshakes"]))
        .trim()
        .split(/\s+/)[1],
    );
    expect(after).toBeGreaterThanOrEqual(before);
  }, 30_000);

  test("UDP both ways over IPv4 and IPv6", async () => {
    const h = harness!;
    for (const [us, them, echo] of [
      ["10.77.0.1", "10.77.0.2", echo4!],
      ["fd77::1", "fd77::2", echo6!],
    ] as const) {
      // us → kernel socket, and its echo back to us
      let from = h.events.length;
      sendPacket(h, udpPacket(us, them, 40_000, 7777, new TextEncoder().encode(`hi-${us}`)));
      const back = await packetFrom(h, (p) => parseUdp(p), `UDP echo from ${them}`, from);
      expect(back).toMatchObject({ src: them, dst: us, sport: 7777, dport: 40_000 });
      expect(new TextDecoder().decode(back.payload)).toBe(`hi-${us}`.replace(/^/, "echo:"));
      // kernel socket → us, and our answer back to it
      from = h.events.length;
      const echoFrom = echo.events.length;
      echo.send({ op: "send", address: us, port: 40_001, data: `from-kernel-${them}` });
      const inbound = await packetFrom(h, (p) => parseUdp(p), `UDP from the kernel to ${us}`, from);
      expect(inbound).toMatchObject({ src: them, dst: us, dport: 40_001 });
      expect(new TextDecoder().decode(inbound.payload)).toBe(`from-kernel-${them}`);
      sendPacket(h, udpPacket(us, them, 40_001, inbound.sport, new TextEncoder().encode(`echo:answer-${us}`)));
      await echo.waitFor(
        (e) => e.ev === "recv" && e.data === `echo:answer-${us}`,
        10_000,
        `our UDP answer at ${them}`,
        echoFrom,
      );
    }
  });

  test("peer restart (wireguard-go): our old session gets no answer; the restarted side's handshake is accepted", async () => {
    await stopWireguardGo();
    await startWireguardGo();
    const from = harness!.events.length;
    sendPacket(harness!, icmpEcho("10.77.0.1", "10.77.0.2", 0x4242, 20, new Uint8Array(4)));
    await Bun.sleep(1_000);
    expect(harness!.events.slice(from).some((e) => e.ev === "packet")).toBe(false);
    await kernelPing("10.77.0.1", 21, 10);
    await ourPing("10.77.0.1", "10.77.0.2", 22);
    const s = await harness!.stats();
    expect(s.counters.responsesSent).toBe(2);
  }, 30_000);

  test("peer restart (our side): the new Device's initiation has a later timestamp and is accepted", async () => {
    await harness!.stop();
    await startHarness();
    await ourPing("10.77.0.1", "10.77.0.2", 30);
    await ourPing("fd77::1", "fd77::2", 31);
    const s = await harness!.stats();
    expect(s.counters.initiationsSent).toBe(1);
    expect(s.counters.handshakesCompleted).toBe(1);
  }, 30_000);

  test("cookie reply from us under load: wireguard-go takes the cookie and retries with mac2", async () => {
    await stopWireguardGo();
    await startWireguardGo();
    harness!.send({ op: "load", on: true });
    await kernelPing("10.77.0.1", 40, 20); // the retry comes after REKEY_TIMEOUT (5 s)
    const s = await harness!.stats();
    expect(s.counters.cookieRepliesSent).toBeGreaterThanOrEqual(1);
    expect(s.counters.drops["cookie-required"]).toBeGreaterThanOrEqual(1);
    expect(s.counters.drops["mac1-invalid"]).toBe(0);
    expect(s.counters.responsesSent).toBe(1);
    harness!.send({ op: "load", on: false });
  }, 40_000);

  test("TCP both ways through a kernel TUN joined to our Device (native/tun), IPv4 and IPv6, byte-exact", async () => {
    const probe = await probeTun();
    if (!probe.available) {
      console.log(`SKIP TCP through TUN: ${probe.reason}`);
      return;
    }
    await harness!.stop();
    const TUN = "bbtwgtun0";
    await startHarness(TUN);
    must(["ip", "-n", NS_A, "addr", "add", "10.77.0.1/24", "dev", TUN]);
    must(["ip", "-n", NS_A, "addr", "add", "fd77::1/64", "dev", TUN, "nodad"]);
    must(["ip", "-n", NS_A, "link", "set", TUN, "up"]);
    const tcp = join(repo, "test/support/tcpEcho.ts");
    const servers = [
      new LineChild(inB([bun, tcp, "listen", "10.77.0.2", "7000"]), join(work, "tcp-b4.log")),
      new LineChild(inB([bun, tcp, "listen", "fd77::2", "7000"]), join(work, "tcp-b6.log")),
      new LineChild(["ip", "netns", "exec", NS_A, bun, tcp, "listen", "10.77.0.1", "7001"], join(work, "tcp-a4.log")),
      new LineChild(["ip", "netns", "exec", NS_A, bun, tcp, "listen", "fd77::1", "7001"], join(work, "tcp-a6.log")),
    ];
    try {
      for (const s of servers) await s.waitFor((e) => e.ev === "ready", 10_000, "tcp listener");
      const bytes = String(4 * 1024 * 1024);
      const runs = [
        ["ip", "netns", "exec", NS_A, bun, tcp, "connect", "10.77.0.2", "7000", bytes],
        ["ip", "netns", "exec", NS_A, bun, tcp, "connect", "fd77::2", "7000", bytes],
        inB([bun, tcp, "connect", "10.77.0.1", "7001", bytes]),
        inB([bun, tcp, "connect", "fd77::1", "7001", bytes]),
      ];
      for (const cmd of runs) {
        const p = Bun.spawn(cmd, { stdout: "pipe", stderr: "pipe" });
        const [text, err, code] = await Promise.all([
          new Response(p.stdout).text(),
          new Response(p.stderr).text(),
          p.exited,
        ]);
        console.log(`TCP ${cmd.slice(-4).join(" ")}: ${text.trim()}`);
        expect(code, `${cmd.join(" ")}: ${text}${err}`).toBe(0);
        expect(JSON.parse(text.trim().split("\n").pop()!)).toMatchObject({ ok: true, bytes: Number(bytes) });
      }
      const s = await harness!.stats();
      expect(s.counters.drops["decrypt-failed"]).toBe(0);
      expect(s.counters.drops["source-not-allowed"]).toBe(0);
    } finally {
      for (const s of servers) await s.stop();
    }
  }, 120_000);
  test("cookie reply from wireguard-go under load (bursts of valid-mac1 initiations from another address)", async () => {
    await harness!.stop();
    await startHarness(); // without TUN: this test reads decrypted packets itself
    const h = harness!;
    h.send({ op: "flood", ms: 15_000, burst: 1_536, intervalMs: 250, to: { address: "192.0.2.2", port: WG_PORT } });
    await Bun.sleep(600);
    h.send({ op: "initiate" });
    // The first initiation gets a cookie reply; a retransmission (every REKEY_TIMEOUT = 5 s) carries mac2 and is answered.
    let s = await h.stats();
    const deadline = Date.now() + 13_000;
    while (s.counters.handshakesCompleted === 0 && Date.now() < deadline) {
      await Bun.sleep(250);
      s = await h.stats();
    }
    h.send({ op: "flood-stop" });
    const flooded = (await h.waitFor((e) => e.ev === "flooded" || e.ev === "error", 5_000, "flood end")) as {
      sent?: number;
      message?: string;
    };
    console.log(
      `wireguard-go flood: ${flooded.sent ?? flooded.message} initiations sent; cookie replies accepted by us: ${s.counters.cookieRepliesAccepted}; our initiations: ${s.counters.initiationsSent}`,
    );
    expect(s.counters.cookieRepliesAccepted).toBeGreaterThanOrEqual(1);
    expect(s.counters.handshakesCompleted).toBe(1);
    expect(s.counters.initiationsSent).toBeGreaterThanOrEqual(2);
    await ourPing("10.77.0.1", "10.77.0.2", 50);
  }, 40_000);
});
