/**
 * The `BB_DEBUG_*` knobs, in one place (docs/operate.md, "Debug knobs"):
 * settings for measurements and diagnosis, unstable, not part of any
 * compatibility promise. Each is parsed here from an environment the caller
 * passes, so a role reads its knobs in one call and a test passes its own.
 * Must never: be needed by a production deployment, or change a security
 * decision.
 */
import { MAX_RELAY_FRAME_BYTES } from "./connection.ts";
import { MIN_TUNNEL_MTU, TUNNEL_MTU, WIREGUARD_OVERHEAD_BYTES } from "./tunnelMtu.ts";

/** Largest MTU BB_DEBUG_TUNNEL_MTU accepts, bytes: a full packet's datagram still fits one relay frame (1,468). */
export const MAX_DEBUG_TUNNEL_MTU = MAX_RELAY_FRAME_BYTES - WIREGUARD_OVERHEAD_BYTES;

/**
 * The tunnel MTU to use, bytes: BB_DEBUG_TUNNEL_MTU when set (bench/proxy.ts
 * compares MTUs with it; both ends of a session must be given the same
 * value), else TUNNEL_MTU. Throws RangeError when the value is not an integer
 * in MIN_TUNNEL_MTU..MAX_DEBUG_TUNNEL_MTU.
 */
export function debugTunnelMtu(env: Readonly<Record<string, string | undefined>>): number {
  const text = env["BB_DEBUG_TUNNEL_MTU"];
  if (text === undefined || text === "") return TUNNEL_MTU;
  const mtu = /^\d{1,5}$/.test(text) ? Number(text) : NaN;
  if (!(mtu >= MIN_TUNNEL_MTU && mtu <= MAX_DEBUG_TUNNEL_MTU))
    throw new RangeError(
      `BB_DEBUG_TUNNEL_MTU ${JSON.stringify(text)} is not an integer in ${MIN_TUNNEL_MTU}..${MAX_DEBUG_TUNNEL_MTU}`,
    );
  return mtu;
}
