/**
 * The host endpoint on loopback UDP with a recording placement link (a test
 * double for the kernel link, which test/integration/proxy-netns.test.ts
 * covers): grants verified and refused with stable codes, the inner filter
 * on both directions, revocation, expiry without a command, hole punching
 * towards the client's candidates from the rendezvous, and the grant's
 * relay sessions (through a recording connector, a test double for
 * src/relayclient) opened only for relays whose map and host token verify,
 * re-tokened on redelivery, closed with the grant.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { TestGrantIssuer, testId } from "../../../test/support/grantIssuer.ts";
import type { ConfigureConnection } from "../../protocol/agent.ts";
import type { SignedGrant } from "../../protocol/connection.ts";
import { ipv6Bytes } from "../../protocol/ipAddress.ts";
import {
  MultipathDevice,
  openSharedSocket,
  selectAead,
  systemSuspendAwareClock,
  systemRandom,
  type RelayConnector,
  type SharedSocket,
} from "../../wireguard/index.ts";
import { keyPairFromPrivate } from "../../wireguard/x25519.ts";
import { HostEndpoint } from "./endpoint.ts";
import type { PlacementTarget } from "./grantCheck.ts";
import type { PlacementLink, PlacementLinkPort } from "./placementLink.ts";

const CLIENT = "fd00:1:2:3::10";
const ALLOC = "fd00:1:2:3::2";
const issuer = new TestGrantIssuer();
const { aead } = await selectAead();

function tcp(src: string, dst: string, sport: number, dport: number, marker = 0): Uint8Array {
  const p = new Uint8Array(60);
  p[0] = 0x60;
  p[5] = 20;
  p[6] = 6;
  p[7] = 64;
  p.set(ipv6Bytes(src), 8);
  p.set(ipv6Bytes(dst), 24);
  p[40] = sport >> 8;
  p[41] = sport & 0xff;
  p[42] = dport >> 8;
  p[43] = dport & 0xff;
  p[59] = marker;
  return p;
}

class RecordingLinks implements PlacementLinkPort {
  readonly written: Uint8Array[] = [];
  readonly flows: unknown[][] = [];
  opened = 0;
  closed = 0;
  emit: ((p: Uint8Array[]) => void) | null = null;
  async open(_t: PlacementTarget, onPackets: (p: Uint8Array[]) => void): Promise<PlacementLink> {
    this.opened++;
    this.emit = onPackets;
    const self = this;
    return {
      write: (p) => (self.written.push(p.slice()), true),
      configure: async (f) => void self.flows.push([...f]),
      close: async () => void (self.closed++, (self.emit = null)),
      stats: () => ({ packetsIn: self.written.length, packetsOut: 0, writesDropped: 0 }),
    };
  }
}

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A connector that records every connect and hands out links that stay open until closed. */
function recordingConnector() {
  const connects: Array<{ relayId: string; tokenGrant: string; role: string; issuedAtMs: number; closed: boolean }> =
    [];
  const connector: RelayConnector = async (entry, token) => {
    const rec = {
      relayId: entry.relayId,
      tokenGrant: token.payload.grantId,
      role: token.payload.role,
      issuedAtMs: token.payload.issuedAtMs,
      closed: false,
    };
    connects.push(rec);
    let end!: (c: { code: string | null; closeCode: number }) => void;
    return {
      paired: false,
      closed: new Promise((r) => (end = r)),
      send: () => true,
      close: () => ((rec.closed = true), end({ code: null, closeCode: 1000 })),
    };
  };
  return { connector, connects };
}

