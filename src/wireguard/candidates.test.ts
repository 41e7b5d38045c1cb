/** Candidate gathering on one shared socket: the STUN answer names that socket's own port, STUN first, bounded, a silent or failing server yields nothing. */
import { afterAll, expect, test } from "bun:test";
import { startLoopbackStun } from "../../test/support/loopbackStun.ts";
import { MAX_STUN_SERVERS } from "../protocol/stunServers.ts";
import { gatherCandidates, stunCandidates } from "./candidates.ts";
import { systemRandom } from "./ports.ts";
import { openSharedSocket } from "./sharedSocket.ts";

const toClose: Array<{ close(): void }> = [];
afterAll(() => toClose.forEach((s) => s.close()));

const iface = (address: string, internal = false) => ({ address, internal });

test("gathered on the tunnel's socket: the STUN server sees that socket's port, and its answer comes before the local addresses", async () => {
  // Answers as a NAT would: the public address, the port the request came from.
  const server = await startLoopbackStun((src) => ({ address: "198.51.100.10", port: src.port }));
  toClose.push(server);
  const sock = await openSharedSocket({ hostname: "127.0.0.1", port: 0, random: systemRandom, onWireGuard: () => {} });
  toClose.push(sock);
  const list = await gatherCandidates(
    sock,
    "0.0.0.0",
    { lo: [iface("127.0.0.1", true)], eth0: [iface("10.1.0.2"), iface("169.254.1.1"), iface("fe80::1")] },
    [{ address: "127.0.0.1", port: server.port }],
  );
  expect(list).toEqual([
    { address: "198.51.100.10", port: sock.port, kind: "stun" },
    { address: "10.1.0.2", port: sock.port, kind: "local" },
  ]);
  expect(sock.counters.stunResponsesMatched).toBe(1);
});

test("at most MAX_STUN_SERVERS are asked; a server that does not answer or a binding that throws yields no candidate; no servers, only local ones", async () => {
  const asked: number[] = [];
  const servers = Array.from({ length: MAX_STUN_SERVERS + 3 }, (_, i) => ({ address: "192.0.2.1", port: 3478 + i }));
  const list = await stunCandidates(servers, async (s) => {
    asked.push(s.port);
    if (s.port === 3478) return { address: "198.51.100.20", port: 40_000 };
    if (s.port === 3479) throw new Error("socket closed");
    return null;
  });
  expect(asked).toEqual(servers.slice(0, MAX_STUN_SERVERS).map((s) => s.port));
  expect(list).toEqual([{ address: "198.51.100.20", port: 40_000, kind: "stun" }]);
  const none = await gatherCandidates(
    { port: 5000, stunBinding: () => Promise.reject(new Error("never asked")) },
    "0.0.0.0",
    { eth0: [iface("10.1.0.2")] },
    [],
  );
  expect(none).toEqual([{ address: "10.1.0.2", port: 5000, kind: "local" }]);
});

test("a STUN answer that names no single peer or a link-local address (a forged or broken binding) yields no candidate", async () => {
  const answers = [
    "0.0.0.0",
    "255.255.255.255",
    "224.0.0.1",
    "::",
    "ff02::1",
    "169.254.9.9",
    "fe80::1",
    "198.51.100.7",
  ];
  const servers = answers.slice(0, MAX_STUN_SERVERS).map((_, i) => ({ address: "192.0.2.1", port: 3478 + i }));
  for (let i = 0; i < answers.length; i += MAX_STUN_SERVERS) {
    const batch = answers.slice(i, i + MAX_STUN_SERVERS);
    const list = await stunCandidates(servers.slice(0, batch.length), async (s) => ({
      address: batch[s.port - 3478]!,
      port: 40_000,
    }));
    expect(list).toEqual(
      batch.includes("198.51.100.7") ? [{ address: "198.51.100.7", port: 40_000, kind: "stun" }] : [],
    );
  }
});
