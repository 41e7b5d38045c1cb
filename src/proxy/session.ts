/**
 * One `bb proxy` run (spec "Data path", steps 1–6): the path to the remote
 * port opened by ./allocationPort.ts (grant requested and verified, tunnel,
 * candidates, relay tokens, 127.0.0.1:<local port> bound, watched), a
 * `listening on` line, then held until `signal` aborts or the session must
 * end; the grant revoked on every exit.
 *
 * Ends with a stable code (src/protocol/errors.ts) when the session cannot go
 * on: GRANT_EXPIRED at the grant's expiry, INVALID_STATE when the allocation
 * was released or failed, STALE_GENERATION when it moved to another
 * generation (a grant never spans a replacement); the scheduler's own code
 * when it refuses the grant.
 * Owns: the proxy's lines and its lifetime. Must never: bind anything but
 * loopback, or exit without trying to revoke.
 */
import type { NetworkInterfaceInfo } from "node:os";
import type { SchedulerClient } from "../client/index.ts";
import type { Clock } from "../protocol/clock.ts";
import type { ConnectionVerificationKeys } from "../protocol/connectionSignature.ts";
import type { Aead, RelayConnector, WgRandom } from "../wireguard/index.ts";
import { openAllocationPort } from "./allocationPort.ts";
import type { CandidateRefresh } from "./candidateRefresh.ts";
import type { VerifiedGrant } from "./grant.ts";

export { describePath, REVOKE_TIMEOUT_MS, WATCH_INTERVAL_MS } from "./allocationPort.ts";

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

/**
 * Runs until `signal` aborts (resolves after revoking) or the session must
 * end (rejects with a BeachballError, after revoking). Rejects before
 * binding anything when the grant is refused or fails verification.
 */
export async function runProxy(o: ProxyOptions, signal: AbortSignal): Promise<void> {
  const { onReady, ...portOptions } = o;
  const p = await openAllocationPort(portOptions);
  try {
    const g = p.grant.grant;
    o.log(
      `listening on 127.0.0.1:${p.port} → [${g.allocationAddress}]:${o.remotePort} on ${g.hostId} (grant ${g.grantId}, generation ${g.generation}, expires ${new Date(g.expiresAtMs).toISOString()})`,
    );
    onReady?.({ port: p.port, grant: p.grant });
    const aborted = new Promise<null>((resolve) => {
      if (signal.aborted) return resolve(null);
      signal.addEventListener("abort", () => resolve(null), { once: true });
    });
    const reason = await Promise.race([aborted, p.ended]);
    if (reason) throw reason;
  } finally {
    await p.close();
  }
}
