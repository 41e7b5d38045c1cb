/**
 * Two MultipathTunnels on loopback UDP sockets: the client knows only an
 * unreachable candidate and one relay (an in-memory datagram pipe standing
 * in for src/relayclient and the relay, which test/integration/proxy-netns.test.ts
 * runs for real), so the session comes up over the relay; then the client
 * learns the host's real address and the path moves to direct with the same
 * session. Closing the tunnels closes the relay links.
 */
import { afterEach, expect, test } from "bun:test";
import type { RelayEntry, SignedRelayToken } from "../protocol/connection.ts";
import { nobleAead } from "./aead/noble.ts";
import { testPacket as packet } from "./fakes.ts";
import { MultipathTunnel } from "./multipathTunnel.ts";
import { systemSuspendAwareClock, systemRandom } from "./ports.ts";
import type { RelayConnector, RelayLink } from "./relaySessions.ts";
import { keyPairFromPrivate } from "./x25519.ts";

const open: MultipathTunnel[] = [];
afterEach(() => {
  for (const t of open.splice(0)) t.close();
});

/** Connectors for two ends whose links pass datagrams to each other (asynchronously, as a relay would). */
function relayDouble() {
  const ends: Array<{ onDatagram: (d: Uint8Array) => void; link: RelayLink & { closedByOwner: boolean } } | null> = [
    null,
    null,
  ];
  let forwarded = 0;
  const connector =
    (side: 0 | 1): RelayConnector =>
    async (_entry, _token, onDatagram) => {
      let end!: (c: { code: string | null; closeCode: number }) => void;
      const link = {
        paired: true,
        closed: new Promise<{ code: string | null; closeCode: number }>((r) => (end = r)),
        send: (d: Uint8Array) => {
          const other = ends[1 - side];
          if (!other || link.closedByOwner) return false;
          const copy = d.slice();
          forwarded++;
          queueMicrotask(() => other.onDatagram(copy));
          return true;
        },
        close: () => {
          link.closedByOwner = true;
          end({ code: null, closeCode: 1000 });
        },
        closedByOwner: false,
      };
      ends[side] = { onDatagram, link };
      return link;
    };
  return { connector, ends, forwarded: () => forwarded };
}

async function waitFor(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await Bun.sleep(10);
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

test("a session that came up over the relay moves to the direct path without a new handshake; close closes the relay links", async () => {
  const aead = nobleAead();
  const relay = relayDouble();
  const entry: RelayEntry = { relayId: "relay-1", url: "wss://relay.example/v1/relay" };
  const token = {} as SignedRelayToken;
  const ck = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
  const hk = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
  const atClient: number[] = [];
  const atHost: number[] = [];
  const common = {
    clock: systemSuspendAwareClock,
    random: systemRandom,
    aead,
    listen: { hostname: "127.0.0.1", port: 0 },
  };
  const host = await MultipathTunnel.open({
    ...common,
    privateKey: hk.privateKey,
    relayConnector: relay.connector(1),
    deliver: (p) => void atHost.push(p[41]!),
  });
  open.push(host);
  const client = await MultipathTunnel.open({
    ...common,
    privateKey: ck.privateKey,
    relayConnector: relay.connector(0),
    deliver: (p) => void atClient.push(p[41]!),
  });
  open.push(client);
  const hp = host.mp.addPeer({ publicKey: ck.publicKey, allowedIps: ["fd00::1/128"] });
  host.attachRelays(hp.peer, [{ entry, token }], (id) => `${id}/grant-a`);
  const cp = client.mp.addPeer({ publicKey: hk.publicKey, allowedIps: ["fd00::2/128"] });
  // A candidate nobody listens on: the direct path does not work yet.
  cp.selector.setCandidates([{ address: "127.0.0.1", port: 9 }]);
  client.attachRelays(cp.peer, [{ entry, token }], (id) => id);
  await waitFor(() => relay.ends.every((e) => e !== null), "both relay links");
  await waitFor(
    () => client.relays.list()[0]?.state === "open" && host.relays.list()[0]?.state === "open",
    "both sessions open",
  );

  cp.peer.send(packet(1, 2, 1));
  client.arm();
  await waitFor(() => atHost.includes(1), "the first packet over the relay");
  hp.peer.send(packet(2, 1, 2));
  host.arm();
  await waitFor(() => atClient.includes(2), "the reply over the relay");
  expect(cp.selector.state()).toMatchObject({ path: "relay", relay: "relay-1", direct: null });
  expect(hp.selector.state()).toMatchObject({ path: "relay", relay: "relay-1/grant-a", direct: null });
  expect(host.relays.relayIdOf("relay-1/grant-a")).toBe("relay-1");
  const handshakes = cp.peer.keypairs.current;

  // The client learns the host's real address: probes pin it on the host, and the host's next datagram pins it on the client.
  cp.selector.setCandidates([{ address: "127.0.0.1", port: host.udp.port }]);
  await waitFor(() => hp.selector.isDirect(), "the host pinning the client's address");
  hp.peer.send(packet(2, 1, 3));
  host.arm();
  await waitFor(() => atClient.includes(3) && cp.selector.isDirect(), "the client pinning the host's address");
  expect(cp.selector.state().direct).toBe(`127.0.0.1:${host.udp.port}`);
  expect(cp.peer.keypairs.current).toBe(handshakes); // the same session
  const before = relay.forwarded();
  cp.peer.send(packet(1, 2, 4));
  client.arm();
  await waitFor(() => atHost.includes(4), "a packet on the direct path");
  expect(relay.forwarded()).toBe(before); // pinned: not mirrored through the relay any more

  client.removePeer(cp.peer);
  expect(relay.ends[0]!.link.closedByOwner).toBe(true);
  host.close();
  expect(relay.ends[1]!.link.closedByOwner).toBe(true);
  expect(host.relays.list()).toEqual([]);
}, 15_000);
