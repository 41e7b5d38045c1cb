/**
 * What `bb exec` and `bb cp` share (issue 20, "Exec and files"): their
 * flags for reaching an allocation's control service, and opening it: the
 * client config and connection keys resolved as `bb proxy` resolves them
 * (./command.ts), the allocation ID (or a unique prefix), then
 * openControlChannel (grant for GUEST_CONTROL_PORT, in-process tunnel,
 * loopback port) and a ControlClient on it. The bytes go through the
 * tunnel to the guest, never through the scheduler, which only grants.
 * Must never: print the grant or a key; bind anything but loopback.
 */
import { consola } from "consola";
import { ControlClient, SchedulerClient } from "../client/index.ts";
import { clientArgs } from "../command/clientArgs.ts";
import { resolveClientConfig } from "../command/clientConfig.ts";
import { resolveAllocationId } from "../command/allocationId.ts";
import { relayConnector } from "../relayclient/index.ts";
import { selectAead, systemRandom, systemSuspendAwareClock } from "../wireguard/index.ts";
import { connectionKeysFrom, relayCaFrom } from "./command.ts";
import { openControlChannel, type ControlChannel } from "./controlChannel.ts";

/** The shared client flags without --json (exec and cp print the command's bytes, never a JSON result). */
const { json: _json, ...controlClientArgs } = clientArgs;

/** Flags of every command that talks to a guest's control service. */
export const controlArgs = {
  ...controlClientArgs,
  "connection-key": {
    type: "string",
    description: "Trusted grant-signing keys, KEYID=BASE64[,…] (or BB_CONNECTION_KEYS)",
  },
  "relay-ca": {
    type: "string",
    valueHint: "FILE",
    description: "PEM CA certificates to trust for relays, besides the system's (or BB_RELAY_CA)",
  },
} as const;

/** The values of controlArgs as a command receives them. */
export type ControlArgValues = {
  scheduler?: string | undefined;
  token?: string | undefined;
  "connection-key"?: string | undefined;
  "relay-ca"?: string | undefined;
};

/** An open control client and the channel under it (close the channel when done). */
export interface OpenControl {
  client: ControlClient;
  channel: ControlChannel;
  allocationId: string;
}

/**
 * Opens the control service of `allocation` (an ID or a unique prefix).
 * Throws a UsageError for missing keys or a bad flag, and the scheduler's
 * BeachballError when it refuses the allocation or the grant.
 */
export async function openControl(args: ControlArgValues, allocation: string): Promise<OpenControl> {
  const cfg = resolveClientConfig(args);
  const keys = connectionKeysFrom(args["connection-key"], cfg.connectionKeys);
  const ca = relayCaFrom(args["relay-ca"]);
  const scheduler = new SchedulerClient(cfg.schedulerUrl, cfg.token, { origin: cfg.urlOrigin });
  const allocationId = await resolveAllocationId(scheduler, allocation);
  const { aead } = await selectAead();
  const channel = await openControlChannel({
    client: scheduler,
    allocationId,
    keys,
    clock: systemSuspendAwareClock,
    random: systemRandom,
    aead,
    relayConnector: relayConnector(ca ? { ca } : {}),
    log: (line) => consola.debug(line),
  });
  return { client: new ControlClient(channel.baseUrl, channel.grantHeader), channel, allocationId };
}
