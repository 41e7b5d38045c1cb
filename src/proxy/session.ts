/**
 * One `bb proxy` run (spec "Data path", steps 1–6): an ephemeral X25519 key
 * pair in memory; the grant requested and every signature verified; the
 * tunnel started and its candidates (local, and STUN-discovered from the
 * deployment's STUN servers of the grant response, on the tunnel's socket)
 * posted to the grant's Connection and refreshed while no direct path is
 * confirmed (./candidateRefresh.ts); the relay tokens renewed before they
 * expire (./relayTokenRefresh.ts); 127.0.0.1:<local port> bound; then watched until it must
 * end; the grant revoked on every exit.
 *
 * Ends with a stable code (src/protocol/errors.ts) when the session cannot go
 * on: GRANT_EXPIRED at the grant's expiry (the host drops the peer at the
 * same moment; checked on the wall clock, so also after a suspend, ./grantExpiry.ts), INVALID_STATE when the allocation was released or failed,
 * STALE_GENERATION when it moved to another generation (a grant never spans
 * a replacement); the scheduler's own code when it refuses the grant.
 * Owns: the order of start and teardown. Must never: write the private key
 * anywhere, bind anything but loopback, or exit without trying to revoke.
 */
import { networkInterfaces, type NetworkInterfaceInfo } from "node:os";
import type { SchedulerClient } from "../client/index.ts";
import type { ConnectionVerificationKeys } from "../protocol/connectionSignature.ts";
import { BeachballError } from "../protocol/errors.ts";
import {
  gatherCandidates,
  interfaceAddresses,
  keyPairFromPrivate,
  type Aead,
  type PathState,
  type RelayConnector,
  type RelaySessionInfo,
  type WgRandom,
} from "../wireguard/index.ts";
import { startForwarder, type Forwarder } from "./forwarder.ts";
import { requestGrant, type VerifiedGrant } from "./grant.ts";
import { CandidateRefresh } from "./candidateRefresh.ts";
import { RelayTokenRefresh } from "./relayTokenRefresh.ts";
import { announceCandidates, fetchRelayTokens } from "./rendezvous.ts";
import { ClientTunnel } from "./tunnel.ts";
import { GrantExpiry } from "./grantExpiry.ts";
import type { Clock } from "../protocol/clock.ts";

/** How often the allocation is checked for release or replacement, ms. */
export const WATCH_INTERVAL_MS = 10_000;
/** How long revocation on exit may take, ms. */
export const REVOKE_TIMEOUT_MS = 5_000;

/** Everything a run needs (ports for every side effect). */
export interface ProxyOptions {
  client: SchedulerClient;
  allocationId: string;
  localPort: number;
  remotePort: number;
  keys: ConnectionVerificationKeys;
  ttlSeconds?: number;
  clock: Clock;
  random: WgRandom;
  aead: Aead;
  /** Opens relay sessions for the grant's relay map (src/relayclient relayConnector); without it relays are not used. */
  relayConnector?: RelayConnector;
  /** Human progress lines (stderr). */
  log: (line: string) => void;
  watchIntervalMs?: number;
  /** Called with the refresher once it exists (tests read its posts). */
  onCandidates?: (refresh: CandidateRefresh) => void;
  /** The interface list this proxy's candidates come from (os.networkInterfaces by default). */
  interfaces?: () => NodeJS.Dict<NetworkInterfaceInfo[]>;
  /** Called once the local port is bound (tests read the port and grant here). */
  onReady?: (info: { port: number; grant: VerifiedGrant }) => void;
}

/** The `path:` line's text (docs/connect.md): the path, and a direct path lost since the last pin. */
export function describePath(s: PathState): string {
  if (s.path === "direct") return `direct via ${s.direct}`;
  const lost = s.lost ? ` (direct via ${s.lost} lost)` : "";
  return s.path === "relay" ? `relay ${s.relay}${lost}` : s.lost ? `none${lost}` : "no path yet";
}

function describeRelay(i: RelaySessionInfo): string {
  const why = i.lastCode ? ` (${i.lastCode})` : "";
  return i.state === "open"
    ? `relay ${i.relayId}: session open${i.paired ? ", paired" : ""}`
    : i.state === "stopped"
      ? `relay ${i.relayId}: refused${why}; not retrying with this token`
      : `relay ${i.relayId}: ${i.state}${why}`;
}

/**
 * Runs until `signal` aborts (resolves after revoking) or the session must
 * end (rejects with a BeachballError, after revoking). Rejects before
 * binding anything when the grant is refused or fails verification.
 */
