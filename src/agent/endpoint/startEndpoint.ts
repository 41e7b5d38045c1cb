/**
 * The real host endpoint for the agent daemon (src/agent/daemon.ts): turns
 * the agent's `connections` settings (src/agent/config.ts) into a started
 * HostEndpoint with the host key from `<dataDir>/wireguard/host.key`, the
 * fastest available AEAD, the system clock and randomness, the kernel
 * placement links, the machine's interface list, and relay sessions over
 * src/relayclient (certificates checked against the system's trust store
 * plus `connections.relayCaPath`).
 *
 * Owns: checking those settings (clear errors naming the field). Must
 * never: start with a verification key, STUN server or relay CA file it
 * could not parse.
 */
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { networkInterfaces } from "node:os";
import { DEFAULT_ENDPOINT_PORT } from "../../protocol/connection.ts";
import { isVerificationKey } from "../../protocol/connectionSignature.ts";
import { MAX_CONTROL_VERIFICATION_KEYS } from "../../protocol/control.ts";
import { parseStunServers, type StunServer } from "../../protocol/stunServers.ts";
import { relayConnector } from "../../relayclient/index.ts";
import { selectAead, systemSuspendAwareClock, systemRandom } from "../../wireguard/index.ts";
import type { AgentConnectionsConfig } from "../config.ts";
import type { AgentLog } from "../ports.ts";
import { HostEndpoint } from "./endpoint.ts";
import type { PlacementLookup } from "./grantCheck.ts";
import { loadOrCreateHostKey } from "./hostKey.ts";
import { kernelPlacementLinks } from "./placementLink.ts";

/** The checked settings: verification keys, listen address and port, STUN servers. Throws an Error naming the bad field. */
export function endpointSettings(c: AgentConnectionsConfig): {
  keys: Map<string, string>;
  listen: { hostname: string; port: number };
  stun: StunServer[];
} {
  const keys = new Map<string, string>();
  for (const [id, key] of Object.entries(c.verificationKeys ?? {})) {
    if (!/^[A-Za-z0-9._:-]{1,64}$/.test(id) || typeof key !== "string" || !isVerificationKey(key))
      throw new Error(
        `connections.verificationKeys.${id.slice(0, 64)}: not a base64 32-byte Ed25519 public key under a key ID of [A-Za-z0-9._:-]{1,64}`,
      );
    keys.set(id, key);
  }
  if (!keys.size)
    throw new Error("connections.verificationKeys: at least one key is needed, or no grant could ever be applied");
  if (keys.size > MAX_CONTROL_VERIFICATION_KEYS)
    throw new Error(
      `connections.verificationKeys: ${keys.size} keys; at most ${MAX_CONTROL_VERIFICATION_KEYS} (MAX_CONTROL_VERIFICATION_KEYS), the most a guest's control service is handed`,
    );
  const hostname = c.listenAddress ?? "0.0.0.0";
  if (!isIP(hostname)) throw new Error(`connections.listenAddress: ${JSON.stringify(hostname)} is not an IP address`);
  const port = c.listenPort ?? DEFAULT_ENDPOINT_PORT;
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new Error(`connections.listenPort: ${port} is not a port`);
  return { keys, listen: { hostname, port }, stun: parseStunServers(c.stunServers ?? [], "connections.stunServers") };
}

/** The PEM text of `connections.relayCaPath`, or undefined. Throws an Error naming the field when it cannot be read or holds no certificate. */
export function relayCaOf(c: AgentConnectionsConfig): string | undefined {
  if (c.relayCaPath === undefined) return undefined;
  let text: string;
  try {
    text = readFileSync(c.relayCaPath, "utf8");
  } catch (e) {
    throw new Error(`connections.relayCaPath: ${(e as Error).message}`);
  }
  if (!text.includes("-----BEGIN CERTIFICATE-----"))
    throw new Error(`connections.relayCaPath: ${c.relayCaPath} holds no PEM certificate`);
  return text;
}

/**
 * The startup error for the endpoint's UDP port being taken (EADDRINUSE):
 * names the address, the port and the fix. Two agents on one machine (two
 * host IDs, two data dirs) each need their own `connections.listenPort`.
 */
export function portInUseError(listen: { hostname: string; port: number }, cause: unknown): Error {
  return new Error(
    `connections.listenPort: UDP port ${listen.port} on ${listen.hostname} is already in use (another Beachball agent or a WireGuard interface on this machine?); ` +
      `give each agent on a machine its own connections.listenPort in its agent.json, or stop what holds the port (ss -ulpn 'sport = :${listen.port}')`,
    { cause },
  );
}

/** Starts the endpoint of host `hostId` (see the module header). Rejects on bad settings, an unreadable key file or a port in use (portInUseError). */
export async function startHostEndpoint(o: {
  hostId: string;
  dataDir: string;
  config: AgentConnectionsConfig;
  placements: PlacementLookup;
  onChange: () => void;
  log?: AgentLog;
}): Promise<HostEndpoint> {
  const s = endpointSettings(o.config);
  const ca = relayCaOf(o.config);
  const { aead } = await selectAead();
  return HostEndpoint.start({
    hostId: o.hostId,
    keyPair: loadOrCreateHostKey(o.dataDir, systemRandom),
    verificationKeys: s.keys,
    listen: s.listen,
    stunServers: s.stun,
    clock: systemSuspendAwareClock,
    random: systemRandom,
    aead,
    placements: o.placements,
    links: kernelPlacementLinks,
    interfaces: networkInterfaces,
    relayConnector: relayConnector(ca ? { ca } : {}),
    onChange: o.onChange,
    ...(o.log ? { onWarning: (msg: string, fields: Record<string, string>) => o.log!.warn(msg, fields) } : {}),
  }).catch((e: unknown) => {
    throw (e as { code?: string }).code === "EADDRINUSE" ? portInUseError(s.listen, e) : e;
  });
}