async function setup(generation = 3, relayConnector?: RelayConnector) {
  const hostKey = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
  const links = new RecordingLinks();
  const allocationId = testId("alloc");
  let placement: PlacementTarget | null = {
    allocationId,
    generation,
    netns: "bb-test",
    table: "bb_test",
    tap: "bbtap0",
  };
  let changes = 0;
  const ep = await HostEndpoint.start({
    hostId: "host-1",
    keyPair: hostKey,
    verificationKeys: issuer.verificationKeys(),
    listen: { hostname: "127.0.0.1", port: 0 },
    stunServers: [],
    clock: systemSuspendAwareClock,
    random: systemRandom,
    aead,
    placements: { byAllocation: (id) => (id === allocationId ? placement : null) },
    links,
    interfaces: () => ({}),
    ...(relayConnector ? { relayConnector } : {}),
    onChange: () => void changes++,
  });
  cleanups.push(() => ep.close());
  const clientKey = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
  const got: Uint8Array[] = [];
  let sock!: SharedSocket;
  const client = new MultipathDevice({
    privateKey: clientKey.privateKey,
    clock: systemSuspendAwareClock,
    random: systemRandom,
    aead,
    io: { sendUdp: (d, a, p) => sock.sendUdp(d, a, p), sendRelay: () => false },
    deliver: (p) => got.push(p.slice()),
  });
  sock = await openSharedSocket({
    hostname: "127.0.0.1",
    port: 0,
    random: systemRandom,
    onWireGuard: (d, from) => client.receive(d, from),
  });
  cleanups.push(() => sock.close());
  const { peer, selector } = client.addPeer({ publicKey: hostKey.publicKey, allowedIps: ["fd00:1:2:3::/64"] });
  selector.setCandidates([{ address: "127.0.0.1", port: ep.port }]);
  const b64 = (k: Uint8Array) => Buffer.from(k).toString("base64");
  const grantFor = (over: Partial<Parameters<TestGrantIssuer["grant"]>[0]> = {}, ttlMs = 60_000): SignedGrant =>
    issuer.grant(
      {
        allocationId,
        generation,
        hostId: "host-1",
        hostPublicKey: b64(hostKey.publicKey),
        clientPublicKey: b64(clientKey.publicKey),
        clientAddress: CLIENT,
        allocationAddress: ALLOC,
        ports: [22],
        ...over,
      },
      Date.now(),
      ttlMs,
    );
  const apply = (grant: SignedGrant, grantId = grant.payload.grantId): Promise<unknown> =>
    ep.configure({
      commandId: `${grantId}:apply`,
      type: "configure_connection",
      action: "apply",
      grantId,
      grant,
    } as ConfigureConnection);
  const until = async (what: string, f: () => boolean, ms = 5000) => {
    for (let t = 0; t < ms / 10 && !f(); t++) await Bun.sleep(10);
    if (!f()) throw new Error(`timed out waiting for ${what}`);
  };
  const setPlacement = (p: PlacementTarget | null) => void (placement = p);
  return {
    ep,
    links,
    client,
    peer,
    got,
    grantFor,
    apply,
    until,
    changes: () => changes,
    allocationId,
    setPlacement,
    clientPort: sock.port,
    configure: (c: ConfigureConnection) => ep.configure(c),
  };
}

