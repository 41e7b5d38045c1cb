/**
 * Where one end of a tunnel can be reached, gathered on its one shared UDP
 * socket (spec "Data path": local and STUN-discovered candidates; "the
 * agent refreshes candidates every 20 seconds"): the interface addresses on
 * the socket's port (src/domain/candidates.ts) and the mapped address each
 * STUN server sees for that same socket, so the NAT mapping a candidate
 * names is the one WireGuard uses. Shared by the host endpoint
 * (src/agent/endpoint/endpoint.ts) and `bb proxy` (src/proxy/candidateRefresh.ts).
 *
 * Owns: asking STUN servers (at most MAX_STUN_SERVERS, in parallel, each
 * binding bounded by the socket's retransmission schedule) and the refresh
 * period. Pure apart from the socket and interface list, which are passed in.
 * Must never: ask from another socket than the tunnel's, publish a
 * loopback or link-local address, or reject (a server that does not answer
 * just yields no candidate).
 */
import { localCandidates, mergeCandidates, type InterfaceAddress } from "../domain/candidates.ts";
import type { Candidate } from "../protocol/connection.ts";
import { MAX_STUN_SERVERS, type StunServer } from "../protocol/stunServers.ts";
import { ipScope, isPeerAddress } from "../protocol/ipScope.ts";
import { fixHintFor } from "../domain/osErrorHint.ts";

/**
 * This machine's interface list through `enumerate` (os.networkInterfaces,
 * which throws "getifaddrs returned an error" when netlink is restricted).
 * On failure: calls `onError` with a message naming the cause and its fix,
 * and returns no interfaces, so gathering goes on with STUN candidates (and
 * the relay) instead of failing the whole endpoint or proxy.
 */
export function interfaceAddresses<T extends readonly InterfaceAddress[]>(
  enumerate: () => NodeJS.Dict<T>,
  onError: (message: string) => void,
): NodeJS.Dict<T> {
  try {
    return enumerate();
  } catch (e) {
    const what = e instanceof Error ? e.message : String(e);
    onError(
      `cannot list this machine's network interfaces (${what}); only STUN and relay candidates are offered; fix: ${fixHintFor(e, "check that getifaddrs(3) works for this process")}`,
    );
    return {};
  }
}

/** How often candidates are gathered again, ms (spec "Data path": every 20 seconds). */
export const CANDIDATE_REFRESH_MS = 20_000;

/** What gathering needs of the socket (src/wireguard/sharedSocket.ts SharedSocket). */
export interface CandidateSocket {
  readonly port: number;
  stunBinding(server: StunServer): Promise<{ address: string; port: number } | null>;
}

/**
 * Asks the first MAX_STUN_SERVERS of `servers` (in parallel) through
 * `binding`; the answers as `stun` candidates. An answer naming an address
 * no peer can be reached at (unspecified, multicast, broadcast:
 * src/protocol/ipScope.ts) or a link-local one is dropped: a binding
 * response is unauthenticated, and the other side would send to it. Never
 * rejects.
 */
export async function stunCandidates(
  servers: readonly StunServer[],
  binding: (s: StunServer) => Promise<{ address: string; port: number } | null>,
): Promise<Candidate[]> {
  const answers = await Promise.all(servers.slice(0, MAX_STUN_SERVERS).map((s) => binding(s).catch(() => null)));
  return answers
    .filter(
      (a): a is { address: string; port: number } =>
        a !== null && isPeerAddress(a.address) && ipScope(a.address) !== "link-local",
    )
    .map((a) => ({ address: a.address, port: a.port, kind: "stun" as const }));
}

/**
 * This end's candidates: STUN answers for `socket` first, then the local
 * addresses of `interfaces` of the family the socket bound to `bindHost`,
 * without duplicates, at most MAX_CANDIDATES. Never rejects.
 */
export async function gatherCandidates(
  socket: CandidateSocket,
  bindHost: string,
  interfaces: NodeJS.Dict<readonly InterfaceAddress[]>,
  servers: readonly StunServer[],
): Promise<Candidate[]> {
  const local = localCandidates(bindHost, socket.port, interfaces);
  const stun = await stunCandidates(servers, (s) => socket.stunBinding(s));
  return mergeCandidates(stun, local);
}