export async function runProxy(o: ProxyOptions, signal: AbortSignal): Promise<void> {
  const keyPair = keyPairFromPrivate(o.random.fill(new Uint8Array(32)));
  const clientPublicKey = Buffer.from(keyPair.publicKey).toString("base64");
  const verified = await requestGrant(
    o.client,
    { allocationId: o.allocationId, clientPublicKey, transport: "tcp", port: o.remotePort },
    o.keys,
    o.ttlSeconds,
    o.clock,
  );
  const g = verified.grant;
  let tunnel: ClientTunnel | null = null;
  let forwarder: Forwarder | null = null;
  let candidates: CandidateRefresh | null = null;
  let relayTokens: RelayTokenRefresh | null = null;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let interfaceError = "";
  try {
    tunnel = await ClientTunnel.start({
      keyPair,
      grant: verified,
      aead: o.aead,
      clock: o.clock,
      random: o.random,
      ...(o.relayConnector ? { relayConnector: o.relayConnector } : {}),
      onPathChange: (s) => o.log(`path: ${describePath(s)}`),
      onRelayChange: (i) => o.log(describeRelay(i)),
    });
    const t = tunnel;
    // Best effort: without them the host still learns this proxy by roaming.
    candidates = new CandidateRefresh({
      gather: () => {
        const interfaces = interfaceAddresses(o.interfaces ?? networkInterfaces, (message) => {
          if (message !== interfaceError) o.log(message);
          interfaceError = message;
        });
        return gatherCandidates(t.socket(), "0.0.0.0", interfaces, verified.stunServers);
      },
      post: (seq, list) => announceCandidates(o.client.baseUrl, verified, list, seq),
      directConfirmed: () => t.path().path === "direct",
      clock: o.clock,
      log: o.log,
    });
    t.addOwner(candidates);
    o.onCandidates?.(candidates);
    void candidates.refresh();
    if (o.relayConnector && verified.relays.length) {
      relayTokens = new RelayTokenRefresh({
        grant: verified,
        keys: o.keys,
        fetch: () => fetchRelayTokens(o.client.baseUrl, verified),
        apply: (relays) => t.setRelayTokens(relays),
        clock: o.clock,
        log: o.log,
        onSettled: () => t.rearm(),
      });
      t.addOwner(relayTokens);
    }
    forwarder = await startForwarder({
      port: o.localPort,
      connect: () => t.connect(o.remotePort),
      onConnectError: (m) => o.log(`inner connection to [${g.allocationAddress}]:${o.remotePort} failed: ${m}`),
    });
    o.log(
      `listening on 127.0.0.1:${forwarder.port} → [${g.allocationAddress}]:${o.remotePort} on ${g.hostId} (grant ${g.grantId}, generation ${g.generation}, expires ${new Date(g.expiresAtMs).toISOString()})`,
    );
    o.onReady?.({ port: forwarder.port, grant: verified });
    await new Promise<void>((resolve, reject) => {
      if (signal.aborted) return resolve();
      signal.addEventListener("abort", () => resolve(), { once: true });
      t.addOwner(
        new GrantExpiry(g.expiresAtMs, o.clock, () =>
          reject(
            new BeachballError(
              "GRANT_EXPIRED",
              `grant ${g.grantId} expired at ${new Date(g.expiresAtMs).toISOString()}; run bb proxy again for a new one`,
            ),
          ),
        ),
      );
      const watch = async () => {
        timer = null;
        try {
          const v = await o.client.get(o.allocationId);
          if (v.state === "released" || v.state === "failed")
            return reject(new BeachballError("INVALID_STATE", `allocation ${o.allocationId} is ${v.state}`));
          if (v.generation !== g.generation)
            return reject(
              new BeachballError(
                "STALE_GENERATION",
                `allocation ${o.allocationId} moved to generation ${v.generation}; this grant was for generation ${g.generation}: run bb proxy again`,
              ),
            );
        } catch (e) {
          if (e instanceof BeachballError && e.code === "NOT_FOUND")
            return reject(new BeachballError("INVALID_STATE", `allocation ${o.allocationId} no longer exists`));
          // The scheduler is unreachable: keep going; the grant's expiry bounds the session.
        }
        if (!signal.aborted) timer = setTimeout(watch, o.watchIntervalMs ?? WATCH_INTERVAL_MS);
      };
      // The first check runs at once: a grant for a generation that is already gone ends the run now, not a watch interval later.
      timer = setTimeout(watch, 0);
    });
  } finally {
    if (timer) clearTimeout(timer);
    await forwarder?.close().catch(() => {});
    candidates?.close();
    relayTokens?.close();
    tunnel?.close();
    try {
      await o.client.revokeConnectionGrant(o.allocationId, g.grantId, REVOKE_TIMEOUT_MS);
      o.log(`grant ${g.grantId} revoked`);
    } catch (e) {
      o.log(
        `could not revoke grant ${g.grantId} (${(e as Error).message}); it expires at ${new Date(g.expiresAtMs).toISOString()}`,
      );
    }
  }
}