describe("host endpoint", () => {
  test("an applied grant carries the exact flow both ways; other ports, addresses and unsolicited replies are refused and counted", async () => {
    const s = await setup();
    const grant = s.grantFor();
    expect(await s.apply(grant)).toEqual({ ok: true });
    expect(s.links.flows.at(-1)).toEqual([grant.payload]);
    s.client.device.sendPacket(tcp(CLIENT, ALLOC, 40000, 22, 1));
    await s.until("the packet in the placement", () => s.links.written.length === 1);
    expect(s.links.written[0]![59]).toBe(1);
    s.links.emit!([tcp(ALLOC, CLIENT, 22, 40000, 2)]);
    await s.until("the reply at the client", () => s.got.length === 1);
    expect(s.got[0]![59]).toBe(2);
    // Refused: another port, another destination, a spoofed source (by WireGuard's allowed IPs), an unsolicited flow from the guest.
    s.client.device.sendPacket(tcp(CLIENT, ALLOC, 40001, 23));
    s.client.device.sendPacket(tcp(CLIENT, "fd00:1:2:3::99", 40001, 22));
    s.client.device.sendPacket(tcp("fd00:1:2:3::11", ALLOC, 40001, 22));
    s.links.emit!([tcp(ALLOC, CLIENT, 22, 40005), tcp(ALLOC, CLIENT, 23, 40000)]);
    await s.until(
      "the refusals",
      () => s.ep.stats().device.drops["source-not-allowed"] === 1 && s.ep.stats().grants[0]!.filter.drops.port >= 2,
    );
    const st = s.ep.stats().grants[0]!;
    expect(st.filter.drops.port).toBe(2);
    expect(st.filter.drops.destination).toBe(1);
    expect(st.filter.drops["no-flow"]).toBe(1);
    expect(st.path.path).toBe("direct");
    expect(s.links.written.length).toBe(1);
    expect(s.got.length).toBe(1);
    const c = s.ep.connectivity();
    expect(c.appliedGrants).toEqual([
      expect.objectContaining({ grantId: grant.payload.grantId, generation: 3, path: "direct" }),
    ]);
    expect(c.hostPublicKey).toBe(s.ep.publicKey);
    expect(JSON.stringify(c)).not.toContain(Buffer.from(s.ep["o"].keyPair.privateKey).toString("base64"));
  });

  test("grants are refused with stable codes and nothing applied: tampered, another host, another host key, stale or newer generation, unknown allocation, expired, revoked, mismatched grant ID", async () => {
    const s = await setup(3);
    const g = s.grantFor();
    const tampered = { ...g, payload: { ...g.payload, ports: [22, 23] } };
    const cases: Array<[SignedGrant, string, string?]> = [
      [tampered, "GRANT_SIGNATURE_INVALID"],
      [s.grantFor({ hostId: "host-2" }), "GRANT_MISMATCH"],
      [s.grantFor({ hostPublicKey: Buffer.alloc(32, 7).toString("base64") }), "GRANT_MISMATCH"],
      [s.grantFor({ generation: 2 }), "STALE_GENERATION"],
      [s.grantFor({ generation: 4 }), "GRANT_MISMATCH"],
      [s.grantFor({ allocationId: testId("alloc") }), "UNKNOWN_PLACEMENT"],
      [issuer.grant({ ...g.payload, ports: [22] }, Date.now() - 120_000, 60_000), "GRANT_EXPIRED"],
      [g, "GRANT_MISMATCH", testId("grt")],
    ];
    for (const [grant, code, id] of cases) {
      const r = (await s.apply(grant, id)) as { ok: boolean; code?: string };
      expect(r.ok ? "ok" : r.code, code).toBe(code);
    }
    expect(s.links.opened).toBe(0);
    expect(s.ep.connectivity().appliedGrants).toEqual([]);
    expect(s.ep.connectivity().refusedGrants.map((r) => r.code)).toContain("GRANT_SIGNATURE_INVALID");
    await s.ep.configure({
      commandId: "x",
      type: "configure_connection",
      action: "revoke",
      grantId: g.payload.grantId,
    });
    expect(await s.apply(g)).toEqual(expect.objectContaining({ ok: false, code: "GRANT_REVOKED" }));
  });

  test("a revoke removes the peer and closes the placement link; an expired grant is removed without a command", async () => {
    const s = await setup();
    const g1 = s.grantFor();
    expect(await s.apply(g1)).toEqual({ ok: true });
    await s.ep.configure({
      commandId: "r",
      type: "configure_connection",
      action: "revoke",
      grantId: g1.payload.grantId,
    });
    expect(s.ep.connectivity().appliedGrants).toEqual([]);
    expect(s.links.closed).toBe(1);
    const g2 = s.grantFor({}, 1_500);
    expect(await s.apply(g2)).toEqual({ ok: true });
    s.client.device.sendPacket(tcp(CLIENT, ALLOC, 40000, 22));
    await s.until("the packet in the placement", () => s.links.written.length === 1);
    await s.until("expiry", () => s.ep.connectivity().appliedGrants.length === 0, 4_000);
    expect(s.links.closed).toBe(2);
    s.client.device.sendPacket(tcp(CLIENT, ALLOC, 40000, 22));
    await Bun.sleep(200);
    expect(s.links.written.length).toBe(1);
  });

  test("prune drops the grants of a placement that was replaced or removed here, and keeps the others", async () => {
    const s = await setup(3);
    const g = s.grantFor();
    expect(await s.apply(g)).toEqual({ ok: true });
    await s.ep.prune();
    expect(s.ep.connectivity().appliedGrants.map((a) => a.grantId)).toEqual([g.payload.grantId]);
    const before = s.changes();
    s.setPlacement({
      allocationId: s.allocationId,
      generation: 4,
      netns: "bb-test2",
      table: "bb_test2",
      tap: "bbtap0",
    });
    await s.ep.prune();
    expect(s.ep.connectivity().appliedGrants).toEqual([]);
    expect(s.links.closed).toBe(1);
    expect(s.changes()).toBeGreaterThan(before);
    s.client.device.sendPacket(tcp(CLIENT, ALLOC, 40000, 22));
    await Bun.sleep(200);
    expect(s.links.written.length).toBe(0);
    // Removed entirely: a new grant for the old generation is refused.
    s.setPlacement(null);
    expect(await s.apply(s.grantFor())).toEqual(expect.objectContaining({ ok: false, code: "UNKNOWN_PLACEMENT" }));
  });

  test("relays: a session per relay whose map and host-role token verify (others counted, not used); a redelivery re-tokens without reconnecting; revoke and expiry close them", async () => {
    const rc = recordingConnector();
    const s = await setup(3, rc.connector);
    const now = Date.now();
    const relays = [
      { relayId: "relay-a", url: "wss://a.example/v1/relay" },
      { relayId: "relay-b", url: "wss://b.example/v1/relay" },
      { relayId: "relay-c", url: "wss://c.example/v1/relay" },
    ];
    const map = issuer.relayMap(relays, now, 60_000);
    const g = s.grantFor();
    const id = g.payload.grantId;
    const cmd = (
      tokens: Record<string, ReturnType<TestGrantIssuer["relayToken"]>>,
      relayMap = map,
    ): ConfigureConnection => ({
      commandId: `${id}:apply`,
      type: "configure_connection",
      action: "apply",
      grantId: id,
      grant: g,
      relayMap,
      relayTokens: tokens,
    });
    // relay-b's token is the client's role, relay-c's is for another grant: neither is used.
    expect(
      await s.configure(
        cmd({
          "relay-a": issuer.relayToken("relay-a", id, "host", now, 60_000),
          "relay-b": issuer.relayToken("relay-b", id, "client", now, 60_000),
          "relay-c": issuer.relayToken("relay-c", testId("grt"), "host", now, 60_000),
        }),
      ),
    ).toEqual({ ok: true });
    await s.until("the relay session", () => rc.connects.length === 1);
    expect(rc.connects).toEqual([
      expect.objectContaining({ relayId: "relay-a", tokenGrant: id, role: "host", closed: false }),
    ]);
    expect(s.ep.stats().grants[0]!.relaysRejected).toBe(2);
    expect(s.ep.stats().relays).toEqual([
      expect.objectContaining({ pathId: `relay-a/${id}`, relayId: "relay-a", state: "open" }),
    ]);
    // A redelivery carries fresh tokens: the session keeps running.
    expect(await s.configure(cmd({ "relay-a": issuer.relayToken("relay-a", id, "host", now + 1, 60_000) }))).toEqual({
      ok: true,
    });
    expect(rc.connects.length).toBe(1);
    // A relay map that does not verify is not used at all.
    const g2 = s.grantFor(
      { clientAddress: "fd00:1:2:3::11", clientPublicKey: Buffer.alloc(32, 9).toString("base64") },
      1_500,
    );
    const tamperedMap = {
      ...map,
      payload: { ...map.payload, relays: [{ relayId: "relay-a", url: "wss://evil.example/v1/relay" }] },
    };
    const id2 = g2.payload.grantId;
    expect(
      await s.configure({
        commandId: `${id2}:apply`,
        type: "configure_connection",
        action: "apply",
        grantId: id2,
        grant: g2,
        relayMap: tamperedMap,
        relayTokens: { "relay-a": issuer.relayToken("relay-a", id2, "host", now, 60_000) },
      }),
    ).toEqual({ ok: true });
    expect(s.ep.stats().grants.find((x) => x.grantId === id2)!.relaysRejected).toBe(1);
    expect(rc.connects.length).toBe(1);
    await s.ep.configure({ commandId: `${id}:revoke`, type: "configure_connection", action: "revoke", grantId: id });
    expect(rc.connects[0]!.closed).toBe(true);
    expect(s.ep.stats().relays).toEqual([]);
    // Expiry closes a grant's sessions too.
    const g3 = s.grantFor({}, 1_500);
    const id3 = g3.payload.grantId;
    expect(
      await s.configure({
        commandId: `${id3}:apply`,
        type: "configure_connection",
        action: "apply",
        grantId: id3,
        grant: g3,
        relayMap: map,
        relayTokens: { "relay-a": issuer.relayToken("relay-a", id3, "host", now, 60_000) },
      }),
    ).toEqual({ ok: true });
    await s.until("the second session", () => rc.connects.length === 2);
    await s.until("expiry", () => s.ep.connectivity().appliedGrants.every((a) => a.grantId !== id3), 4_000);
    expect(rc.connects[1]!.closed).toBe(true);
    expect(s.ep.stats().relays).toEqual([]);
  });

  test("the client's candidates in a repeated apply: the host sends a handshake initiation to them (hole punching) and the session comes up without the client initiating", async () => {
    const s = await setup();
    const grant = s.grantFor();
    expect(await s.apply(grant)).toEqual({ ok: true });
    await Bun.sleep(200);
    // Without candidates the host has nowhere to send: it waits for the client.
    expect(s.ep.stats().device.initiationsSent).toBe(0);
    const withCandidates = {
      commandId: `${grant.payload.grantId}:apply`,
      type: "configure_connection",
      action: "apply",
      grantId: grant.payload.grantId,
      grant,
      clientCandidates: [{ address: "127.0.0.1", port: s.clientPort, kind: "local" }],
    } as ConfigureConnection;
    expect(await s.ep.configure(withCandidates)).toEqual({ ok: true });
    await s.until("the host's handshake with the client", () => s.ep.stats().device.handshakesCompleted === 1);
    expect(s.ep.stats().device.initiationsSent).toBeGreaterThanOrEqual(1);
    expect(s.client.device.counters.initiationsSent).toBe(0);
    expect(s.ep.stats().grants).toHaveLength(1);
  });
});
