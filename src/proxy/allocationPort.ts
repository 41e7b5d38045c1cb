/**
 * One in-process path to one TCP port inside a private allocation (spec
 * "Data path", steps 1–6; issue 20 "Exec and files"), shared by `bb proxy`
 * (./session.ts) and the coming `bb exec` and `bb cp` (./controlChannel.ts):
 * an ephemeral X25519 key pair in memory; a grant for that one port
 * requested and every signature verified; the userspace WireGuard tunnel
 * and netstack started (direct and relay paths: ./tunnel.ts) and its
 * candidates (local, and STUN-discovered from the deployment's STUN servers
 * of the grant response, on the tunnel's socket) posted to the grant's
 * Connection and refreshed while no direct path is confirmed
 * (./candidateRefresh.ts); the relay tokens renewed before they expire
 * (./relayTokenRefresh.ts); a loopback port bound whose every connection is
 * joined to [allocationAddress]:remotePort (./forwarder.ts); then watched
 * until it must end; the grant revoked by close(), and on every failure to
 * open.
 *
 * The session ends with a stable code (src/protocol/errors.ts), reported by
 * `ended`: GRANT_EXPIRED at the grant's expiry (the host drops the peer at
 * the same moment; checked on the wall clock, so also after a suspend,
 * ./grantExpiry.ts), INVALID_STATE when the allocation was released or
 * failed, STALE_GENERATION when it moved to another generation (a grant
 * never spans a replacement). Opening rejects with the scheduler's own code
 * when it refuses the grant, or a verification code, before anything is
 * bound.
 * Owns: the order of start and teardown. Must never: write the private key
 * anywhere, bind anything but loopback, or end without trying to revoke.
 */
import { networkInterfaces, type NetworkInterfaceInfo } from "node:os";
import type { SchedulerClient } from "../client/index.ts";
import { grantHeaderValue } from "../client/control.ts";
import type { Clock } from "../protocol/clock.ts";
import type { SignedGrant } from "../protocol/connection.ts";
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
import { CandidateRefresh } from "./candidateRefresh.ts";
import { startForwarder, type Forwarder } from "./forwarder.ts";
import { requestGrant, type VerifiedGrant } from "./grant.ts";
import { GrantExpiry } from "./grantExpiry.ts";
import { RelayTokenRefresh } from "./relayTokenRefresh.ts";
import { announceCandidates, fetchRelayTokens } from "./rendezvous.ts";
import { ClientTunnel } from "./tunnel.ts";

/** How often the allocation is checked for release or replacement, ms. */
export const WATCH_INTERVAL_MS = 10_000;
/** How long revocation on close may take, ms. */
export const REVOKE_TIMEOUT_MS = 5_000;
/** The loopback address the local port is bound on. */
export const LOCAL_HOST = "127.0.0.1";

/** Everything opening a port needs (ports for every side effect). */
export interface AllocationPortOptions {
  client: SchedulerClient;
  allocationId: string;
  /** The TCP port inside the allocation (the grant allows exactly this one). */
  remotePort: number;
  /** Loopback port to bind at 127.0.0.1 (absent or 0: an ephemeral one, read back from `port`). */
  localPort?: number;
  keys: ConnectionVerificationKeys;
  ttlSeconds?: number;
  clock: Clock;
  random: WgRandom;
  aead: Aead;
  /** Opens relay sessions for the grant's relay map (src/relayclient relayConnector); without it relays are not used. */
  relayConnector?: RelayConnector;
  /** Human progress lines (stderr): path changes, relay sessions, candidates, failed inner connections. */
  log: (line: string) => void;
  /** Called with every path change (the same events as the `path:` lines). */
  onPathChange?: (s: PathState) => void;
  watchIntervalMs?: number;
  /** Called with the refresher once it exists (tests read its posts). */
  onCandidates?: (refresh: CandidateRefresh) => void;
  /** The interface list the candidates come from (os.networkInterfaces by default). */
  interfaces?: () => NodeJS.Dict<NetworkInterfaceInfo[]>;
  /** The command a user runs again for a new grant, named in the ending errors (default "bb proxy"). */
  rerunHint?: string;
}

