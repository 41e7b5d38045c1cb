/**
 * The client's channel to the guest's control service (issue 20 "Exec and
 * files": never through the scheduler): openAllocationPort
 * (./allocationPort.ts) for GUEST_CONTROL_PORT, so a grant for that one
 * port, the in-process tunnel and a loopback port forwarding to
 * [allocationAddress]:7390. What it returns is all the control client
 * (src/client/control.ts) needs: a base URL on loopback and the value of the
 * `beachball-grant` header to send on every request.
 *
 * Owns: nothing beyond that naming. Must never: bind anything but loopback
 * (the URL is plain HTTP to 127.0.0.1; the tunnel carries it encrypted).
 */
import { CONTROL_GRANT_HEADER, GUEST_CONTROL_PORT } from "../protocol/control.ts";
import type { BeachballError } from "../protocol/errors.ts";
import type { PathState } from "../wireguard/index.ts";
import { openAllocationPort, type AllocationPort, type AllocationPortOptions } from "./allocationPort.ts";

/** Options of openControlChannel: those of openAllocationPort, less the port (always GUEST_CONTROL_PORT). */
export type ControlChannelOptions = Omit<AllocationPortOptions, "remotePort">;

/** An open channel to an allocation's control service. */
export interface ControlChannel {
  /** `http://127.0.0.1:PORT`: the control service, through the tunnel. */
  readonly baseUrl: string;
  /** Name of the header to send the grant in (CONTROL_GRANT_HEADER). */
  readonly grantHeaderName: typeof CONTROL_GRANT_HEADER;
  /** Its value on every request (base64url of the signed grant's canonical JSON). */
  readonly grantHeader: string;
  /** The underlying path (grant, path state, ending). */
  readonly port: AllocationPort;
  /** Settles once the channel can no longer go on (GRANT_EXPIRED, INVALID_STATE, STALE_GENERATION), or null after close(). */
  readonly ended: Promise<BeachballError | null>;
  /** The tunnel's current path. */
  path(): PathState;
  /** Ends the channel and revokes its grant. */
  close(): Promise<void>;
}

/**
 * Opens the channel. Rejects as openAllocationPort does (the scheduler's
 * code, or a grant verification code, before anything is bound).
 */
export async function openControlChannel(o: ControlChannelOptions): Promise<ControlChannel> {
  const port = await openAllocationPort({ ...o, remotePort: GUEST_CONTROL_PORT });
  return {
    baseUrl: `http://${port.host}:${port.port}`,
    grantHeaderName: CONTROL_GRANT_HEADER,
    grantHeader: port.grantHeader,
    port,
    ended: port.ended,
    path: () => port.path(),
    close: () => port.close(),
  };
}
