/**
 * ClientTunnel's relay sessions take fresh tokens (src/proxy/relayTokenRefresh.ts
 * hands them over with setRelayTokens): a session the relay refused with
 * RELAY_TOKEN_EXPIRED stops, and the fresh token starts it again. The relay
 * is a connector double (the real relay and client run in
 * test/integration/proxy-netns.test.ts); loopback UDP only.
 */
import { afterEach, expect, test } from "bun:test";
import { TestGrantIssuer, testId } from "../../test/support/grantIssuer.ts";
import type { RelayEntry, SignedRelayToken } from "../protocol/connection.ts";
import {
  keyPairFromPrivate,
  selectAead,
  systemSuspendAwareClock,
  systemRandom,
  type RelayConnector,
  type RelaySessionInfo,
} from "../wireguard/index.ts";
import type { VerifiedGrant } from "./grant.ts";
import { ClientTunnel } from "./tunnel.ts";

const issuer = new TestGrantIssuer();
const { aead } = await selectAead();
const tunnels: ClientTunnel[] = [];
afterEach(() => tunnels.splice(0).forEach((t) => t.close()));

test("a session refused RELAY_TOKEN_EXPIRED stops; setRelayTokens starts it again with the fresh token", async () => {
  const now = Date.now();
  const grantId = testId("grt");
  const entry: RelayEntry = { relayId: "relay-1", url: "wss://relay-1.example:443/v1/relay" };
  const host = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
  const signed = issuer.grant(
    {
      allocationId: testId("alloc"),
      generation: 1,
      hostId: "host-1",
      hostPublicKey: Buffer.from(host.publicKey).toString("base64"),
      clientPublicKey: Buffer.alloc(32, 1).toString("base64"),
      clientAddress: "fd00:bb:1:2::c:1",
      allocationAddress: "fd00:bb:1:2::2",
      transport: "tcp",
      ports: [22],
    },
    now,
    600_000,
  );
  const grant = signed.payload;
  const stale = issuer.relayToken("relay-1", grantId, "client", now - 200_000, 120_000);
  const fresh = issuer.relayToken("relay-1", grantId, "client", now, 120_000);
  const presented: SignedRelayToken[] = [];
  // The relay double refuses an expired token as the real one does, and admits a live one.
  const connector: RelayConnector = async (_e, token) => {
    presented.push(token);
    if (token.payload.expiresAtMs <= Date.now())
      throw Object.assign(new Error("refused"), { close: { code: "RELAY_TOKEN_EXPIRED" } });
    return { paired: false, closed: new Promise(() => {}), send: () => true, close: () => {} };
  };
  const changes: RelaySessionInfo[] = [];
  const verified: VerifiedGrant = {
    grant,
    signed,
    relays: [{ entry, token: stale }],
    hostCandidates: [],
    stunServers: [],
    connectionId: testId("con"),
    endpointToken: "bbx_" + "0".repeat(64),
  };
  const t = await ClientTunnel.start({
    keyPair: keyPairFromPrivate(systemRandom.fill(new Uint8Array(32))),
    grant: verified,
    aead,
    clock: systemSuspendAwareClock,
    random: systemRandom,
    relayConnector: connector,
    onRelayChange: (i) => changes.push(i),
  });
  tunnels.push(t);
  for (let i = 0; i < 100 && !changes.some((c) => c.state === "stopped"); i++) await Bun.sleep(10);
  expect(changes.at(-1)).toMatchObject({ relayId: "relay-1", state: "stopped", lastCode: "RELAY_TOKEN_EXPIRED" });
  t.setRelayTokens([{ entry, token: fresh }]);
  for (let i = 0; i < 100 && changes.at(-1)?.state !== "open"; i++) await Bun.sleep(10);
  expect(changes.at(-1)).toMatchObject({ relayId: "relay-1", state: "open" });
  expect(presented).toEqual([stale, fresh]);
  expect(t.stats().relays).toEqual([expect.objectContaining({ relayId: "relay-1", state: "open", connects: 2 })]);
});
