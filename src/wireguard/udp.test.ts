/**
 * Two UDP Devices on loopback (127.0.0.1 only) on the real clock: handshake,
 * an ICMP echo each way, and close() leaving no socket or timer behind.
 */
import { afterAll, expect, test } from "bun:test";
import { icmpEcho, parseIcmpEcho } from "../../test/support/ipCraft.ts";
import { selectAead } from "./aead/select.ts";
import { systemRandom } from "./ports.ts";
import { startUdpDevice, udpEndpoint, type UdpDevice } from "./udp.ts";

const { aead } = await selectAead();
const opened: UdpDevice[] = [];
afterAll(() => opened.forEach((d) => d.close()));

test("two UDP Devices on loopback exchange packets both ways", async () => {
  const got: Record<string, Uint8Array[]> = { a: [], b: [] };
  const waiters: (() => void)[] = [];
  const onPacket = (name: string) => (p: Uint8Array) => {
    got[name]!.push(p);
    waiters.splice(0).forEach((w) => w());
  };
  const until = async (cond: () => boolean) => {
    const deadline = Date.now() + 5_000;
    while (!cond()) {
      if (Date.now() > deadline) throw new Error("timed out");
      await new Promise<void>((r) => (waiters.push(r), setTimeout(r, 50)));
    }
  };
  const keyA = systemRandom.fill(new Uint8Array(32));
  const keyB = systemRandom.fill(new Uint8Array(32));
  const a = await startUdpDevice({ privateKey: keyA, aead, hostname: "127.0.0.1", port: 0, onPacket: onPacket("a") });
  const b = await startUdpDevice({ privateKey: keyB, aead, hostname: "127.0.0.1", port: 0, onPacket: onPacket("b") });
  // Root gets wireguard-go's 7 MiB each way (the kernel reports double); elsewhere the cap is explained.
  for (const d of [a, b])
    expect(d.socketBuffers.receiveBytes > 0 && (d.socketBuffers.forced || d.socketBuffers.reason !== null)).toBe(true);
  if (process.getuid?.() === 0)
    expect(a.socketBuffers).toEqual({ receiveBytes: 14 << 20, sendBytes: 14 << 20, forced: true, reason: null });
  opened.push(a, b);
  a.device.addPeer({
    publicKey: b.device.publicKey,
    endpoint: udpEndpoint("127.0.0.1", b.port),
    allowedIps: ["10.9.0.2/32"],
  });
  b.device.addPeer({ publicKey: a.device.publicKey, allowedIps: ["10.9.0.1/32"] }); // no endpoint: learnt from a's initiation
  a.sendPacket(icmpEcho("10.9.0.1", "10.9.0.2", 1, 1, new Uint8Array(10)));
  await until(() => got.b!.length === 1);
  b.sendPacket(icmpEcho("10.9.0.2", "10.9.0.1", 1, 1, new Uint8Array(10), true));
  await until(() => got.a!.length === 1);
  expect(parseIcmpEcho(got.a![0]!)).toMatchObject({ reply: true, src: "10.9.0.2" });
  expect(b.device.allPeers()[0]!.endpoint?.key).toBe(`127.0.0.1:${a.port}`);
  expect(a.device.counters.handshakesCompleted).toBe(1);
});
