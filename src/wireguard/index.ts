/**
 * The public surface of the WireGuard library (docs/architecture.md,
 * "Private networking"; whitepaper: J. A. Donenfeld, "WireGuard: Next
 * Generation Kernel Network Tunnel"). Roles (host endpoint, relay, proxy)
 * import from here, not from the files behind it.
 *
 * Owns: nothing but re-exports. Must never: import a role (src/agent,
 * src/scheduler, src/cli); the architecture test checks it.
 */
export { Device, Peer, type DeviceIo, type DeviceOptions, type Endpoint, type PeerOptions } from "./device.ts";
export { DROP_REASONS, type DeviceCounters, type DropReason } from "./counters.ts";
export { selectAead, type AeadSelection } from "./aead/select.ts";
export type { Aead, AeadProviderName } from "./aead/aead.ts";
export { startUdpDevice, udpEndpoint, type UdpDevice, type UdpDeviceOptions, type UdpEndpoint } from "./udp.ts";
export { DeviceTimerDriver } from "./timerDriver.ts";
export { HandshakeLoadMeter, fixedLoad, type LoadPolicy } from "./load.ts";
export { DEFAULT_LIMITS, type WgLimits } from "./limits.ts";
export { systemSuspendAwareClock, systemRandom, type WgRandom } from "./ports.ts";
export { keyPairFromPrivate, type KeyPair25519 } from "./x25519.ts";
export { MultipathDevice, type MultipathOptions } from "./multipath.ts";
export {
  PathSelector,
  relayPath,
  udpPath,
  unknownPath,
  type PathEndpoint,
  type PathIo,
  type PathState,
  type RelayPath,
  type UdpPath,
} from "./paths.ts";
export { openSharedSocket, SharedSocket, type SharedSocketCounters, type SharedSocketOptions } from "./sharedSocket.ts";
export { MultipathTunnel, MAX_ALARM_MS, type MultipathTunnelOptions, type PeerRelay } from "./multipathTunnel.ts";
export {
  MAX_RELAY_SESSIONS,
  MAX_RELAYS_PER_PEER,
  RELAY_PERMANENT_CODES,
  RELAY_RECONNECT_MAX_MS,
  RELAY_RECONNECT_MIN_MS,
  RelaySessions,
  type RelayConnector,
  type RelayLink,
  type RelaySessionInfo,
  type RelaySessionState,
} from "./relaySessions.ts";
export {
  CANDIDATE_REFRESH_MS,
  gatherCandidates,
  interfaceAddresses,
  stunCandidates,
  type CandidateSocket,
} from "./candidates.ts";