/** An open path to one port inside an allocation. */
export interface AllocationPort {
  /** Loopback address of the local end (LOCAL_HOST). */
  readonly host: string;
  /** The bound local port. */
  readonly port: number;
  /** The verified grant response (grant payload, relays, candidates). */
  readonly grant: VerifiedGrant;
  /** The signed grant document as the scheduler signed it. */
  readonly signedGrant: SignedGrant;
  /** `beachball-grant` header value: base64url of the signed grant's canonical JSON (grantHeaderValue, src/client/control.ts). */
  readonly grantHeader: string;
  /**
   * Settles once the session can no longer go on: with the BeachballError
   * that ended it (GRANT_EXPIRED, INVALID_STATE, STALE_GENERATION), or null
   * after close(). Never rejects.
   */
  readonly ended: Promise<BeachballError | null>;
  /** The tunnel's current path (direct, relay or none). */
  path(): PathState;
  /** Ends every connection, the listener and the tunnel, and revokes the grant (logs when it cannot). Idempotent. */
  close(): Promise<void>;
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

/** The parts a session owns, torn down in reverse order of start. */
interface Parts {
  tunnel: ClientTunnel | null;
  forwarder: Forwarder | null;
  candidates: CandidateRefresh | null;
  relayTokens: RelayTokenRefresh | null;
  timer: ReturnType<typeof setTimeout> | null;
}

/**
 * Opens the path (see the module header). Resolves once the local port is
 * bound; rejects (after revoking a grant it obtained) when the grant is
 * refused or fails verification, or the tunnel or the port cannot start.
 */
export async function openAllocationPort(o: AllocationPortOptions): Promise<AllocationPort> {
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
  const parts: Parts = { tunnel: null, forwarder: null, candidates: null, relayTokens: null, timer: null };
  let closing: Promise<void> | null = null;
  let settle: (e: BeachballError | null) => void = () => {};
  const ended = new Promise<BeachballError | null>((resolve) => {
    settle = resolve;
  });
  const close = () => {
    closing ??= teardown(o, verified, parts).finally(() => settle(null));
    return closing;
  };
  try {
    await startParts(o, keyPair, verified, parts);
  } catch (e) {
    await close();
    throw e;
  }
  const t = parts.tunnel!;
  const end = (e: BeachballError) => settle(e);
  const rerun = o.rerunHint ?? "bb proxy";
  t.addOwner(
    new GrantExpiry(g.expiresAtMs, o.clock, () =>
      end(
        new BeachballError(
          "GRANT_EXPIRED",
          `grant ${g.grantId} expired at ${new Date(g.expiresAtMs).toISOString()}; run ${rerun} again for a new one`,
        ),
      ),
    ),
  );
  const watch = async () => {
    parts.timer = null;
    if (closing) return;
    try {
      const v = await o.client.get(o.allocationId);
      if (v.state === "released" || v.state === "failed")
        return end(new BeachballError("INVALID_STATE", `allocation ${o.allocationId} is ${v.state}`));
      if (v.generation !== g.generation)
        return end(
          new BeachballError(
            "STALE_GENERATION",
            `allocation ${o.allocationId} moved to generation ${v.generation}; this grant was for generation ${g.generation}: run ${rerun} again`,
          ),
        );
    } catch (e) {
      if (e instanceof BeachballError && e.code === "NOT_FOUND")
        return end(new BeachballError("INVALID_STATE", `allocation ${o.allocationId} no longer exists`));
      // The scheduler is unreachable: keep going; the grant's expiry bounds the session.
    }
    if (!closing) parts.timer = setTimeout(watch, o.watchIntervalMs ?? WATCH_INTERVAL_MS);
  };
  // The first check runs at once: a grant for a generation that is already gone ends the session now, not a watch interval later.
  parts.timer = setTimeout(watch, 0);
  return {
    host: LOCAL_HOST,
    port: parts.forwarder!.port,
    grant: verified,
    signedGrant: verified.signed,
    grantHeader: grantHeaderValue(verified.signed),
    ended,
    path: () => t.path(),
    close,
  };
}

/** Starts the tunnel, the candidate and relay-token refreshers and the forwarder into `parts` (each recorded as soon as it exists, for teardown). */
async function startParts(
  o: AllocationPortOptions,
  keyPair: ReturnType<typeof keyPairFromPrivate>,
  verified: VerifiedGrant,
  parts: Parts,
): Promise<void> {
  const g = verified.grant;
  let interfaceError = "";
  parts.tunnel = await ClientTunnel.start({
    keyPair,
    grant: verified,
    aead: o.aead,
    clock: o.clock,
    random: o.random,
    ...(o.relayConnector ? { relayConnector: o.relayConnector } : {}),
    onPathChange: (s) => {
      o.log(`path: ${describePath(s)}`);
      o.onPathChange?.(s);
    },
    onRelayChange: (i) => o.log(describeRelay(i)),
  });
  const t = parts.tunnel;
  // Best effort: without them the host still learns this client by roaming.
  parts.candidates = new CandidateRefresh({
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
  t.addOwner(parts.candidates);
  o.onCandidates?.(parts.candidates);
  void parts.candidates.refresh();
  if (o.relayConnector && verified.relays.length) {
    parts.relayTokens = new RelayTokenRefresh({
      grant: verified,
      keys: o.keys,
      fetch: () => fetchRelayTokens(o.client.baseUrl, verified),
      apply: (relays) => t.setRelayTokens(relays),
      clock: o.clock,
      log: o.log,
      onSettled: () => t.rearm(),
    });
    t.addOwner(parts.relayTokens);
  }
  parts.forwarder = await startForwarder({
    host: LOCAL_HOST,
    port: o.localPort ?? 0,
    connect: () => t.connect(o.remotePort),
    onConnectError: (m) => o.log(`inner connection to [${g.allocationAddress}]:${o.remotePort} failed: ${m}`),
  });
}

/** Stops everything in `parts` and revokes the grant (a failure to revoke is logged: the grant then ends at its expiry). */
async function teardown(o: AllocationPortOptions, verified: VerifiedGrant, parts: Parts): Promise<void> {
  const g = verified.grant;
  if (parts.timer) clearTimeout(parts.timer);
  parts.timer = null;
  await parts.forwarder?.close().catch(() => {});
  parts.candidates?.close();
  parts.relayTokens?.close();
  parts.tunnel?.close();
  try {
    await o.client.revokeConnectionGrant(o.allocationId, g.grantId, REVOKE_TIMEOUT_MS);
    o.log(`grant ${g.grantId} revoked`);
  } catch (e) {
    o.log(
      `could not revoke grant ${g.grantId} (${(e as Error).message}); it expires at ${new Date(g.expiresAtMs).toISOString()}`,
    );
  }
}
