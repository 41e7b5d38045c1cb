/** The shared socket on loopback: WireGuard and STUN demultiplexed, Binding transactions matched by ID and server. */
import { afterAll, expect, test } from "bun:test";
import { encodeBindingSuccess } from "../protocol/stun.ts";
import { startLoopbackStun } from "../../test/support/loopbackStun.ts";
import { systemRandom } from "./ports.ts";
import { openSharedSocket, type SharedSocket } from "./sharedSocket.ts";

const toClose: Array<{ close(): void }> = [];
afterAll(() => toClose.forEach((s) => s.close()));

/** A STUN server on loopback answering every Binding request with the source it saw (or `lie` when set). */
async function stunServer(lie?: { address: string; port: number }) {
  const s = await startLoopbackStun(lie ? () => lie : undefined);
  toClose.push(s);
  return s;
}

test("a Binding request learns the socket's mapped address; WireGuard-shaped datagrams go to the Device; junk is counted", async () => {
  const got: string[] = [];
  const sock: SharedSocket = await openSharedSocket({
    hostname: "127.0.0.1",
    port: 0,
    random: systemRandom,
    onWireGuard: (d, from) => got.push(`${d[0]}@${from.key}`),
  });
  toClose.push(sock);
  const server = await stunServer();
  expect(await sock.stunBinding({ address: "127.0.0.1", port: server.port })).toEqual({
    address: "127.0.0.1",
    port: sock.port,
  });

  const peer = await Bun.udpSocket({ hostname: "127.0.0.1", port: 0, binaryType: "uint8array" });
  toClose.push(peer);
  const wg = new Uint8Array(32);
  wg[0] = 4;
  peer.send(wg, sock.port, "127.0.0.1");
  peer.send(new Uint8Array([0x45, 0, 0, 20, 1, 2, 3]), sock.port, "127.0.0.1");
  // A forged Binding success from the wrong address for a transaction that is not pending.
  peer.send(encodeBindingSuccess(new Uint8Array(12), { address: "203.0.113.9", port: 9 }), sock.port, "127.0.0.1");
  for (let i = 0; i < 50 && got.length === 0; i++) await Bun.sleep(10);
  await Bun.sleep(30);
  expect(got).toEqual([`4@127.0.0.1:${peer.port}`]);
  expect(sock.counters.unknownDropped).toBe(1);
  expect(sock.counters.stunUnmatched).toBe(1);
  expect(sock.counters.stunResponsesMatched).toBe(1);
});

test("a server that never answers gives null after the retransmissions; close() ends pending transactions", async () => {
  const sock = await openSharedSocket({ hostname: "127.0.0.1", port: 0, random: systemRandom, onWireGuard: () => {} });
  toClose.push(sock);
  const silent = await Bun.udpSocket({ hostname: "127.0.0.1", port: 0 });
  toClose.push(silent);
  expect(await sock.stunBinding({ address: "127.0.0.1", port: silent.port })).toBeNull();
  expect(sock.counters.stunRequestsSent).toBe(3);
  const pending = sock.stunBinding({ address: "127.0.0.1", port: silent.port });
  sock.close();
  expect(await pending).toBeNull();
});

test("an unreachable candidate (ICMP port unreachable) is counted as a socket error and the socket keeps working", async () => {
  const got: number[] = [];
  const sock = await openSharedSocket({
    hostname: "127.0.0.1",
    port: 0,
    random: systemRandom,
    onWireGuard: (d) => got.push(d[0]!),
  });
  toClose.push(sock);
  // A port nobody listens on: bind and close one to find it.
  const gone = await Bun.udpSocket({ hostname: "127.0.0.1", port: 0 });
  const deadPort = gone.port;
  gone.close();
  const keepalive = new Uint8Array([4, 0, 0, 0, ...new Uint8Array(28)]);
  for (let i = 0; i < 3; i++) {
    sock.sendUdp(keepalive, "127.0.0.1", deadPort);
    await Bun.sleep(20);
  }
  expect(sock.counters.socketErrors).toBeGreaterThan(0);
  sock.sendUdp(keepalive, "127.0.0.1", sock.port);
  for (let i = 0; i < 50 && !got.length; i++) await Bun.sleep(10);
  expect(got).toEqual([4]);
});
