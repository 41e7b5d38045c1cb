/**
 * native/tun against the Linux kernel: a TUN device made through bun:ffi,
 * moved into this test's namespace (bbtun-PID, 10.77.0.1/24 on the device;
 * our side is 10.77.0.2), carries UDP both ways byte-exact; bad names and a
 * taken name fail with stable codes; closing removes the device. Traffic never
 * leaves the namespace. Needs root and ip; otherwise prints why and skips.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { probeTun } from "../../native/tun/probe.ts";
import { openTun, TunError, type TunDevice } from "../../native/tun/tun.ts";
import { Netns, netnsSkipReason, sh } from "../support/netns.ts";
import { parseUdp4, udp4 } from "../support/packets.ts";

const skipReason = netnsSkipReason();
if (skipReason) console.log(`SKIP test/integration/tun.test.ts: ${skipReason}`);
const repo = resolve(import.meta.dir, "../..");
const peer = resolve(import.meta.dir, "../support/udpPeer.ts");
const NS = `bbtun-${process.pid}`;
const DEV = `bbtun${process.pid % 100000}`;
let ns: Netns | null = null;
const devices: TunDevice[] = [];

afterAll(async () => {
  for (const d of devices) await d.close();
  ns?.delete();
  rmSync(join(repo, ".bb/test-build/tun"), { recursive: true, force: true });
});

describe.skipIf(!!skipReason)("TUN through bun:ffi", () => {
  test("probe reports TUN usable as root", async () => {
    expect(await probeTun()).toEqual({ available: true });
  });

  test("invalid names and MTUs are refused with invalid-argument; a taken name is busy", () => {
    for (const opts of [{ name: "" }, { name: "a/b" }, { name: "x".repeat(16) }, { mtu: 100 }, { mtu: 70000 }]) {
      let err: unknown;
      try {
        openTun(opts);
      } catch (e) {
        err = e;
      }
      expect(err, JSON.stringify(opts)).toBeInstanceOf(TunError);
      expect((err as TunError).code).toBe("invalid-argument");
    }
    const a = openTun({ name: `${DEV}b` });
    devices.push(a);
    let err: unknown;
    try {
      openTun({ name: `${DEV}b` });
    } catch (e) {
      err = e;
    }
    expect((err as TunError).code).toBe("busy");
  });

  test("UDP both ways through the device, byte-exact, and close removes it", async () => {
    const dev = openTun({ name: DEV, mtu: 1420 });
    devices.push(dev);
    expect(dev.name).toBe(DEV);
    ns = new Netns(NS);
    sh(["ip", "link", "set", DEV, "netns", NS]);
    ns.ip("addr", "add", "10.77.0.1/24", "dev", DEV);
    // The kernel queues packets for the reader on the device (500 by default); the burst below is 2,000
    // packets, so a reader descheduled on a loaded machine would see drops. The queue holds the whole burst.
    ns.ip("link", "set", DEV, "txqueuelen", "4096");
    ns.ip("link", "set", DEV, "up");
    expect(ns.ip("link", "show", DEV)).toContain("mtu 1420");

    // kernel → TUN: 2,000 datagrams of 1,372 bytes from a socket in the namespace.
    const COUNT = 2000;
    const received: Buffer[] = [];
    dev.start((packets) => {
      for (const p of packets) {
        const u = parseUdp4(p);
        if (u && u.dport === 9999) received.push(Buffer.from(u.payload));
      }
    });
    const send = Bun.spawn(ns.exec([process.execPath, peer, "send", "10.77.0.2", "9999", String(COUNT), "1372"]), {
      stdout: "pipe",
    });
    expect(await new Response(send.stdout).text()).toContain(`sent ${COUNT}`);
    for (let i = 0; i < 200 && received.length < COUNT; i++) await Bun.sleep(10);
    expect(received.length).toBe(COUNT);
    received.forEach((b, i) => {
      const want = Buffer.alloc(1372, i % 251);
      want.writeUInt32BE(i, 0);
      expect(b.equals(want)).toBe(true);
    });

    // TUN → kernel: 500 datagrams written by us arrive at a socket in the namespace, in order. The receiver
    // reports every 25 datagrams and we send the next 25 only then, so a receiver descheduled on a loaded
    // machine never finds its socket buffer overrun (UDP would drop, and the test would measure the load).
    const STEP = 25;
    const recv = Bun.spawn(ns.exec([process.execPath, peer, "recv", "10.77.0.1", "9998", "500", String(STEP)]), {
      stdout: "pipe",
    });
    const lines = recv.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let buffered = "";
    const nextLine = async (): Promise<string> => {
      for (;;) {
        const nl = buffered.indexOf("\n");
        if (nl >= 0) {
          const line = buffered.slice(0, nl);
          buffered = buffered.slice(nl + 1);
          return line;
        }
        const r = await lines.read();
        if (r.done) return buffered;
        buffered += r.value;
      }
    };
    expect(await nextLine()).toBe("ready");
    const hash = createHash("sha256");
    for (let i = 0; i < 500; i++) {
      const payload = Buffer.alloc(1000, i % 251);
      payload.writeUInt32BE(i, 0);
      hash.update(payload);
      const packet = udp4("10.77.0.2", 40000, "10.77.0.1", 9998, payload);
      // write() drops (false) rather than blocking when the kernel pushes back; retry like a real sender.
      let ok = dev.write(packet);
      for (let tries = 0; !ok && tries < 50; tries++) ok = (await Bun.sleep(5), dev.write(packet));
      expect(ok).toBe(true);
      if (i % STEP === STEP - 1) expect(await nextLine()).toBe(`got ${i + 1}`);
    }
    expect(await nextLine()).toBe(`recv 500 ${hash.digest("hex")}`);
    expect(dev.stats().packetsWritten).toBe(500);

    await dev.close();
    expect(sh(["ip", "-n", NS, "link", "show", DEV]).code).not.toBe(0);
    expect(dev.write(new Uint8Array(28))).toBe(false);
  }, 30_000);

  test("a compiled binary that embeds native/tun/reader.worker.ts reads packets", async () => {
    const dir = join(repo, ".bb/test-build/tun");
    mkdirSync(dir, { recursive: true });
    const entry = join(dir, "entry.ts");
    writeFileSync(
      entry,
      `import { openTun } from ${JSON.stringify(join(repo, "native/tun/tun.ts"))};
const dev = openTun({ name: process.argv[2] });
let n = 0;
dev.start((p) => { n += p.length; }, (reason) => { console.log("stopped " + reason); process.exit(1); });
console.log("ready");
while (n === 0) await Bun.sleep(10);
console.log("got " + n);
await dev.close();
`,
    );
    const out = join(dir, "tunread");
    const build = Bun.spawnSync(
      [process.execPath, "build", "--compile", entry, join(repo, "native/tun/reader.worker.ts"), "--outfile", out],
      { cwd: repo, stderr: "pipe" },
    );
    expect(build.exitCode, build.stderr.toString()).toBe(0);
    const name = `${DEV}c`;
    const proc = Bun.spawn([out, name], { stdout: "pipe", stderr: "inherit" });
    const reader = proc.stdout.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toContain("ready");
    sh(["ip", "link", "set", name, "netns", NS]);
    ns!.ip("addr", "add", "10.77.1.1/24", "dev", name);
    ns!.ip("link", "set", name, "up");
    const send = Bun.spawn(ns!.exec([process.execPath, peer, "send", "10.77.1.2", "9999", "3", "100"]), {
      stdout: "ignore",
    });
    await send.exited;
    let text = "";
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      text += new TextDecoder().decode(r.value);
    }
    expect(await proc.exited).toBe(0);
    expect(text).toMatch(/got [1-9]/);
  }, 60_000);
});
